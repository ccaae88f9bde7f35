"""The executor's evidence checks and checkpoint outcomes, each pinned (mutation testing found
them run by other tests without their results being checked)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from remediation.executor import Executor, ack_path, validate
from remediation.model import Job
from remediation.service import Service
from tests.remediation.fakeslurm import FakeJob, FakeSlurm
from tests.remediation.test_executor import CLOCK, effects, setup
from tests.remediation.test_saga_intake import (
    advance,
    crashed_before_hold,
    decide,
    held_and_pending,
    listed,
    run,
    slurm,
    svc,
    writes,
)

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


# ---------------------------------------------------------------- steps and waits, pinned
def test_an_action_decided_after_a_release_carries_the_new_epoch_and_is_not_superseded(
    svc: Service, slurm: FakeSlurm
) -> None:
    svc.engine.release("gpu-node-002", manual=True, who="op")  # unknown to the journal: no-op
    first = decide(svc, "gpu-node-002", action="drain")
    assert run(svc, first)[0] == "done"
    assert svc.engine.release("gpu-node-002", manual=True, who="op").allow  # epoch 1
    again = decide(svc, "gpu-node-002", action="cordon")
    assert run(svc, again)[0] == "done" and slurm.ours("gpu-node-002")


def test_an_open_breaker_parks_with_its_exact_words(svc: Service, slurm: FakeSlurm) -> None:
    aid = decide(svc, action="drain")
    svc.journal.put("breaker_opened_at", "1")
    assert run(svc, aid) == (
        "paused",
        "storm breaker open: parked before a side-effecting step; resumes once it closes",
    )


def test_waits_are_journaled_with_their_words_and_a_timeout_is_final(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc, action="checkpoint_restart")
    t0 = svc.clock.now()
    state, outcome = run(svc, aid)
    assert (state, outcome) == ("waiting", f"ack:100: waiting until {t0 + 5:.0f}")
    assert svc.journal.step_state(aid, "take_out") == "done"
    assert svc.journal.step_detail(aid, "signal:100") == "checkpoint requested"
    advance(svc, slurm, 5)  # exactly the deadline: timed out
    assert run(svc, aid)[0] == "waiting"  # requeued anyway; waiting to run elsewhere
    assert svc.journal.step_state(aid, "ack:100") == "timeout"
    assert svc.journal.step_detail(aid, "ack:100") == f"deadline {t0 + 5:.0f} passed"
    ack_path(svc.policy.checkpoint.ack_dir, "100").write_text("{}")  # too late: not counted
    advance(svc, slurm)
    state, outcome = run(svc, aid)
    assert state == "done"
    assert outcome == (
        "done before restart; job 100: no ack by deadline; requeued anyway (policy); "
        "job 100 requeued and running elsewhere"
    )
    assert svc.journal.step_detail(aid, "running:100") == "condition met"


def test_an_interrupted_step_is_journaled_started_before_it_acts(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc, action="drain")

    def crash(node: str, reason: str, evict: bool) -> str:
        raise SystemExit("kill -9 mid-drain")

    svc.backend.take_out = crash  # type: ignore[method-assign]
    with pytest.raises(SystemExit):
        run(svc, aid)
    assert svc.journal.step_state(aid, "take_out") == "started"


def test_a_reboot_on_the_busy_node_is_deferred_by_its_own_jobs(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc, "gpu-node-001", action="reboot")
    state, outcome = run(svc, aid)
    assert (state, outcome) == ("deferred", "drained; reboot deferred: node busy (1 jobs)")


def test_a_drain_undone_by_a_release_during_it_says_so(svc: Service, slurm: FakeSlurm) -> None:
    aid = decide(svc, "gpu-node-003", action="drain")
    real = svc.backend.take_out

    def drain_then_release(node: str, reason: str, evict: bool) -> str:
        out = real(node, reason, evict)
        svc.engine._supersede(node, "bob")
        return out

    svc.backend.take_out = drain_then_release  # type: ignore[method-assign]
    assert run(svc, aid) == (
        "superseded",
        "superseded: gpu-node-003 released during the drain; drain undone",
    )


def as_action(j, b, ex, row, action: str):  # type: ignore[no-untyped-def]
    """setup()'s action (the ladder's first rung, a drain) turned into ``action``."""
    with j.tx() as db:
        db.execute("UPDATE actions SET action=? WHERE id=?", (action, row["id"]))
    return j, b, ex, {**row, "action": action}


@pytest.mark.parametrize(
    ("action", "evict", "mark"),
    [
        ("drain", True, "quarantined"),
        ("inspect", True, "inspection"),
        ("cordon", False, "quarantined"),
        ("requeue", False, None),
    ],
)
def test_each_action_evicts_and_marks_as_its_kind_says(
    tmp_path: Path, action: str, evict: bool, mark: str | None
) -> None:
    j, _, ex, row = as_action(*setup(tmp_path), action)
    ex.run(row)
    [take_out] = j.rows("SELECT node, detail FROM dry_run_effects WHERE op='take_out'")
    assert take_out["node"] == "gpu-node-001"
    assert json.loads(take_out["detail"])["evict"] is evict
    marks = [
        (r["node"], json.loads(r["detail"])["state"])
        for r in j.rows("SELECT node, detail FROM dry_run_effects WHERE op='mark'")
    ]
    assert marks == ([("gpu-node-001", mark)] if mark else [])
    if mark:
        assert j.step_detail(row["id"], "mark") == f"marked {mark}"


def test_a_plain_requeue_records_its_node_and_a_restart_does_not_repeat_it(
    tmp_path: Path,
) -> None:
    j, _, ex, row = as_action(*setup(tmp_path), "requeue")
    listed(j, row["id"], "42")
    j.set_step(row["id"], "requeue:42", "started")  # crashed after the requeue took effect
    state, outcome = ex.run(row)
    assert effects(j, "requeue") == 0  # the job shows restarts=1 elsewhere: not repeated
    assert j.step_detail(row["id"], "requeue:42") == "reconciled after restart"
    assert state == "done" and outcome.endswith("job 42 requeued and running elsewhere")


def test_a_plain_requeue_names_the_node_it_excludes_and_fails_if_the_job_stays(
    tmp_path: Path,
) -> None:
    j, b, ex, row = as_action(*setup(tmp_path), "requeue")
    b.job = lambda job_id: Job("42", "RUNNING", ("gpu-node-001",))  # type: ignore[method-assign]
    assert ex.run(row)[0] == "waiting"
    [r] = j.rows("SELECT node, detail FROM dry_run_effects WHERE op='requeue'")
    assert (r["node"], json.loads(r["detail"])) == ("gpu-node-001", {"job": "42"})
    assert j.step_detail(row["id"], "requeue:42") == "requeued"
    CLOCK.advance(3)  # past restart_deadline_s (2 s)
    state, outcome = ex.run(row)
    assert state == "retry"
    assert "job 42 requeued but not running elsewhere in time" in outcome


def test_a_checkpoint_after_a_restart_signals_the_job_on_its_recorded_node(
    tmp_path: Path,
) -> None:
    j, _, ex, row = as_action(*setup(tmp_path), "checkpoint_restart")
    listed(j, row["id"], "42")
    ex.run(row)
    [r] = j.rows("SELECT node FROM dry_run_effects WHERE op='checkpoint'")
    assert r["node"] == "gpu-node-001"


def test_a_hold_interrupted_before_it_took_effect_is_done_not_reconciled(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = crashed_before_hold(svc)
    run(svc, aid)
    assert ["scontrol", "requeuehold", "100"] in slurm.calls
    assert svc.journal.step_detail(aid, "hold:100") == "requeuehold"


def test_a_plain_requeue_interrupted_before_it_took_effect_is_done_again(
    tmp_path: Path,
) -> None:
    j, b, ex, row = as_action(*setup(tmp_path), "requeue")
    b.job = lambda job_id: Job("42", "RUNNING", ("gpu-node-001",), 2)  # type: ignore[method-assign]
    listed(j, row["id"], "42", 2)
    j.set_step(row["id"], "requeue:42", "started")  # the job shows no sign of a requeue
    ex.run(row)
    assert effects(j, "requeue") == 1
    assert {r["action_id"] for r in j.rows("SELECT action_id FROM dry_run_effects")} == {
        row["id"]
    }  # every effect names its action


def test_a_job_released_behind_our_back_is_not_released_again_by_compensation(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = held_and_pending(svc, slurm)
    slurm.jobs["100"].held = False  # an operator released it
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    slurm.calls.clear()
    assert run(svc, aid)[0] == "superseded"
    assert ["scontrol", "release", "100"] not in slurm.calls


def test_a_requeue_of_an_idle_node_says_no_jobs(tmp_path: Path) -> None:
    _, b, ex, row = as_action(*setup(tmp_path), "requeue")
    b.jobs_on = lambda node: ()  # type: ignore[method-assign]
    assert ex.run(row) == ("done", "would drain; no jobs on node")


def test_a_reboot_names_its_node_and_reason_and_journals_its_step(tmp_path: Path) -> None:
    j, b, ex, row = as_action(*setup(tmp_path), "reboot")
    b.jobs_on = lambda node: ()  # type: ignore[method-assign]
    assert ex.run(row) == ("done", "would reboot")
    [r] = j.rows("SELECT node, detail FROM dry_run_effects WHERE op='reboot'")
    assert (r["node"], json.loads(r["detail"])) == ("gpu-node-001", {"reason": row["reason"]})
    assert j.step_state(row["id"], "reboot") == "done"


def test_a_hold_whose_reply_was_lost_is_failed_yet_its_held_job_is_released_by_compensation(
    svc: Service, slurm: FakeSlurm
) -> None:
    slurm.partial.add("requeuehold")  # took effect, exited 1: the job is held
    aid = decide(svc)
    state, outcome = run(svc, aid)
    assert state == "retry", outcome
    assert svc.journal.step_state(aid, "hold:100") == "failed"  # raised, not interrupted
    assert slurm.jobs["100"].held
    slurm.partial.clear()
    slurm.run(["scontrol", "update", "NodeName=gpu-node-001", "State=DRAIN", "Reason=gpuwarden: x"])
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    state, outcome = run(svc, aid)
    assert state == "superseded", outcome
    assert "job 100 released (compensation)" in outcome
    assert not slurm.jobs["100"].held
