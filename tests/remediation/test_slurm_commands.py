"""The exact Slurm commands, with a hand-written fake runner (the real ones: test_slurm.py)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import pytest

from remediation.backends.base import BackendError, Unavailable
from remediation.backends.runner import Result
from remediation.backends.slurm import SlurmBackend
from remediation.clock import FakeClock
from remediation.model import Job
from tests.remediation.helpers import alert, service


class FakeRunner:
    """Answers sinfo/squeue from a tiny in-memory cluster and records every command."""

    def __init__(self, fail: bool = False, fail_on: str = "") -> None:
        self.calls: list[list[str]] = []
        self.fail, self.fail_on = fail, fail_on
        self.job_state, self.reason = "RUNNING", "None"

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        self.calls.append(list(argv))
        if self.fail:
            return Result(1, "", "slurm_load_node error: Unable to contact slurm controller")
        if argv[0] == "sinfo":
            nodes = [{"name": "gpu-node-001", "state": "mixed", "state_flags": [], "reason": ""}]
            return Result(0, json.dumps({"nodes": nodes}), "")
        if argv[0] == "squeue":
            jobs = [
                {
                    "job_id": 7,
                    "job_state": self.job_state,
                    "state_reason": self.reason,
                    "nodes": "gpu-node-[001-002]",
                    "restart_cnt": 0,
                }
            ]
            return Result(0, json.dumps({"jobs": jobs}), "")
        if self.fail_on and self.fail_on in " ".join(argv):
            return Result(1, "", f"scontrol: error: {self.fail_on} failed")
        if list(argv[:2]) == ["scontrol", "requeuehold"]:
            self.job_state, self.reason = "PENDING", "JobHeldAdmin"
        if list(argv[:2]) == ["scontrol", "release"]:
            self.reason = "None"
        return Result(0, "", "")


def test_requeue_holds_waits_for_pending_excludes_the_node_then_releases() -> None:
    r = FakeRunner()
    SlurmBackend(r).requeue(Job("7", "RUNNING", ("gpu-node-001",)), "gpu-node-001")
    writes = [c for c in r.calls if c[0] != "squeue"]
    assert writes == [
        ["scontrol", "requeuehold", "7"],
        ["scontrol", "update", "JobId=7", "ExcNodeList=gpu-node-001"],
        ["scontrol", "update", "JobId=7", "StartTime=now"],
        ["scontrol", "release", "7"],
    ]


def test_a_failed_exclusion_after_requeuehold_is_compensated_by_a_release() -> None:
    r = FakeRunner(fail_on="ExcNodeList")
    b = SlurmBackend(r)
    with pytest.raises(BackendError, match="compensated: job 7 released"):
        b.requeue(Job("7", "RUNNING", ("gpu-node-001",)), "gpu-node-001")
    assert ["scontrol", "release", "7"] in r.calls
    job = b.job("7")
    assert job is not None and not job.held  # never left held


def test_a_requeue_interrupted_while_held_is_finished_not_held_again() -> None:
    r = FakeRunner()
    r.job_state, r.reason = "PENDING", "JobHeldAdmin"  # the crash came after requeuehold
    SlurmBackend(r).requeue(Job("7", "RUNNING", ("gpu-node-001",)), "gpu-node-001")
    writes = [c for c in r.calls if c[0] not in ("squeue", "sinfo")]
    assert writes == [
        ["scontrol", "update", "JobId=7", "ExcNodeList=gpu-node-001"],
        ["scontrol", "update", "JobId=7", "StartTime=now"],
        ["scontrol", "release", "7"],
    ]


def test_checkpoint_request_is_usr1_to_every_step_of_the_job() -> None:
    r = FakeRunner()
    SlurmBackend(r).request_checkpoint(Job("7", "RUNNING", ()))
    assert r.calls == [["scancel", "--signal=USR1", "--full", "7"]]


def test_jobs_on_a_node_expand_the_hostlist() -> None:
    [j] = SlurmBackend(FakeRunner()).jobs_on("gpu-node-002")
    assert j.nodes == ("gpu-node-001", "gpu-node-002")


def test_an_unreachable_slurmctld_decides_nothing_and_the_alert_waits_until_it_answers(
    tmp_path: Path,
) -> None:
    runner = FakeRunner(fail=True)
    svc = service(tmp_path, clock=FakeClock(), runner=runner, backend="slurm")
    svc.journal.accept([alert("gpu-node-001")], 0)
    with pytest.raises(Unavailable, match="Unable to contact"):
        svc.engine.decide(alert("gpu-node-001"))
    assert svc.journal.rows("SELECT * FROM decisions") == [], "decided on state never read"
    runner.fail = False
    svc.engine.decide(alert("gpu-node-001"))
    [d] = svc.journal.rows("SELECT verdict, action, guard, reason FROM decisions")
    # decided from what sinfo said (the fake cluster's one node: the fleet budget), once
    assert (d["action"], d["guard"]) == ("drain", "budget_fleet"), dict(d)
    svc.journal.close()


def test_an_answer_from_slurm_that_cannot_be_read_is_a_recorded_denial_not_an_action(
    tmp_path: Path,
) -> None:
    class Garbled(FakeRunner):
        def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
            if argv[0] == "sinfo":
                return Result(0, "sinfo: not json", "")
            return super().run(argv, timeout)

    svc = service(tmp_path, clock=FakeClock(), runner=Garbled(), backend="slurm")
    svc.journal.accept([alert("gpu-node-001")], 0)
    assert svc.engine.decide(alert("gpu-node-001")) is None
    [d] = svc.journal.rows("SELECT verdict, guard, reason FROM decisions")
    assert (d["verdict"], d["guard"]) == ("deny", "scheduler")
    assert "unreadable output" in d["reason"]
    svc.journal.close()
