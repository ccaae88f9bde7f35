"""The rails hold under any interleaving: a hypothesis state machine drives the engine and
executor (with the real Slurm backend code over a fault-injecting fake slurmctld) through
valid and garbage alerts, resolutions, manual releases, pauses, breaker resets, clock
jumps, restarts rebuilt from the journal, acks, faults and operators acting behind our back;
validation runs before release (a fake suite runner that passes, fails, hangs, cannot be
stopped or whose scheduler does not answer), checkpoint-storage alerts (any spelling of
the mount), out-of-order webhook deliveries (a firing replayed after its resolve) and soft
``avoid`` alerts beside the hard ones (a placement tier; never what holds a node out).

CI runs ``GPUWARDEN_SOAK_EXAMPLES`` (default 200) examples; ``make soak`` runs 20,000.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from remediation import ordering
from remediation import policy as policy_mod
from remediation.backends.base import Unavailable
from remediation.backends.slurm import SlurmBackend
from remediation.clock import FakeClock
from remediation.engine import REFIRE_HOLDS, Engine
from remediation.executor import Executor
from remediation.journal import HELD_STATES, Journal
from remediation.metrics import Metrics
from remediation.model import Alert, Verdict
from remediation.placement.manager import Placement
from remediation.placement.projection import RecordOnly
from remediation.validation.release import PAGE_AFTER, Validator
from remediation.validation.slurm import SchedulerUnknown
from remediation.validation.suite import StepRun
from tests.remediation.fakeslurm import FakeJob, FakeSlurm

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"
PASSING, FAILING = (
    (FIX / "all_reduce_perf-8gpu.txt").read_text(),
    (FIX / "all_reduce_perf-slow.txt").read_text(),
)

NODES = [f"gpu-node-{i:03d}" for i in range(1, 13)]
TOPOLOGY = {
    n: {"leaf": f"leaf-{i // 4}", "nvlink_domain": f"cluster-0.{i // 6}"}
    for i, n in enumerate(NODES)
}
FLEET_LIMIT, LEAF_LIMIT, QUIET_S, TICK_S = 4, 2, 120.0, 5.0
POLICY = """
dry_run: false
auto_release: true
rules:
  - match: {fault_class: "~xid_fatal|memory"}
    allow: [notify, cordon, drain, requeue, checkpoint_restart, reboot, inspect]
  - match: {fault_class: pcie}
    allow: [notify]
  - match: {action: avoid}
    allow: [avoid]
  - match: {}
    allow: [notify]
ladders:
  xid_fatal: [drain, checkpoint_restart, reboot, inspect]
  memory: [checkpoint_restart, requeue, inspect]
  pcie: [drain]
inspect_after: 4
budgets:
  fleet: {max_fraction: 0.5, max_nodes: 4}
  domains: {leaf: {max_fraction: 0.5, max_nodes: 2}}
  per_job_max_nodes: 1
rate_limit: {max_actions: 100, window_s: 60}
storm: {max_nodes: 3, window_s: 60, quiet_s: 120}
probation_s: 60
incident_window_s: 120
retry: {max_attempts: 2, backoff_s: 5}
checkpoint: {ack_dir: ACKS, deadline_s: 30, on_timeout: requeue, restart_deadline_s: 60,
             mount: /mnt/ckpt}
validation:
  suites:
    check:
      - {name: nccl, command: [all_reduce_perf], timeout_s: 100, parser: nccl-tests,
         min: {busbw_at_max_size_gbps: 400}}
  fault_classes: {xid_fatal: check}
  max_attempts: 2
