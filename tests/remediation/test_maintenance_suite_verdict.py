"""A maintenance suite's verdict survives its own clean-up: on Kubernetes the stop deletes the
validation Job and is confirmed only once the garbage collector removed its pods, so a poll on
a later tick finds the Job gone. That is our deletion, not a cancel: the verdict read before
the stop is the one the node gets (found on the real API server, where both nodes of a wave
failed as "deleted outside gpuwarden")."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from remediation.backends.base import BackendError
from remediation.maintenance import store
from remediation.validation.slurm import SuiteCancelled
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
    svc = service(tmp_path, policy_text=POLICY, topology=topology_file(tmp_path, 4))
    m = svc.maintenance
    assert m is not None
    suites = SlowCleanup(
        {"gpu-node-001": (0, FIX.read_text()), "gpu-node-002": (1, "NCCL error\n")}
    )
    m.suites = suites
    run = m.start({"select": {"nodes": ["gpu-node-001", "gpu-node-002"]}, "wave_size": 2,
                   "max_failures": 1, "suite": "post-maintenance",
                   "operation": {"kind": "none"}}, "test")  # fmt: skip
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
    assert m.concluding == {}
