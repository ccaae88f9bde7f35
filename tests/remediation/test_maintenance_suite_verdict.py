"""A maintenance suite's verdict survives its own clean-up: on Kubernetes the stop deletes the
validation Job and is confirmed only once the garbage collector removed its pods, so a poll on
a later tick finds the Job gone. That is our deletion, not a cancel: the verdict read before
the stop is the one the node gets (found on the real API server, where both nodes of a wave
failed as "deleted outside gpuwarden")."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from remediation.backends.base import BackendError
from remediation.maintenance import store
from remediation.maintenance.runner import Maintenance
from remediation.validation.slurm import SchedulerUnknown, SuiteCancelled
from remediation.validation.suite import StepRun
from tests.remediation.helpers import LIVE_POLICY, service, topology_file

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation" / "all_reduce_perf-8gpu.txt"
POLICY = (
    LIVE_POLICY.replace("fleet: {max_fraction: 0.5, max_nodes: 100}",
                        "fleet: {max_fraction: 1.0, max_nodes: 10}")
    + "validation:\n  suites:\n    post-maintenance:\n"
    "      - {name: nccl, command: [all_reduce_perf], timeout_s: 60, parser: nccl-tests,\n"
    "         min: {busbw_at_max_size_gbps: 100}}\n"
)  # fmt: skip


class SlowCleanup:
    """A suite runner like Kubernetes': the run ends with the given output; the first stop
    deletes it and raises (its pods not yet gone), the next confirms; a poll after the
    delete raises SuiteCancelled, as the real runner's does."""

    def __init__(self, outputs: dict[str, tuple[int, str]]) -> None:
        self.outputs, self.deleted, self.stops = outputs, set(), []  # type: ignore[var-annotated]

    def start(self, node: str, suite: Any, run_id: str, view: Any) -> dict[str, Any]:
        return {"node": node, "run_id": run_id}

    def poll(self, handle: dict[str, Any]) -> list[StepRun] | None:
        if handle["run_id"] in self.deleted:
            raise SuiteCancelled(f"validation Job {handle['run_id']} was deleted outside gpuwarden")
        rc, out = self.outputs[handle["node"]]
        return [StepRun(rc, out)]

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        self.stops.append((handle["node"], verdict))
        if handle["run_id"] not in self.deleted:
            self.deleted.add(handle["run_id"])
            raise BackendError("pods of the Job still there (the garbage collector deletes them)")

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        return None


def test_a_verdict_read_before_a_slow_clean_up_is_the_nodes_verdict(tmp_path: Path) -> None:
    suites = SlowCleanup(
        {"gpu-node-001": (0, FIX.read_text()), "gpu-node-002": (1, "NCCL error\n")}
    )
    svc, run = _wave(tmp_path, suites, nodes=("gpu-node-001", "gpu-node-002"))
    m = svc.maintenance
    for _ in range(8):
        m.tick()
    done = store.load(svc.journal, run.id)
    assert done is not None and done.state == "done", done
    states = {n.node: (n.state, n.reason) for n in done.nodes}
    assert states["gpu-node-001"][0] == "done", states
    assert states["gpu-node-002"][0] == "failed" and "deleted" not in states["gpu-node-002"][1]
    # each stop retried with the verdict first read, until confirmed
    assert sorted(suites.stops) == [("gpu-node-001", "passed"), ("gpu-node-001", "passed"),
                                    ("gpu-node-002", "failed"), ("gpu-node-002", "failed")]  # fmt: skip
    assert svc.journal.rows("SELECT * FROM maintenance_verdicts") == []  # gone with the nodes


class StuckCleanup(SlowCleanup):
    """Every stop deletes the Job and raises (its pods linger) until ``gone`` is set."""

    gone = False

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        self.stops.append((handle["node"], verdict))
        self.deleted.add(handle["run_id"])
        if not self.gone:
            raise BackendError("pods of the Job still there (the garbage collector deletes them)")


def test_a_verdict_read_before_a_kill_9_is_the_nodes_verdict_after_the_restart(
    tmp_path: Path,
) -> None:
    suites = StuckCleanup(
        {"gpu-node-001": (0, FIX.read_text()), "gpu-node-002": (1, "NCCL error\n")}
    )
    svc, run = _wave(tmp_path, suites, nodes=("gpu-node-001", "gpu-node-002"))
    m = svc.maintenance
    for _ in range(6):
        m.tick()
    assert {s for s, _ in _states(svc, run.id).values()} == {"validating"}
    assert {n for n, _ in suites.stops} == {"gpu-node-001", "gpu-node-002"}  # Jobs deleted
    # kill -9: a new process, the same journal and scheduler; the Jobs are gone, so a poll
    # now reads a cancel: only the journaled verdict can say what the suite found
    again = Maintenance(m.journal, m.backend, m.policy, m.clock, m.paused, suites, m.state_dir)
    suites.gone = True
    for _ in range(3):
        again.tick()
    states = _states(svc, run.id)
    assert states["gpu-node-001"][0] == "done", states
    assert states["gpu-node-002"][0] == "failed" and "deleted" not in states["gpu-node-002"][1]
    assert "nccl" in states["gpu-node-002"][1].lower(), states
    assert suites.stops[-2:] in ([("gpu-node-001", "passed"), ("gpu-node-002", "failed")],
                                 [("gpu-node-002", "failed"), ("gpu-node-001", "passed")])  # fmt: skip
    assert svc.journal.rows("SELECT * FROM maintenance_verdicts") == []