"""


class FakeSuite:
    """A suite runner whose runs end when the test says: pass, fail or never; its stop can
    fail (the scheduler does not confirm) and its reads can be unanswered."""

    def __init__(self) -> None:
        self.outcome = "pass"  # pass | fail | hang: what a run started now does
        self.unknown = False  # poll: the scheduler does not answer
        self.stop_fails = False
        self.runs: dict[int, str] = {}
        self.stopped: set[int] = set()
        self.paused: Callable[[], bool] = lambda: False
        self.started_paused: list[str] = []  # nodes whose suite started while paused

    def start(self, node: str, suite: object, run_id: str, view: object) -> dict[str, int]:
        if self.paused():
            self.started_paused.append(node)
        n = len(self.runs) + 1
        self.runs[n] = self.outcome
        return {"n": n}

    def poll(self, handle: dict[str, int]) -> list[StepRun] | None:
        if self.unknown:
            raise SchedulerUnknown("squeue: Unable to contact slurm controller (injected)")
        outcome = self.runs[handle["n"]]
        if outcome == "hang":
            return None
        return [StepRun(0, PASSING if outcome == "pass" else FAILING)]

    def stop(self, handle: dict[str, int], verdict: str | None) -> None:
        if self.stop_fails:
            raise OSError("scontrol: Socket timed out on send/recv (injected)")
        self.stopped.add(handle["n"])

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        if self.stop_fails:
            raise OSError("scontrol: Socket timed out on send/recv (injected)")


VERBS = ["sinfo", "squeue", "drain", "resume", "requeuehold", "job_update", "release", "scancel"]
LIVE = ("pending", "waiting", "paused", "retry", "deferred")


class Rails(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="gpuwarden-rails-"))
        (self.dir / "acks").mkdir()
        self.policy = policy_mod.loads(POLICY.replace("ACKS", str(self.dir / "acks")))
        self.clock = FakeClock()
        self.slurm = FakeSlurm(NODES)
        self.foreign: dict[str, str] = {}  # node -> reason an operator drained it with
        self.firing: dict[str, Alert] = {}
        self.resolved: list[Alert] = []  # for out-of-order replays of their firing
        self.suite = FakeSuite()
        self.seq = 0
        self.domain_down: dict[str, Alert] = {}  # fingerprint -> firing domain alert
        self.down_after: dict[str, int] = {}  # domain -> the last action id before it fell
        self.released_paused: list[str] = []  # releases by gpuwarden itself while paused
        self.released_firing: list[str] = []  # releases of a node with a fault firing
        self.judged: set[str] = set()  # nodes the tick gated or tried to release
        self._build()

    def _build(self) -> None:
        self.journal = Journal(self.dir / "state.db")
        self.backend = SlurmBackend(self.slurm, TOPOLOGY, requeue_wait_s=10)
        self.engine = Engine(self.journal, self.backend, self.policy, self.clock, Metrics())
        self.engine.validator = Validator(self.engine, self.suite)
        self.suite.paused = lambda: self.engine.paused
        self.engine.placement = Placement(self.journal, self.policy.placement,
                                          RecordOnly(lambda: NODES), self.clock.now,
                                          self.engine.metrics, dry_run=True)  # fmt: skip
        self._watch_releases()
        self.executor = Executor(
            self.journal, self.backend, self.policy, self.clock.now, lambda: self.engine.paused
        )

    def _watch_releases(self) -> None:
        """Record every release gpuwarden makes by itself (not an operator's) while paused,
        and every one of a node with an alert still firing (a fault, or a hold: "no
        probation or release while this fires"; the invariants read them;
        an assert here would be swallowed as a runner error by the validator's tick)."""
        engine, release = self.engine, self.engine.release
        validator = engine.validator
        gate = validator.gate

        def watched(node: str, manual: bool, who: str = "api") -> Verdict:
            if who != "op":
                self.judged.add(node)
                if engine.paused:
                    self.released_paused.append(f"{node} by {who}")
                if firing := self._hard_firing(node):  # faults, holds (never an avoid)
                    self.released_firing.append(f"{node} by {who}: {sorted(firing)}")
            return release(node, manual, who)

        def gated(r: dict[str, object], *args: object) -> bool:
            self.judged.add(str(r["node"]))
            return bool(gate(r, *args))

        engine.release = watched  # type: ignore[method-assign]
        validator.gate = gated  # type: ignore[method-assign]

    def _hard_firing(self, node: str) -> set[str]:
        """The node's alerts firing by the journal, less the soft (avoid) ones."""
        return {fp for fp in self.journal.firing_fingerprints(node) if not fp.startswith("avoid-")}

    def _open_faults(self, node: str) -> set[str]:
        """The node's fault alerts (not storage, domain or hold ones) firing, by the journal."""
        return {fp for fp in self.journal.firing_fingerprints(node) if fp.startswith(node + "-")}

    def teardown(self) -> None:
        self.journal.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @initialize(jobs=st.lists(st.sampled_from(NODES), max_size=6, unique=True))
    def start_jobs(self, jobs: list[str]) -> None:
        for i, node in enumerate(jobs):
            self.slurm.jobs[str(100 + i)] = FakeJob("RUNNING", [node])

    # ------------------------------------------------------------------ alerts
    def _send(self, *alerts: Alert) -> None:
        self.journal.accept(alerts, self.clock.now())
        self._decide_waiting()

    def _decide_waiting(self) -> None:
        """What the worker does (Worker.drain): decide in order; a bug is recorded, never
        lost; a scheduler that does not answer leaves the alert waiting, undecided, and
        after it only alerts of no node (domain, storage) are decided."""
        missed = False
        for _, a in self.journal.todo(1000):
            if missed and a.node:
                continue
            try:
                self.engine.decide(a)
            except Unavailable:
                missed = True
            except Exception as e:
                self.engine.record_error(a, e)

    @rule(
        node=st.sampled_from(NODES),
        fc=st.sampled_from(["xid_fatal", "memory", "pcie"]),
        gpu=st.integers(0, 3),
        action=st.sampled_from(["drain", "checkpoint_restart", "requeue", "notify"]),
        then_run=st.booleans(),
    )
    def fire(self, node: str, fc: str, gpu: int, action: str, then_run: bool) -> None:
        fp = f"{node}-{fc}-{gpu}"
        a = self.firing.get(fp)
        if a is None:
            self.seq += 1
            labels = {"alertname": "X", "node": node, "fault_class": fc, "action": action}
            a = Alert(fp, f"2026-01-01T00:00:{self.seq:02d}Z#{self.seq}", "firing", labels)
            self.firing[fp] = a
        self._send(a)  # a new alert, or Alertmanager's repeat of a firing one
        if then_run:
            self.run_actions()

    @rule(nodes=st.lists(st.sampled_from(NODES), min_size=4, max_size=8, unique=True))
    def storm(self, nodes: list[str]) -> None:
        for node in nodes:
            self.fire(node, "xid_fatal", 0, "drain", False)

    @rule(
        garbage=st.sampled_from(
            [
                {"node": "ghost-1", "fault_class": "xid_fatal", "action": "drain"},
                {"node": "gpu-node-001", "fault_class": "cosmic", "action": "drain"},
                {"node": "gpu-node-002", "fault_class": "xid_fatal", "action": "nuke"},
                {"node": "bad node;", "fault_class": "xid_fatal", "action": "drain"},
                {"fault_class": "xid_fatal", "action": "drain"},
            ]
        )
    )
    def fire_garbage(self, garbage: dict[str, str]) -> None:
        self.seq += 1
        self._send(Alert(f"junk{self.seq}", "2026-01-01T00:00:00Z", "firing", garbage))

    @rule(node=st.sampled_from(NODES))
    def fire_hold(self, node: str) -> None:
        labels = {"node": node, "fault_class": "unwatched", "action": "hold"}
        a = Alert(f"hold-{node}", "2026-01-01T00:00:00Z", "firing", labels)
        self.firing[a.fingerprint] = a
        self._send(a)

    @rule(
        node=st.sampled_from(NODES),
        then=st.sampled_from(["", "fault", "probation"]),
        pct=st.sampled_from(["99.5", "99.9%", "NaN%", "+Inf%"]),  # NaN: humanizePercentage's
        size=st.sampled_from(["12", "+Inf", "NaN"]),
    )
    def fire_avoid(self, node: str, then: str, pct: str = "99.5", size: str = "12") -> None:
        """Marginal evidence (GpuwardenMarginalNode: de-prefer, never drain), alone or beside
        a hard fault of the same node (that may resolve and pass its probation at once)."""
        fp = f"avoid-{node}"
        a = self.firing.get(fp)
        if a is None:
            self.seq += 1
            labels = {"alertname": "GpuwardenMarginalNode", "node": node,
                      "fault_class": "marginal", "action": "avoid"}  # fmt: skip
            ann = {"peer_percentile": pct, "group_size": size, "value": "0.03"}
            a = Alert(fp, f"2026-01-01T00:00:{self.seq:02d}Z#{self.seq}", "firing", labels, ann)
            self.firing[fp] = a
        self._send(a)
        if then == "fault":
            self.fire(node, "xid_fatal", 0, "drain", True)
        elif then == "probation":
            self.through_probation(node)

    @precondition(lambda self: bool(self.firing))
    @rule(data=st.data())
    def resolve(self, data: st.DataObject) -> None:
        fp = data.draw(st.sampled_from(sorted(self.firing)))
        a = self.firing.pop(fp)
        self._send(Alert(a.fingerprint, a.starts_at, "resolved", a.labels))
        self.resolved.append(a)

    @precondition(lambda self: bool(self.resolved))
    @rule(data=st.data(), resolve_again=st.booleans(), late=st.booleans())
    def replay_out_of_order(self, data: st.DataObject, resolve_again: bool, late: bool) -> None:
        """Alertmanager's retry of a firing delivered after its resolve (and maybe the
        resolve repeated): the node's state and its actions do not move. Heard longer after
        the resolve than a retry can lag, it is the same alert firing again (its source
        kept firing while Alertmanager could not hear it): a node held for it is held
        again, with no new action or incident."""
        a = data.draw(st.sampled_from(self.resolved))
        if a.fingerprint in self.firing:
            return  # fired again since (a new instance): not a replay
        if late:
            self.clock.advance(ordering.REFIRE_AFTER_S + 1)
        heard = self.journal.scalar(
            "SELECT MIN(received_at) FROM alerts WHERE fingerprint=? AND starts_at=? AND "
            "status='resolved' AND stale=0",
            (a.fingerprint, a.starts_at),
        )
        refire = heard is not None and self.clock.now() - heard > ordering.REFIRE_AFTER_S
        count = "SELECT (SELECT COUNT(*) FROM actions) || '/' || (SELECT COUNT(*) FROM incidents)"
        before = self.journal.node(a.node), self.journal.scalar(count)
        self._send(a)
        after = self.journal.node(a.node), self.journal.scalar(count)
        if not refire:
            assert after == before, f"a stale firing of {a.fingerprint} moved {a.node}"
        else:
            self.firing[a.fingerprint] = a  # firing again, until its resolve
            hard = a.labels.get("action") not in ("avoid", "hold", "notify")  # a fault's
            if hard and before[0] is not None and before[0]["state"] in REFIRE_HOLDS:
                assert after[1] == before[1], f"a re-fire of {a.fingerprint} counted as new"
                assert after[0] is not None and after[0]["state"] in ("quarantined",
                                                                      "inspection"), after[0]  # fmt: skip
        if resolve_again:
            self.firing.pop(a.fingerprint, None)
            self._send(Alert(a.fingerprint, a.starts_at, "resolved", a.labels))

    @rule(
        mount=st.sampled_from(["/mnt/ckpt", "/mnt/ckpt/", "/mnt//ckpt", "/scratch"]),
        firing=st.booleans(),
    )
    def storage_alert(self, mount: str, firing: bool) -> None:
        labels = {"alertname": "CheckpointStorageDegraded", "fault_class": "storage",
                  "scope": "cluster", "mount": mount, "action": "notify"}  # fmt: skip
        fp = f"storage-{mount}"
        self._send(Alert(fp, "2026-01-01T00:00:00Z", "firing" if firing else "resolved", labels))

    @rule(
        dom=st.sampled_from(["cluster-0.0", "cluster-0.1"]),
        name=st.sampled_from(["NvlinkDomainFabricDegraded", "ImexDomainDown"]),
        firing=st.booleans(),
    )
    def domain_alert(self, dom: str, name: str, firing: bool) -> None:
        """A whole NVLink domain down (scope=domain, no node label) or back."""
        fp = f"{name}-{dom}"
        a = self.domain_down.get(fp)
        if firing and a is None:
            self.seq += 1
            labels = {"alertname": name, "scope": "domain", "nvlink_domain": dom,
                      "fault_class": "switch", "action": "notify"}  # fmt: skip
            a = Alert(fp, f"2026-01-01T00:00:{self.seq:02d}Z#{self.seq}", "firing", labels)
            if not any(x.labels["nvlink_domain"] == dom for x in self.domain_down.values()):
                last = self.journal.scalar("SELECT MAX(id) FROM actions")
                self.down_after[dom] = int(last or 0)
            self.domain_down[fp] = a
        if a is None:
            return
        if not firing:
            a = self.domain_down.pop(fp)
            if not any(x.labels["nvlink_domain"] == dom for x in self.domain_down.values()):
                self.down_after.pop(dom, None)
            a = Alert(a.fingerprint, a.starts_at, "resolved", a.labels)
        self._send(a)

    @rule(node=st.sampled_from(NODES))
    def through_probation(self, node: str) -> None:
        """A fault, its action, its resolve and the probation's end in one step: the tick
        starts a validation run (the other rules then interleave with it)."""
        self.fire(node, "xid_fatal", 0, "drain", True)
        fp = f"{node}-xid_fatal-0"
        if fp in self.firing:
            a = self.firing.pop(fp)
            self._send(Alert(a.fingerprint, a.starts_at, "resolved", a.labels))
            self.resolved.append(a)
        self.clock.advance(61)
        self.tick()

    @rule(
        outcome=st.sampled_from(["pass", "pass", "fail", "hang"]),
        unknown=st.sampled_from([False, False, True]),
        stop_fails=st.sampled_from([False, False, True]),
    )
    def suite_behaviour(self, outcome: str, unknown: bool, stop_fails: bool) -> None:
        self.suite.outcome, self.suite.unknown, self.suite.stop_fails = outcome, unknown, stop_fails

    # ------------------------------------------------------------------ operators
    @rule(node=st.sampled_from(NODES))
    def release(self, node: str) -> None:
        self.engine.release(node, manual=True, who="op")

    @rule(paused=st.sampled_from([False, False, True]))
    def pause(self, paused: bool) -> None:
        self.engine.set_paused(paused, "op")

    @rule()
    def reset_breaker(self) -> None:
        self.engine.reset_breaker("op")

    @rule(node=st.sampled_from(NODES), drain=st.booleans())
    def behind_our_back(self, node: str, drain: bool) -> None:
        n = self.slurm.nodes[node]
        if drain and not n.flags:
            n.flags.add("DRAIN")
            n.reason = self.foreign[node] = "operator: replacing fan"
        elif not drain and node in self.foreign:
            n.flags.discard("DRAIN")
            n.reason = ""
            del self.foreign[node]

    # ------------------------------------------------------------------ the world
    @rule(seconds=st.sampled_from([1.0, 5.0, 31.0, 61.0, 130.0, 400.0]))
    def advance(self, seconds: float) -> None:
        self.clock.advance(seconds)

    @rule(
        fail=st.sets(st.sampled_from(VERBS), max_size=2),
        partial=st.sets(st.sampled_from(["drain", "requeuehold", "job_update"]), max_size=1),
        raise_on=st.sets(st.sampled_from(["scancel", "resume"]), max_size=1),
    )
    def faults(self, fail: set[str], partial: set[str], raise_on: set[str]) -> None:
        self.slurm.fail, self.slurm.partial, self.slurm.raise_on = fail, partial, raise_on
        self._decide_waiting()  # the worker's next cycle

    @rule()
    def heal(self) -> None:
        self.slurm.fail, self.slurm.partial, self.slurm.raise_on = set(), set(), set()
        self.suite.unknown = self.suite.stop_fails = False
        self._decide_waiting()

    @rule()
    def ack_all(self) -> None:
        for jid, job in self.slurm.jobs.items():
            if job.signals:
                (self.dir / "acks" / f"{jid}.ack").write_text("{}")

    @rule(ticks=st.sampled_from([0, 0, 1, 3]))
    def slow_requeues(self, ticks: int) -> None:
        """A requeued job stays COMPLETING for some ticks before PENDING (real Slurm does)."""
        self.slurm.completing = ticks

    @rule()
    def restart(self) -> None:
        """kill -9 between steps: everything is rebuilt from the journal file, and the
        worker's start-up pass reconciles every interrupted action against the scheduler."""
        self.journal.close()
        self._build()
        self.run_actions()
        self.the_journal_agrees_with_the_scheduler()

    def the_journal_agrees_with_the_scheduler(self) -> None:
        """After reconciliation: a node the journal says we drained is drained with our
        reason, a node drained with our reason is one the journal holds (or one with a live
        action, e.g. the undo of a superseded drain being retried), and every held job is
        held by a saga of the journal that is live or paged."""
        j = self.journal
        for n in NODES:
            rec = j.node(n)
            latest = j.rows(
                "SELECT a.state, s.state AS take_out FROM actions a LEFT JOIN steps s "
                "ON s.action_id=a.id AND s.step='take_out' WHERE a.node=? ORDER BY a.id DESC "
                "LIMIT 1",
                (n,),
            )
            claims = (
                rec is not None
                and rec["state"] in ("quarantined", "inspection", "probation")
                and bool(latest)
                and latest[0]["take_out"] == "done"
                and latest[0]["state"] != "superseded"
            )
            if claims:
                assert self.slurm.ours(n), f"{n}: the journal says drained by us, Slurm not"
            if self.slurm.ours(n):
                live = j.rows(f"SELECT id FROM actions WHERE node=? AND state IN {LIVE}", (n,))
                held = rec is not None and rec["state"] in HELD_STATES
                assert held or live, f"{n}: drained by us in Slurm, the journal: {rec}"
        for jid, job in self.slurm.jobs.items():
            if job.held:
                saga = j.rows(
                    "SELECT a.id FROM steps s JOIN actions a ON a.id=s.action_id WHERE "
                    f"s.step=? AND s.state IN ('started','done','failed') AND a.state IN {(*LIVE, 'failed')}",
                    (f"hold:{jid}",),
                )
                assert saga, f"job {jid} held by us with no saga of the journal holding it"

    @rule()
    def tick(self) -> None:
        self.judged = set()
        self.engine.tick()
        self.no_node_is_held_out_by_a_soft_alert_alone()
        self.slurm.schedule()
        self.every_run_ends_with_a_verdict_or_a_page()
        last = self.journal.flag_summary(0)[1]
        if last is None or self.clock.now() - last >= QUIET_S:
            assert self.journal.get("breaker_opened_at") is None, "breaker open after quiet_s"

    @rule()
    def scheduler_silent_until_it_pages(self) -> None:
        """The scheduler answers nothing for longer than a run's deadline and as many ticks
        as an unconfirmed stop takes to page (``heal`` ends it)."""
        self.suite.unknown = self.suite.stop_fails = True
        for _ in range(PAGE_AFTER + 1):
            self.clock.advance(31.0)
            self.tick()

    @rule()
    def run_actions(self) -> None:
        """One pass of the worker: every action that can move runs once."""
        j = self.journal
        held = j.held_nodes()
        rows = j.pending_actions() + j.due_retries(self.clock.now())
        rows += [
            r for r in j.rows("SELECT * FROM actions WHERE state='deferred'") if r["node"] in held
        ]
        for row in rows:
            self.executor.run(row)
        self.slurm.schedule()
        late = j.rows(
            "SELECT a.id FROM steps s JOIN actions a ON a.id=s.action_id WHERE s.state='waiting' "
            "AND a.state IN ('pending','waiting') AND s.deadline < ?",
            (self.clock.now() - TICK_S,),
        )
        assert not late, f"steps past their deadline after a pass: {late}"

    def no_node_is_held_out_by_a_soft_alert_alone(self) -> None:
        """After a tick: a quarantined node whose fault resolved is in probation unless a
        hard alert (a fault, a hold) still fires for it, and a node whose probation passed
        was judged (gated for validation or released, or the release tried) unless one
        does: an avoid alert firing beside them holds nothing."""
        if self.engine.paused:
            return
        now = self.clock.now()
        for r in self.journal.rows("SELECT * FROM nodes WHERE state IN ('quarantined', "
                                   "'probation') AND resolved_at IS NOT NULL"):  # fmt: skip
            node = r["node"]
            soft = f"avoid-{node}" in self.journal.firing_fingerprints(node)
            if not soft or self._hard_firing(node):
                continue
            # (a validation that failed in this very tick puts it back: resolved_at = now)
            held = r["state"] == "quarantined" and r["resolved_at"] < now
            assert not held, f"{node} kept quarantined by an avoid alert alone"
            due = now - r["resolved_at"] >= (r["probation_s"] or 0)
            assert not due or node in self.judged, f"{node}: probation over, not judged"

    def every_run_ends_with_a_verdict_or_a_page(self) -> None:
        """After a tick: no run is still running past its deadline (it was concluded, even
        with the scheduler silent), and a concluded run whose stop the scheduler has not
        confirmed after PAGE_AFTER tries pages (and was journaled as such)."""
        now = self.clock.now()
        for r in self.journal.rows(
            "SELECT * FROM validations WHERE state IN ('running','stopping')"
        ):
            if r["state"] == "running":
                assert now < r["deadline"], f"validation {r['id']} past its deadline, running"
            elif (r["stop_tries"] or 0) >= PAGE_AFTER:
                assert r["node"] in self.engine.validator.stuck()
                paged = self.journal.rows(
                    "SELECT id FROM decisions WHERE action='validate' AND reason LIKE ?",
                    (f"validation {r['id']} of % could not be stopped%",),
                )
                assert paged, f"validation {r['id']} unstoppable and not paged"

    # ------------------------------------------------------------------ invariants
    @invariant()
    def a_node_with_an_open_fault_is_never_schedulable_unless_policy_allowed_it(self) -> None:
        """A node the journal holds out for a fault (its drain done, not superseded) is out of
        service in Slurm by gpuwarden; the only way back in is a release (or its validation
        run, which the fake runner does off the scheduler, so the drain stays)."""
        for n in NODES:
            rec = self.journal.node(n)
            if rec is None or rec["state"] not in ("quarantined", "inspection", "probation",
                                                   "validating"):  # fmt: skip
                continue
            latest = self.journal.rows(
                "SELECT a.state, s.state AS take_out FROM actions a LEFT JOIN steps s "
                "ON s.action_id=a.id AND s.step='take_out' WHERE a.node=? ORDER BY a.id DESC "
                "LIMIT 1",
                (n,),
            )
            if latest and latest[0]["take_out"] == "done" and latest[0]["state"] == "done":
                assert self.slurm.ours(n) or n in self.foreign, f"{n} held but schedulable"

    @invariant()
    def no_suite_starts_and_nothing_is_released_by_gpuwarden_while_paused(self) -> None:
        assert not self.suite.started_paused, (
            f"suites started while paused: {self.suite.started_paused}"
        )
        assert not self.released_paused, f"released while paused: {self.released_paused}"

    @invariant()
    def a_node_with_a_fault_firing_is_never_schedulable_unless_an_operator_released_it(
        self,
    ) -> None:
        """gpuwarden never releases a node whose alert still fires; and a node it took
        out for a fault still firing stays out unless an operator released it (the only
        release the policy allows then; a drain denied by a guard never took it out)."""
        assert not self.released_firing, f"released with a fault firing: {self.released_firing}"
        for n in NODES:
            if not self._open_faults(n) or self.slurm.ours(n) or n in self.foreign:
                continue
            took_out = self.journal.scalar(
                "SELECT MAX(a.id) FROM actions a JOIN steps s ON s.action_id=a.id AND "
                "s.step='take_out' AND s.state='done' WHERE a.node=? AND a.state='done'",
                (n,),
            )
            if took_out is None:
                continue  # never taken out (a guard denied it, or the action was a notify)
            released = self.journal.rows(
                "SELECT evidence FROM decisions WHERE node=? AND action='release' AND "
                "verdict='allow' AND id > (SELECT decision_id FROM actions WHERE id=?)",
                (n, took_out),
            )
            assert released, f"{n}: taken out for a fault still firing, schedulable, never released"

    @invariant()
    def never_above_any_budget(self) -> None:
        ours = [n for n in NODES if self.slurm.ours(n)]
        assert len(ours) <= FLEET_LIMIT, ours
        for leaf in {d["leaf"] for d in TOPOLOGY.values()}:
            in_leaf = [n for n in ours if TOPOLOGY[n]["leaf"] == leaf]
            assert len(in_leaf) <= LEAF_LIMIT, in_leaf

    @invariant()
    def nothing_owned_by_someone_else_is_touched(self) -> None:
        for node, reason in self.foreign.items():
            assert self.slurm.nodes[node].reason == reason, node
            assert "DRAIN" in self.slurm.nodes[node].flags, node

    @invariant()
    def a_released_node_carries_no_drain_of_ours(self) -> None:
        for r in self.journal.rows("SELECT node FROM nodes WHERE state='released'"):
            if self.slurm.ours(r["node"]):  # only while the undo of a superseded drain retries
                live = self.journal.rows(
                    f"SELECT id FROM actions WHERE node=? AND state IN {LIVE}", (r["node"],)
                )
                assert live, f"{r['node']}: released in the journal, drained by us in Slurm"

    @invariant()
    def no_job_left_held_without_a_live_or_paged_saga(self) -> None:
        held = [jid for jid, j in self.slurm.jobs.items() if j.held]
        if held:
            live = self.journal.rows(
                f"SELECT id FROM actions WHERE state IN {(*LIVE, 'failed')} "
                "AND action IN ('checkpoint_restart','requeue')"
            )
            assert live, f"jobs {held} held with no saga to finish them"

    @invariant()
    def one_disruptive_action_per_incident(self) -> None:
        dup = self.journal.rows(
            "SELECT incident_id, COUNT(*) AS n FROM actions WHERE incident_id IS NOT NULL "
            "GROUP BY incident_id HAVING n > 1"
        )
        assert not dup, dup

    @invariant()
    def no_node_of_a_down_nvlink_domain_gets_a_new_action(self) -> None:
        for dom, last in self.down_after.items():
            nodes = [n for n in NODES if TOPOLOGY[n]["nvlink_domain"] == dom]
            marks = ",".join("?" * len(nodes))
            new = self.journal.rows(
                f"SELECT id, node, action FROM actions WHERE id>? AND node IN ({marks})",
                (last, *nodes),
            )
            assert not new, f"domain {dom} is down, yet {new} were queued node by node"

    @invariant()
    def every_alert_is_accounted_for(self) -> None:
        """Decided, or waiting (undecided) only while slurmctld does not answer its reads."""
        if self.journal.todo(1):
            assert {"sinfo", "squeue"} & self.slurm.fail, "an alert waits on an answering Slurm"

    @invariant()
    def an_avoid_alert_is_never_an_internal_error(self) -> None:
        bad = self.journal.rows(
            "SELECT reason FROM decisions WHERE guard='error' AND alert_key LIKE 'avoid-%'"
        )
        assert not bad, bad


Rails.TestCase.settings = settings(
    max_examples=int(os.environ.get("GPUWARDEN_SOAK_EXAMPLES", "200")),
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
test_the_rails_hold_under_any_interleaving = Rails.TestCase


def test_a_release_a_pause_parked_is_not_made_once_a_new_fault_fires_for_the_node() -> None:
    """Found by `make soak` (20,000 interleavings): a validation passed while paused (its
    release parked), the node's fault fired again, the pause was lifted: the parked release
    let the node back with that fault firing."""
    s = Rails()
    try:
        s.start_jobs(jobs=[])
        s.through_probation(node="gpu-node-001")
        s.pause(paused=True)
        s.through_probation(node="gpu-node-001")
        s.storm(nodes=["gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-004"])
        s.pause(paused=False)
        s.scheduler_silent_until_it_pages()
        s.a_node_with_a_fault_firing_is_never_schedulable_unless_an_operator_released_it()
        s.a_node_with_an_open_fault_is_never_schedulable_unless_policy_allowed_it()
        assert s.journal.node("gpu-node-001")["state"] == "quarantined"  # type: ignore[index]
    finally:
        s.teardown()


def test_an_avoid_alert_beside_a_resolved_fault_holds_no_node_out() -> None:
    """Item 1 of issue 31 as a fixed interleaving: the marginal evidence fires beside a
    hard fault, the fault resolves: probation starts and the tick releases the node."""
    s = Rails()
    try:
        s.start_jobs(jobs=[])
        s.fire_avoid(node="gpu-node-001", then="fault")
        s.through_probation(node="gpu-node-001")
        s.fire_avoid(node="gpu-node-002", then="")
        s.through_probation(node="gpu-node-002")
        for _ in range(3):
            s.advance(31.0)
            s.tick()
        assert "avoid-gpu-node-001" in s.journal.firing_fingerprints("gpu-node-001")
        for n in ("gpu-node-001", "gpu-node-002"):
            assert s.journal.node(n)["state"] == "released", n  # type: ignore[index]
    finally:
        s.teardown()
