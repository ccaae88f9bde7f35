"""The executor's evidence checks and checkpoint outcomes, each pinned (mutation testing found
them run by other tests without their results being checked)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from remediation.executor import Executor, ack_path, validate
from remediation.model import Job
from remediation.service import Service
from tests.remediation.fakeslurm import FakeJob, FakeSlurm
from tests.remediation.test_saga_intake import advance, decide, run, slurm, svc, writes

__all__ = ["slurm", "svc"]  # the fixtures (a fake slurmctld, not conftest's real one)


class OneJob:
    """A backend whose one job looks the way a test says (a hand-written fake)."""

    def __init__(self, job: Job | None) -> None:
        self.now = job

    def job(self, job_id: str) -> Job | None:
        return self.now


def evidence(now: Job | None) -> tuple[bool, bool]:
    ex = Executor(None, OneJob(now), None)  # type: ignore[arg-type]
    before = Job("7", "RUNNING", ("n1",), restarts=2)
    return ex._moved(before, "n1"), ex._held_or_moved(before, "n1")


@pytest.mark.parametrize(
    ("now", "moved", "held_or_moved"),
    [
        (None, True, True),  # gone
        (Job("7", "RUNNING", ("n1",), 2), False, False),  # untouched
        (Job("7", "RUNNING", ("n1",), 3), True, True),  # restarted on the same node
        (Job("7", "RUNNING", ("n2",), 2), True, True),  # elsewhere
        (Job("7", "PENDING", (), 3, held=True), False, True),  # held: not finished
        (Job("7", "PENDING", ("n1",), 2, held=True), False, True),  # held before the count
        (Job("7", "RUNNING", ("n1", "n2"), 2), False, False),  # still on the node
    ],
)
def test_the_evidence_of_a_requeue_and_of_a_hold_read_from_the_scheduler(
    now: Job | None, moved: bool, held_or_moved: bool
) -> None:
    assert evidence(now) == (moved, held_or_moved)


def test_an_ack_path_flattens_slashes_of_a_job_id(tmp_path: Path) -> None:
    assert ack_path(str(tmp_path), "ns/pod_1") == tmp_path / "ns_pod_1.ack"


def test_validation_runs_the_command_for_the_node_and_reports_its_words() -> None:
    assert validate((), "n1") == (True, "no validation command")
    py = sys.executable
    ok, why = validate((py, "-c", "import sys; print('x' * 300 + sys.argv[1])", "{node}"), "n7")
    assert ok and why == "validation rc 0: " + ("x" * 300 + "n7")[-200:]
    ok, why = validate((py, "-c", "raise SystemExit(3)"), "n1")
    assert (ok, why) == (False, "validation rc 3: ")
    ok, why = validate(("/nonexistent/validate",), "n1")
    assert not ok and why.startswith("validation failed to run: ")
    ok, why = validate((py, "-c", "import time; time.sleep(5)"), "n1", timeout=0.3)
    assert not ok and "timed out" in why


def test_a_checkpoint_of_a_job_that_ended_is_not_signalled(svc: Service, slurm: FakeSlurm) -> None:
    aid = decide(svc, action="checkpoint_restart")
    svc.journal.set_step(aid, "jobs", "done", '[["100", "RUNNING", ["gpu-node-001"], 0]]')
    slurm.jobs["100"].state = "COMPLETED"  # ended between the look and the signal
    run(svc, aid)
    assert svc.journal.step_detail(aid, "signal:100") == "job no longer running: not signalled"
    assert ["scancel", "--signal=USR1", "--full", "100"] not in slurm.calls


def test_a_checkpoint_acked_in_time_says_so_and_requeues(svc: Service, slurm: FakeSlurm) -> None:
    aid = decide(svc, action="checkpoint_restart")
    assert run(svc, aid)[0] == "waiting"
    ack_path(svc.policy.checkpoint.ack_dir, "100").write_text("{}")
    assert run(svc, aid)[0] == "waiting"  # requeued; waiting to run elsewhere
    advance(svc, slurm)
    state, outcome = run(svc, aid)
    assert state == "done"
    assert outcome.endswith("job 100: ack received; job 100 requeued and running elsewhere"), (
        outcome
    )
    assert slurm.jobs["100"].excluded == {"gpu-node-001"}


def test_with_on_timeout_wait_a_missing_ack_waits_for_the_job_to_end(
    svc: Service, slurm: FakeSlurm
) -> None:
    import dataclasses

    ck = dataclasses.replace(svc.policy.checkpoint, on_timeout="wait")
    svc.executor.policy = dataclasses.replace(svc.policy, checkpoint=ck)
    aid = decide(svc, action="checkpoint_restart")
    assert run(svc, aid)[0] == "waiting"
    advance(svc, slurm, 6)  # past the 5 s ack deadline
    assert run(svc, aid)[0] == "waiting"  # now waiting for the job to end
    del slurm.jobs["100"]
    state, outcome = run(svc, aid)
    assert state == "done"
    assert outcome.endswith("job 100: no ack by deadline; waited for job end (ended=True)")
    assert ["scontrol", "requeuehold", "100"] not in writes(slurm)
    assert svc.journal.step_state(aid, "end:100") == "done"


def test_the_shared_fixture_starts_one_running_job(svc: Service, slurm: FakeSlurm) -> None:
    assert svc.backend.runner is slurm  # type: ignore[attr-defined]
    assert slurm.jobs == {"100": FakeJob("RUNNING", ["gpu-node-001"])}
