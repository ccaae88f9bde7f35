"""Intake, pause and release are read before every side-effecting step, and the Slurm requeue
is a tick-driven saga: no thread sleeps waiting for PENDING, a half-done requeue is finished
or compensated after a restart, and no job is left held (engine and executor on a fake
clock, the real Slurm backend code over the fault-injecting fake slurmctld)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from remediation.clock import FakeClock
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.service import Service
from tests.remediation.fakeslurm import FakeJob, FakeSlurm
from tests.remediation.helpers import LIVE_POLICY, alert, service, topology_file

NODES = [f"gpu-node-{i:03d}" for i in range(1, 9)]
POLICY = LIVE_POLICY.replace(
    "storm: {max_nodes: 50, window_s: 60, quiet_s: 120}",
    "storm: {max_nodes: 3, window_s: 60, quiet_s: 120}",
).replace("inspect_after: 4", "inspect_after: 4\nretry: {max_attempts: 3, backoff_s: 10}")


@pytest.fixture
def slurm() -> FakeSlurm:
    s = FakeSlurm(NODES)
    s.jobs["100"] = FakeJob("RUNNING", ["gpu-node-001"])
    return s


@pytest.fixture
def svc(tmp_path: Path, slurm: FakeSlurm) -> Service:
    ck = f"checkpoint: {{ack_dir: {tmp_path}, deadline_s: 5, on_timeout: requeue, "
    text = POLICY.replace("checkpoint: {ack_dir: /tmp, deadline_s: 5, on_timeout: requeue, ", ck)
    s = service(
        tmp_path, text, clock=FakeClock(), runner=slurm, backend="slurm",
        topology=topology_file(tmp_path, len(NODES)),
    )  # fmt: skip
    s.backend.requeue_wait_s = 30.0  # type: ignore[attr-defined]
    return s


def decide(svc: Service, node: str = "gpu-node-001", action: str = "requeue") -> int:
    a = alert(node, "memory", action=action)  # no ladder: the alert's action is the rung
    svc.journal.accept([a], svc.clock.now())
    aid = svc.engine.decide(a)
    assert aid is not None
    return aid


def run(svc: Service, aid: int) -> tuple[str, str]:
    return svc.executor.run({"id": aid})


def listed(journal: Journal, aid: int, job: str = "100", restarts: int = 0) -> None:
    """Journal that action ``aid`` took gpu-node-001 out and listed ``job`` running on it."""
    journal.set_step(aid, "take_out", "done")
    journal.set_step(
        aid, "jobs", "done", json.dumps([[job, "RUNNING", ["gpu-node-001"], restarts]])
    )


def crashed_before_hold(svc: Service) -> int:
    """An action of job 100's requeue whose process died after journaling the ``hold`` step as
    started but before ``scontrol requeuehold`` ran (the node drained, the job listed)."""
    aid = decide(svc)
    listed(svc.journal, aid)
    svc.journal.set_step(aid, "hold:100", "started")
    return aid


def held_and_pending(svc: Service, slurm: FakeSlurm) -> int:
    """A requeue of job 100 that holds it: COMPLETING one tick, then PENDING and held."""
    slurm.completing = 1
    aid = decide(svc)
    assert run(svc, aid)[0] == "waiting"  # held, COMPLETING
    advance(svc, slurm)  # PENDING and held
    return aid


def writes(slurm: FakeSlurm) -> list[list[str]]:
    return [c for c in slurm.calls if c[0] not in ("sinfo", "squeue")]


def advance(svc: Service, slurm: FakeSlurm, seconds: float = 5.0) -> None:
    assert isinstance(svc.clock, FakeClock)
    svc.clock.advance(seconds)
    slurm.schedule()


# ---------------------------------------------------------------- intake before every step
def test_an_open_storm_breaker_parks_a_decided_action_before_its_first_side_effect(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc, action="drain")
    svc.journal.put("breaker_opened_at", repr(svc.clock.now()))  # a storm after the decision
    state, outcome = run(svc, aid)
    assert state == "paused" and "storm breaker open" in outcome
    assert writes(slurm) == [] and not slurm.ours("gpu-node-001")
    [row] = svc.journal.rows("SELECT state, outcome FROM actions WHERE id=?", (aid,))
    assert (row["state"], row["outcome"]) == ("paused", outcome)  # journaled with its reason
    assert aid in [r["id"] for r in svc.journal.pending_actions()]  # resumed on a later tick
    svc.engine.reset_breaker("op")
    assert run(svc, aid)[0] == "done" and slurm.ours("gpu-node-001")


def test_the_intake_is_read_before_each_step_not_only_the_first(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc, action="checkpoint_restart")
    real = svc.backend.request_checkpoint

    def signal_then_storm(job: object) -> None:
        real(job)  # type: ignore[arg-type]
        svc.journal.put("breaker_opened_at", repr(svc.clock.now()))

    svc.backend.request_checkpoint = signal_then_storm  # type: ignore[method-assign]
    assert run(svc, aid)[0] == "waiting"  # drained and signalled; the ack has not come
    advance(svc, slurm, 6)  # the ack deadline passed: the next step would be requeuehold
    state, outcome = run(svc, aid)
    assert state == "paused" and "storm breaker open" in outcome
    assert ["scontrol", "requeuehold", "100"] not in slurm.calls
    assert slurm.jobs["100"].state == "RUNNING"


def test_a_stopping_service_parks_the_next_step_and_the_action_resumes_after_restart(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc, action="drain")
    svc.executor.stopping = "service stopping"
    state, outcome = run(svc, aid)
    assert state == "paused" and outcome.startswith("service stopping")
    assert writes(slurm) == []
    fresh = Executor(svc.journal, svc.backend, svc.policy, svc.clock.now)  # after the restart
    assert fresh.run({"id": aid})[0] == "done" and slurm.ours("gpu-node-001")


async def test_the_worker_closes_the_executors_intake_when_it_stops(svc: Service) -> None:
    assert svc.executor.stopping == ""
    await svc.worker.stop()
    assert svc.executor.stopping == "service stopping"


def test_release_outranks_pause_and_pause_outranks_the_breaker(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid, other = decide(svc, action="drain"), decide(svc, "gpu-node-002", action="drain")
    svc.journal.put("breaker_opened_at", repr(svc.clock.now()))
    svc.engine.set_paused(True, "op")
    assert run(svc, aid) == (
        "paused",
        "paused before a side-effecting step; resumes with /api/v1/resume",
    )
    with svc.journal.tx() as db:  # a release that lands while this one is queued
        db.execute("UPDATE nodes SET epoch=epoch+1 WHERE node='gpu-node-002'")
    state, outcome = run(svc, other)
    assert state == "superseded" and "gpu-node-002 was released" in outcome
    assert writes(slurm) == []


# ---------------------------------------------------------------- the requeue saga
def test_the_requeue_waits_for_pending_across_ticks_without_sleeping_a_thread(
    svc: Service, slurm: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    slurm.completing = 3  # RUNNING -> COMPLETING for three scheduler ticks -> PENDING
    aid = decide(svc)
    sleeps: list[float] = []
    monkeypatch.setattr(time, "sleep", sleeps.append)
    states = []
    for _ in range(8):
        states.append(run(svc, aid)[0])
        if states[-1] == "done":
            break
        advance(svc, slurm)
    assert sleeps == []  # each run returned at once; the fake clock moved between them
    assert states[:3] == ["waiting", "waiting", "waiting"] and states[-1] == "done", states
    assert svc.journal.step_state(aid, "pending:100") == "done"
    assert writes(slurm) == [
        ["scontrol", "update", "NodeName=gpu-node-001", "State=DRAIN",
         f"Reason={svc.journal.rows('SELECT reason FROM actions')[0]['reason']}"],
        ["scontrol", "requeuehold", "100"],
        ["scontrol", "update", "JobId=100", "ExcNodeList=gpu-node-001"],
        ["scontrol", "update", "JobId=100", "StartTime=now"],
        ["scontrol", "release", "100"],
    ]  # fmt: skip
    job = slurm.jobs["100"]
    assert job.state == "RUNNING" and "gpu-node-001" not in job.nodes and not job.held


def test_a_hold_not_followed_by_pending_in_time_fails_the_attempt_and_the_retry_waits_again(
    svc: Service, slurm: FakeSlurm
) -> None:
    slurm.completing = 100
    aid = decide(svc)
    assert run(svc, aid)[0] == "waiting"
    advance(svc, slurm, 31)
    state, outcome = run(svc, aid)
    assert state == "retry" and "not pending 30s after requeuehold" in outcome
    advance(svc, slurm, 10)
    assert run(svc, aid)[0] == "waiting"  # a fresh deadline, not the spent one
    assert slurm.calls.count(["scontrol", "requeuehold", "100"]) == 1  # held once
    slurm.jobs["100"].completing = 0
    advance(svc, slurm)
    assert run(svc, aid)[0] == "waiting"  # pending and released; now waits to run elsewhere
    advance(svc, slurm)
    assert run(svc, aid)[0] == "done"
    assert not slurm.jobs["100"].held


def test_a_restart_between_hold_and_release_finishes_the_saga_from_slurms_state(
    svc: Service, slurm: FakeSlurm
) -> None:
    slurm.completing = 1
    aid = decide(svc)
    svc.journal.set_step(aid, "hold:100", "started")  # kill -9 after requeuehold took effect
    listed(svc.journal, aid)
    slurm.run(["scontrol", "update", "NodeName=gpu-node-001", "State=DRAIN", "Reason=gpuwarden: x"])
    slurm.run(["scontrol", "requeuehold", "100"])
    slurm.calls.clear()
    advance(svc, slurm)  # COMPLETING -> PENDING, held
    fresh = Executor(svc.journal, svc.backend, svc.policy, svc.clock.now)
    assert fresh.run({"id": aid})[0] == "waiting"  # released; waits for it to run elsewhere
    assert svc.journal.step_state(aid, "hold:100") == "done"
    assert svc.journal.step_detail(aid, "hold:100") == "reconciled after restart"
    assert ["scontrol", "requeuehold", "100"] not in slurm.calls  # not repeated
    assert ["scontrol", "release", "100"] in slurm.calls and not slurm.jobs["100"].held


def test_a_manual_release_while_a_job_is_held_releases_the_job_too(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = held_and_pending(svc, slurm)
    assert slurm.jobs["100"].held
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    [row] = svc.journal.rows("SELECT state FROM actions WHERE id=?", (aid,))
    assert row["state"] == "pending"  # kept live: it still holds a job
    state, outcome = run(svc, aid)
    assert state == "superseded" and "job 100 released (compensation)" in outcome
    assert not slurm.jobs["100"].held
    assert svc.journal.step_state(aid, "hold:100") == "compensated"


def test_a_saga_that_fails_for_good_releases_the_job_it_holds(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc)
    slurm.fail = {"job_update", "release"}  # exclusion fails, and so does the compensation
    for _ in range(3):
        state, outcome = run(svc, aid)
        advance(svc, slurm, 20)
    assert state == "failed", outcome
    assert "compensation failed" in outcome  # the release failed too: paged, job held
    slurm.fail = set()
    aid2 = decide(svc)  # Alertmanager's repeat re-drives the failed action
    assert aid2 == aid
    assert run(svc, aid)[0] in ("waiting", "done")
    assert not slurm.jobs["100"].held


def test_a_pause_after_the_hold_still_finishes_the_saga_so_no_job_stays_held(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = held_and_pending(svc, slurm)
    svc.engine.set_paused(True, "op")
    svc.journal.put("breaker_opened_at", repr(svc.clock.now()))
    assert run(svc, aid)[0] == "waiting"  # released; now waiting for it to run elsewhere
    assert ["scontrol", "release", "100"] in slurm.calls and not slurm.jobs["100"].held
    assert svc.journal.step_state(aid, "requeue:100") == "done"


def test_a_restart_during_the_release_step_takes_slurms_word_and_does_not_release_twice(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc)
    real = svc.backend.requeue_finish  # type: ignore[attr-defined]

    def crash_after(job: object, exclude: str) -> str:
        real(job, exclude)
        raise SystemExit("kill -9")  # the reply never journaled

    svc.backend.requeue_finish = crash_after  # type: ignore[attr-defined]
    with pytest.raises(SystemExit):
        run(svc, aid)
    assert svc.journal.step_state(aid, "requeue:100") == "started"
    svc.backend.requeue_finish = real  # type: ignore[attr-defined]
    slurm.calls.clear()
    fresh = Executor(svc.journal, svc.backend, svc.policy, svc.clock.now)
    fresh.run({"id": aid})
    assert svc.journal.step_detail(aid, "requeue:100") == "reconciled after restart"
    assert writes(slurm) == []  # requeued, released: nothing done twice


def test_the_pending_deadline_message_is_exact_and_only_open_sagas_are_compensated(
    svc: Service, slurm: FakeSlurm
) -> None:
    slurm.jobs["101"] = FakeJob("RUNNING", ["gpu-node-001"])
    aid = decide(svc)
    assert run(svc, aid)[0] == "waiting"  # job 100 requeued and released at once
    advance(svc, slurm)  # job 100 runs elsewhere
    slurm.completing = 100
    assert run(svc, aid)[0] == "waiting"  # job 101 held, COMPLETING
    assert svc.journal.step_state(aid, "hold:101") == "done"
    advance(svc, slurm, 30)  # exactly the deadline (30 s)
    state, outcome = run(svc, aid)
    assert outcome.endswith(
        "job 101 not pending 30s after requeuehold (held; the retry waits again, a failed "
        "action releases it); retry in 10s"
    ), outcome
    slurm.jobs["101"].completing = 0
    advance(svc, slurm)  # PENDING and held
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    slurm.calls.clear()
    state, outcome = run(svc, aid)
    assert state == "superseded"
    assert outcome.endswith("; job 101 released (compensation)"), outcome
    assert ["scontrol", "release", "100"] not in slurm.calls  # its saga had finished
    assert not slurm.jobs["101"].held
    assert svc.journal.step_detail(aid, "hold:101") == "job released"


def test_a_superseded_saga_whose_job_is_still_completing_stays_live_until_it_can_release(
    svc: Service, slurm: FakeSlurm
) -> None:
    slurm.completing = 5
    aid = decide(svc)
    assert run(svc, aid)[0] == "waiting"
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    state, outcome = run(svc, aid)
    assert state == "retry" and "job 100 not yet pending: its hold cannot be released" in outcome
    for _ in range(5):
        advance(svc, slurm)
    advance(svc, slurm, 10)
    state, outcome = run(svc, aid)
    assert state == "superseded" and not slurm.jobs["100"].held, outcome


def test_a_finished_saga_is_not_compensated(svc: Service, slurm: FakeSlurm) -> None:
    aid = decide(svc)
    assert run(svc, aid)[0] == "waiting"  # requeued and released; not running elsewhere yet
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    [row] = svc.journal.rows("SELECT state FROM actions WHERE id=?", (aid,))
    assert row["state"] == "superseded"  # no open saga: dropped at once
    slurm.calls.clear()
    assert svc.executor._compensate_sagas({"id": aid}) == ""
    assert writes(slurm) == []


def test_a_hold_that_never_happened_is_not_waited_on_when_the_node_is_released(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = crashed_before_hold(svc)
    slurm.run(["scontrol", "update", "NodeName=gpu-node-001", "State=DRAIN", "Reason=gpuwarden: x"])
    assert svc.engine.release("gpu-node-001", manual=True, who="op").allow
    state, outcome = run(svc, aid)
    assert state == "superseded", outcome  # the job runs, nothing is held: nothing to wait for
    assert ["scontrol", "release", "100"] not in slurm.calls