def test_a_kept_verdict_goes_only_when_its_node_moves_on(tmp_path: Path) -> None:
    suites = StuckCleanup({"gpu-node-001": (1, "NCCL error\n")})
    svc, run = _wave(tmp_path, suites)
    m = svc.maintenance
    for _ in range(5):
        m.tick()
    cur = store.load(svc.journal, run.id)
    assert cur is not None and cur.nodes[0].state == "validating"
    handle = cur.nodes[0].handle
    assert store.kept_verdict(svc.journal, handle) is not None
    store.save(svc.journal, cur, replace(cur, state="paused"), 0.0, None)  # the run, not the node
    assert store.kept_verdict(svc.journal, handle) is not None
    nxt = replace(cur.nodes[0], handle='{"node": "gpu-node-001", "run_id": "again"}')
    store.save(svc.journal, cur, replace(cur, nodes=(nxt,)), 0.0, None)  # a new attempt
    assert store.kept_verdict(svc.journal, handle) is None


class Scripted(SlowCleanup):
    """Each poll of a node answers the next of its script: a list of runs (done), None
    (still running), or an exception to raise; the last answer repeats."""

    def __init__(self, script: dict[str, list[Any]]) -> None:
        super().__init__({})
        self.script, self.lost = script, []  # type: ignore[var-annotated]

    def poll(self, handle: dict[str, Any]) -> list[StepRun] | None:
        if handle["run_id"] in self.deleted:
            raise SuiteCancelled(f"validation Job {handle['run_id']} was deleted outside gpuwarden")
        queue = self.script[handle["node"]]
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        self.stops.append((handle["node"], verdict))
        self.deleted.add(handle["run_id"])

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        self.lost.append((node, run_id))


PASS = [StepRun(0, FIX.read_text())]


def _wave(
    tmp_path: Path, suites: Any, nodes: tuple[str, ...] = ("gpu-node-001",)
) -> tuple[Any, Any]:
    svc = service(tmp_path, policy_text=POLICY, topology=topology_file(tmp_path, 4))
    m = svc.maintenance
    assert m is not None
    m.suites = suites
    run = m.start({"select": {"nodes": list(nodes)}, "wave_size": len(nodes), "max_failures": 1,
                   "suite": "post-maintenance", "operation": {"kind": "none"}}, "test")  # fmt: skip
    return svc, run


def _states(svc: Any, run_id: int) -> dict[str, tuple[str, str]]:
    got = store.load(svc.journal, run_id)
    assert got is not None
    return {n.node: (n.state, n.reason) for n in got.nodes}


def _left_validating(tmp_path: Path) -> tuple[Any, Any, Scripted]:
    """A one-node wave whose suite is still running after a few ticks."""
    suites = Scripted({"gpu-node-001": [None]})
    svc, run = _wave(tmp_path, suites)
    for _ in range(4):
        svc.maintenance.tick()
    return svc, run, suites


def test_a_scheduler_that_does_not_answer_or_a_suite_still_running_is_no_verdict(
    tmp_path: Path,
) -> None:
    suites = Scripted({"gpu-node-001": [SchedulerUnknown("squeue: timed out"), None,
                                        BackendError("HTTP 503"), None, PASS]})  # fmt: skip
    svc, run = _wave(tmp_path, suites)
    m = svc.maintenance
    seen = []
    for _ in range(9):
        m.tick()
        seen.append(_states(svc, run.id)["gpu-node-001"][0])
    assert "validating" in seen and seen[-1] == "done", seen
    assert seen.index("done") >= seen.index("validating") + 5  # five answers that were no verdict
    assert suites.stops == [("gpu-node-001", "passed")]


def test_a_suite_someone_else_cancelled_fails_its_node_with_the_reason(tmp_path: Path) -> None:
    suites = Scripted({"gpu-node-001": [SuiteCancelled("validation Job x was deleted by kubectl")]})
    svc, run = _wave(tmp_path, suites)
    for _ in range(5):
        svc.maintenance.tick()
    state, reason = _states(svc, run.id)["gpu-node-001"]
    assert state == "failed" and "deleted by kubectl" in reason, reason
    assert suites.stops == [("gpu-node-001", "failed")]


def test_a_suite_whose_handle_was_lost_in_a_crash_is_cleaned_up_by_name_and_started_again(
    tmp_path: Path,
) -> None:
    svc, run, suites = _left_validating(tmp_path)
    m = svc.maintenance
    cur = store.load(svc.journal, run.id)
    assert cur is not None and cur.nodes[0].state == "validating" and cur.nodes[0].handle
    # a crash between the suite's start and the save of its handle: the intent, no handle
    crashed = replace(cur, nodes=(replace(cur.nodes[0], handle=""),))
    store.save(svc.journal, cur, crashed, 0.0, None)
    suites.script["gpu-node-001"] = [PASS]
    for _ in range(4):
        m.tick()
    assert suites.lost and suites.lost[0][0] == "gpu-node-001"  # what it left, stopped by name
    assert _states(svc, run.id)["gpu-node-001"][0] == "done"


def test_a_service_without_a_suite_runner_fails_a_node_it_finds_validating(
    tmp_path: Path,
) -> None:
    svc, run, _ = _left_validating(tmp_path)
    m = svc.maintenance
    assert _states(svc, run.id)["gpu-node-001"][0] == "validating"
    m.suites = None  # restarted where validation cannot run (dry-run): no verdict can come
    for _ in range(3):
        m.tick()
    state, reason = _states(svc, run.id)["gpu-node-001"]
    assert state == "failed" and "no suite runner here" in reason, reason
