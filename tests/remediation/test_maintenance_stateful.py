"""The rolling-maintenance machine under a Hypothesis state machine: a small simulated
scheduler (8 nodes on 2 leaves, jobs that acknowledge checkpoints or end, operations and
suites that pass or fail, faults, operator calls, the global pause, and kill -9: a tick
whose effects were carried out only in part and whose new states were never committed)
drives ``machine.advance`` the way the runner does. After every step:

- the budget is never exceeded by maintenance: a node is only admitted within every budget,
  and while faults hold the nodes out over a budget no node of the run sits drained
  without its operation started (faults win: those are given back);
- faults win: a node the fault path holds is never drained, operated on or released by the
  run unless its operation had already started;
- no job is requeued without its checkpoint ack unless the run or the node was forced and
  its deadline passed;
- and at the end (faults cleared, jobs acknowledging, tools answering) the run, resumed from
  whatever was last committed, finishes: every node done, failed (kept out) or skipped, and
  no node left drained by the run.
"""

from __future__ import annotations

import dataclasses

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from remediation.maintenance import machine, planner
from remediation.maintenance.model import (
    DONE,
    DRAINING,
    FAILED,
    FINAL,
    IN_FLIGHT,
    OPERATING,
    SKIPPED,
    VALIDATING,
    YIELDABLE,
    Effect,
    NodeRun,
    Operation,
    Run,
    Spec,
    World,
)
from remediation.model import Job, NodeView
from remediation.policy import Budget
from tests.remediation.helpers import live_policy

NODES = [f"n{i}" for i in range(8)]
LEAF = {n: f"leaf-{i // 4}" for i, n in enumerate(NODES)}
POLICY = live_policy(fleet_budget=Budget(1.0, 3), domain_budgets={"leaf": Budget(1.0, 2)})
node_st = st.sampled_from(NODES)


class Sim:
    """The scheduler and tools the machine's effects act on."""

    def __init__(self) -> None:
        self.drained: dict[str, str] = {}  # node -> "maint" | "fault" | "other"
        self.faulted: set[str] = set()
        self.jobs: dict[str, set[str]] = {n: {f"j{n}a", f"j{n}b"} for n in NODES[:6]}
        self.signalled: set[str] = set()
        self.acked: set[str] = set()
        self.op: dict[str, str] = {}
        self.val: dict[str, str] = {}
        self.kept: set[str] = set()
        self.requeues: list[tuple[str, bool]] = []  # (job, acked when requeued)

    def world(self, now: float, paused: bool) -> World:
        fleet = tuple(
            NodeView(n, n in self.drained, self.drained.get(n) in ("maint", "fault"),
                     "gpuwarden: x" if n in self.drained else "", {"leaf": LEAF[n]})
            for n in NODES
        )  # fmt: skip
        jobs = {
            n: tuple(Job(j, "RUNNING", (n,)) for j in sorted(js)) for n, js in self.jobs.items()
        }
        return World(now, paused, fleet, frozenset(self.faulted), jobs, frozenset(self.acked),
                     dict(self.op), dict(self.val))  # fmt: skip

    def apply(self, e: Effect) -> None:
        n = e.node
        if e.kind == "drain":
            assert n not in self.faulted, f"drained {n} held by the fault path"
            self.drained.setdefault(n, "maint")
        elif e.kind == "release":
            assert n not in self.faulted, f"released {n} held by the fault path"
            if self.drained.get(n) == "maint":
                del self.drained[n]
        elif e.kind == "checkpoint":
            self.signalled.add(e.job)
        elif e.kind == "requeue":
            self.requeues.append((e.job, e.job in self.acked))
            self.jobs.get(n, set()).discard(e.job)
        elif e.kind == "operate":
            self.op.setdefault(n, "running")
        elif e.kind == "validate":
            self.val.setdefault(n, "running")
        elif e.kind == "keep_out":
            self.kept.add(n)


class MaintenanceMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.sim, self.now, self.paused = Sim(), 1000.0, False
        self.run: Run | None = None
        self.forced_at: dict[str, float] = {}

    @rule(
        nodes=st.lists(node_st, min_size=1, max_size=8, unique=True),
        wave=st.integers(1, 4),
        suite=st.booleans(),
        force=st.booleans(),
        failures=st.integers(0, 2),
    )
    @precondition(lambda self: self.run is None)
    def start(self, nodes: list[str], wave: int, suite: bool, force: bool, failures: int) -> None:
        fleet = self.sim.world(self.now, False).fleet
        spec = Spec(tuple(nodes), Operation("command", ("true",)), wave, failures, 50.0,
                    "s" if suite else "", force)  # fmt: skip
        waves = planner.waves(spec.nodes, fleet, wave, POLICY)
        self.run = Run(1, spec, "running",
                       tuple(NodeRun(n, w) for w, ns in enumerate(waves) for n in ns), self.now)  # fmt: skip

    @rule()
    @precondition(lambda self: self.run is not None)
    def tick(self) -> None:
        self._tick(crash_after=None)

    @rule(k=st.integers(0, 6))
    @precondition(lambda self: self.run is not None)
    def tick_killed(self, k: int) -> None:
        """kill -9 during a tick: ``k`` effects carried out, the new states not committed."""
        self._tick(crash_after=k)

    def _tick(self, crash_after: int | None) -> None:
        assert self.run is not None
        before = self.run
        world = self.sim.world(self.now, self.paused)
        new, effects = machine.advance(before, world, POLICY)
        for e in effects:
            if e.kind == "requeue" and e.job not in self.sim.acked:
                n = before.node(e.node)
                forced = before.spec.force or (n is not None and n.forced)
                assert forced and self.now >= (n.deadline if n else 0), f"{e.job} killed"
        self._check_admissions(before, new, world)
        for i, e in enumerate(effects):
            if crash_after is not None and i >= crash_after:
                return  # the process died: the journal still holds ``before``
            self.sim.apply(e)
        self.run = new

    def _check_admissions(self, before: Run, after: Run, world: World) -> None:
        out = frozenset(self.sim.drained) | self.sim.faulted
        mine = after.in_flight()
        admitted = {n.node for n in after.nodes if n.state == DRAINING} - before.in_flight()
        if admitted:
            assert not planner.violations(out | mine, world.fleet, POLICY), (admitted, out, mine)
        for n in after.nodes:
            if n.node in self.sim.faulted and not world.paused:
                assert n.state not in YIELDABLE, f"{n.node} held by a fault still {n.state}"

    @invariant()
    def over_budget_only_by_faults_and_started_operations(self) -> None:
        if self.run is None or self.paused:
            return
        out = frozenset(self.sim.drained) | self.sim.faulted
        fleet = self.sim.world(self.now, False).fleet
        if planner.violations(out, fleet, POLICY):
            yieldable = [n.node for n in self.run.nodes if n.state in YIELDABLE
                         and self.sim.drained.get(n.node) == "maint"]  # fmt: skip
            # a tick since the last fault gives them back; before it they may still be out
            assert not yieldable or self.pending_yield, (yieldable, out)

    pending_yield = False

    @rule(node=node_st)
    def fault(self, node: str) -> None:
        self.sim.faulted.add(node)
        self.sim.drained[node] = "fault"
        self.pending_yield = True

    @rule(node=node_st)
    def fault_cleared(self, node: str) -> None:
        if node in self.sim.faulted:
            self.sim.faulted.discard(node)
            if self.sim.drained.get(node) == "fault":
                del self.sim.drained[node]

    @rule(data=st.data())
    def job_acks(self, data: st.DataObject) -> None:
        waiting = sorted(self.sim.signalled - self.sim.acked)
        if waiting:
            self.sim.acked.add(data.draw(st.sampled_from(waiting)))

    @rule(data=st.data())
    def job_ends(self, data: st.DataObject) -> None:
        running = sorted((n, j) for n, js in self.sim.jobs.items() for j in js)
        if running:
            n, j = data.draw(st.sampled_from(running))
            self.sim.jobs[n].discard(j)

    @rule(node=node_st, ok=st.booleans())
    def tool_finishes(self, node: str, ok: bool) -> None:
        if self.sim.op.get(node) == "running":
            self.sim.op[node] = "ok" if ok else "failed: exit 1"
        elif self.sim.val.get(node) == "running":
            self.sim.val[node] = "passed" if ok else "failed: busbw 10 < 300"

    @rule(dt=st.sampled_from([1.0, 30.0, 100.0]))
    def time_passes(self, dt: float) -> None:
        self.now += dt

    @rule()
    def toggle_global_pause(self) -> None:
        self.paused = not self.paused

    @rule(node=node_st, choice=st.sampled_from(["skip", "force"]))
    @precondition(lambda self: self.run is not None)
    def operator_decides(self, node: str, choice: str) -> None:
        assert self.run is not None
        try:
            new, effects = machine.decide(self.run, node, choice, self.now)
        except ValueError:
            return
        if choice == "skip" and node in self.sim.faulted:
            effects = []  # the runner never releases a node the fault path holds
        for e in effects:
            self.sim.apply(e)
        self.run = new

    def teardown(self) -> None:
        if self.run is None:
            return
        self.sim.faulted.clear()
        self.sim.drained = {n: o for n, o in self.sim.drained.items() if o == "maint"}
        self.paused = False
        for _ in range(200):
            self.sim.acked |= self.sim.signalled
            for d in (self.sim.op, self.sim.val):
                for n, v in d.items():
                    if v == "running":
                        d[n] = "ok" if d is self.sim.op else "passed"
            self.now += 60
            self.pending_yield = False
            self._tick(None)
            assert self.run is not None
            if self.run.state in ("done", "stopped") and all(
                n.state in FINAL for n in self.run.nodes
            ):
                break
        assert self.run is not None
        assert all(n.state in FINAL for n in self.run.nodes), self.run.nodes
        for nr in self.run.nodes:
            if nr.state in (DONE, SKIPPED):
                assert self.sim.drained.get(nr.node) != "maint", f"{nr.node} left drained"
            if nr.state == FAILED:
                assert nr.node in self.sim.kept and nr.node in self.sim.drained
        assert not [j for j, acked in self.sim.requeues if not acked and not self.run.spec.force
                    and not any(x.forced for x in self.run.nodes)]  # fmt: skip

    @rule()
    def tick_clears_pending_yield(self) -> None:
        if self.run is not None and not self.paused:
            self._tick(None)
            self.pending_yield = False


_ = (IN_FLIGHT, OPERATING, VALIDATING, dataclasses)
TestMaintenanceMachine = MaintenanceMachine.TestCase
TestMaintenanceMachine.settings = settings(max_examples=100, stateful_step_count=30,
                                           deadline=None, report_multiple_bugs=False)  # fmt: skip
