"""The maintenance machine's single paths, and its operation edges: a job that never acks
leaves its node stuck until the operator forces it; more failures than allowed stop the
run; a command operation survives its caller (exit code kept on disk, a dead one is lost);
``scontrol reboot`` is asked once and done when slurmctld shows no reboot flag."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path

from remediation.backends.runner import Result
from remediation.maintenance import machine
from remediation.maintenance.model import NodeRun, Operation, Run, Spec, World
from remediation.maintenance.operations import CommandOperation, SlurmReboot
from remediation.model import Job, NodeView
from remediation.policy import Budget
from tests.remediation.helpers import live_policy

POLICY = live_policy(fleet_budget=Budget(1.0, 4))


def fleet(drained: Sequence[str] = ()) -> tuple[NodeView, ...]:
    return tuple(NodeView(n, n in drained, n in drained, "gpuwarden: m") for n in ("a", "b", "c"))


def test_a_job_without_an_ack_leaves_its_node_stuck_until_the_operator_forces_it() -> None:
    spec = Spec(("a",), Operation("none"), 1, 0, 100.0)
    run = Run(1, spec, "running", (NodeRun("a", 0),), 0.0)
    run, eff = machine.advance(run, World(0.0, False, fleet(), frozenset()), POLICY)
    assert [e.kind for e in eff] == ["drain"]
    jobs = {"a": (Job("7", "RUNNING", ("a",)),)}
    run, eff = machine.advance(run, World(1.0, False, fleet("a"), frozenset(), jobs), POLICY)
    assert [(e.kind, e.job) for e in eff] == [("checkpoint", "7")]
    run, eff = machine.advance(run, World(150.0, False, fleet("a"), frozenset(), jobs), POLICY)
    assert run.nodes[0].state == "stuck" and not [e for e in eff if e.kind == "requeue"]
    run, _ = machine.decide(run, "a", "force", 151.0)
    run, eff = machine.advance(run, World(152.0, False, fleet("a"), frozenset(), jobs), POLICY)
    assert [(e.kind, e.detail) for e in eff if e.kind == "requeue"] == [
        ("requeue", "forced: no checkpoint")
    ]


def test_more_failures_than_allowed_stop_the_run_and_nothing_new_starts() -> None:
    spec = Spec(("a", "b", "c"), Operation("none"), 1, 0, 100.0)
    nodes = (NodeRun("a", 0, "operating", 0.0, handle="{}"), NodeRun("b", 1), NodeRun("c", 2))
    run = Run(1, spec, "running", nodes, 0.0)
    w = World(1.0, False, fleet("a"), frozenset(), op={"a": "failed: exit 3"})
    run, eff = machine.advance(run, w, POLICY)
    assert run.state == "stopped" and run.nodes[0].state == "failed"
    assert [e.kind for e in eff] == ["keep_out"]  # nothing drained, nothing to release
    assert [n.state for n in run.nodes[1:]] == ["skipped", "skipped"]
    assert all(n.reason.startswith("run stopped: 1 nodes failed") for n in run.nodes[1:])


def test_a_stopped_run_gives_back_a_draining_node_before_its_operation_starts() -> None:
    spec = Spec(("a", "b"), Operation("none"), 2, 0, 100.0)
    nodes = (NodeRun("a", 0, "operating", 0.0, handle="{}"),
             NodeRun("b", 0, "draining", 0.0, deadline=100.0))  # fmt: skip
    run = Run(1, spec, "running", nodes, 0.0)
    w = World(1.0, False, fleet(("a", "b")), frozenset(), op={"a": "failed: exit 3"})
    run, eff = machine.advance(run, w, POLICY)  # b emptied this tick: it would operate next
    assert run.state == "stopped" and [n.state for n in run.nodes] == ["failed", "skipped"]
    assert ("operate", "b") not in [(e.kind, e.node) for e in eff]
    assert ("release", "b") in [(e.kind, e.node) for e in eff]


def test_a_command_operation_keeps_its_exit_code_on_disk_and_a_dead_one_is_lost(
    tmp_path: Path,
) -> None:
    op = CommandOperation(("sh", "-c", "echo hi {node}; exit 3"), tmp_path)
    h = op.start(1, "a", 1)
    deadline = time.monotonic() + 10
    while op.poll(h) == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert op.poll(h) == "failed: exit 3: hi a"
    fresh = CommandOperation(("true",), tmp_path)  # a restarted service: no child to reap
    assert fresh.poll(h) == "failed: exit 3: hi a"
    (Path(h["dir"]) / "rc").unlink()
    assert fresh.poll({**h, "pid": 2**22 + 1}) == "lost"


class Scontrol:
    def __init__(self, states: list[str]) -> None:
        self.states, self.calls = states, []  # type: ignore[var-annotated]

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        self.calls.append(list(argv))
        if argv[1] == "reboot":
            return Result(0, "", "")
        return Result(0, f"NodeName=a State={self.states.pop(0)} Reason=x", "")


def test_a_slurm_reboot_is_asked_once_and_done_when_no_reboot_flag_shows() -> None:
    sc = Scontrol(["IDLE+DRAIN+REBOOT_ISSUED", "DOWN+REBOOT_REQUESTED", "DOWN"])
    op = SlurmReboot(sc, "gpuwarden: maintenance 1")
    h = op.start(1, "a", 1)
    assert sc.calls[0] == ["scontrol", "reboot", "ASAP", "nextstate=DOWN",
                           "reason=gpuwarden: maintenance 1", "a"]  # fmt: skip
    assert [op.poll(h), op.poll(h), op.poll(h)] == ["running", "running", "ok"]


def test_a_fault_is_not_denied_for_maintenance_nodes_not_yet_operated_on() -> None:
    from remediation import guards
    from tests.remediation.helpers import alert

    views = (NodeView("a", True, True, "gpuwarden: maintenance 1"), NodeView("b"), NodeView("c"))
    pol = live_policy(fleet_budget=Budget(1.0, 1))
    s = guards.Situation(alert("b"), "drain", 0.0, False, False, views[1], views, frozenset())
    assert guards.budget_fleet(s, pol) is not None  # counted: a maintenance node being operated on
    yielding = guards.Situation(alert("b"), "drain", 0.0, False, False, views[1], views,
                                frozenset(), yielding=frozenset({"a"}))  # fmt: skip
    assert guards.budget_fleet(yielding, pol) is None  # faults win: the run gives "a" back
