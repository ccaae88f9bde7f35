"""The GPU reset on Slurm against the fault-injecting fake slurmctld (the real Slurm backend
code; the reset job itself a stub runner): only the jobs holding the GPU are requeued (GRES
IDX from ``squeue --json``), jobs on the node's other GPUs keep running, and a job whose
GPUs cannot be told is moved (fail closed); the reset job does not take the whole node; a
manual release while the reset job runs is refused until it ended (never a node back in
service under a reset job), works once it ended, and a release landing while the job is
being submitted cancels the job."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediation.clock import FakeClock
from remediation.gpureset.config import ResetPolicy
from remediation.gpureset.job import suite
from remediation.service import Service
from remediation.validation.slurm import SlurmValidation, ValidationRun
from remediation.validation.suite import StepRun, Suite
from tests.remediation.fakeslurm import FakeJob, FakeSlurm
from tests.remediation.helpers import LIVE_POLICY, alert, service, topology_file

NODES = [f"gpu-node-{i:03d}" for i in range(1, 9)]
ALLOW = "checkpoint_restart, reboot, inspect]"
POLICY = LIVE_POLICY.replace(ALLOW, ALLOW.replace("reboot,", "reboot, reset_gpu,"), 1)
SMI_Q = Path(__file__).resolve().parents[2] / "fixtures/gpureset/smi-q-r535.161-h100.txt"
NODE = "gpu-node-001"


class StubReset:
    """Where the reset job runs: records what the saga asks; ``result`` is what a poll
    reads (None: still running)."""

    def __init__(self) -> None:
        self.started: list[Suite] = []
        self.cancelled: list[str] = []
        self.finished: list[Any] = []
        self.result: list[StepRun] | None = None
        self.on_start: Any = None

    def start(self, node: str, s: Suite, run_id: str, reason: str) -> ValidationRun:
        self.started.append(s)
        if self.on_start is not None:
            self.on_start()
        return ValidationRun(node, run_id, "9001", f"gpuwarden-validate-{node}", "/nonexistent", 2)

    def poll(self, run: ValidationRun) -> list[StepRun] | None:
        return self.result

    def cancel(self, run: ValidationRun) -> None:
        self.cancelled.append(run.job_id)

    def finish(self, run: ValidationRun, word: str | None) -> None:
        self.finished.append(word)


@pytest.fixture
def slurm() -> FakeSlurm:
    s = FakeSlurm(NODES)
    s.jobs["100"] = FakeJob("RUNNING", [NODE], gpus=(3,))  # the faulty GPU's job
    s.jobs["101"] = FakeJob("RUNNING", [NODE], gpus=(0, 1))  # other GPUs of the node
    s.jobs["102"] = FakeJob("RUNNING", [NODE])  # no GPU GRES: its GPUs cannot be told
    s.jobs["103"] = FakeJob("RUNNING", ["gpu-node-002"], gpus=(3,))  # another node
    return s


@pytest.fixture
def svc(tmp_path: Path, slurm: FakeSlurm) -> Service:
    s = service(tmp_path, POLICY, clock=FakeClock(), runner=slurm, backend="slurm",
                topology=topology_file(tmp_path, len(NODES)))  # fmt: skip
    s.executor.resetter = StubReset()
    return s


def decide(svc: Service) -> int:
    a = alert(NODE, "xid_fatal", "reboot", gpu="3", xid="79", reset_suffices="true")
    svc.journal.accept([a], svc.clock.now())
    aid = svc.engine.decide(a)
    assert aid is not None
    [row] = svc.journal.rows("SELECT action FROM actions WHERE id=?", (aid,))
    assert row["action"] == "reset_gpu"
    return aid


def drive(svc: Service, slurm: FakeSlurm, aid: int, until: str) -> tuple[str, str]:
    """Tick the action (and the fake scheduler) until step ``until`` exists or it ends."""
    for _ in range(50):
        state, outcome = svc.executor.run({"id": aid})
        slurm.schedule()
        if state not in ("waiting", "retry") or svc.journal.step_state(aid, until):
            return state, outcome
    raise AssertionError(f"{until} never reached: {state} {outcome}")


def requeued(slurm: FakeSlurm) -> set[str]:
    return {c[2] for c in slurm.calls if c[:2] == ["scontrol", "requeuehold"]}


def test_a_slurm_reset_requeues_only_the_jobs_of_its_gpu_and_those_of_unknown_gpus(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc)
    drive(svc, slurm, aid, "reset_start")
    assert requeued(slurm) == {"100", "102"}  # GPU 3's job, and the one it cannot tell
    assert slurm.jobs["101"].state == "RUNNING" and slurm.jobs["101"].nodes == [NODE]
    assert slurm.jobs["101"].restarts == 0 and not slurm.jobs["101"].held
    assert slurm.jobs["103"].restarts == 0  # GPU 3 of another node: none of this reset's
    for jid in ("100", "102"):
        assert slurm.jobs[jid].state == "RUNNING" and NODE not in slurm.jobs[jid].nodes
    scope = svc.journal.step_detail(aid, "jobs_scope")
    assert scope == ("the jobs holding GPU 3 or whose GPUs are unknown (gres IDX); kept on "
                     "other GPUs: 101")  # fmt: skip
    [reset] = svc.executor.resetter.started
    assert reset.exclusive is False  # the reset job runs beside job 101


def test_the_reset_passes_with_the_other_gpus_jobs_still_running(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc)
    drive(svc, slurm, aid, "reset_start")
    svc.executor.resetter.result = [StepRun(0, "reset"), StepRun(0, SMI_Q.read_text())]
    state, outcome = drive(svc, slurm, aid, "reset_finish")
    assert state == "done" and "GPU 3 reset and verified" in outcome, outcome
    assert slurm.jobs["101"].state == "RUNNING" and slurm.jobs["101"].nodes == [NODE]


def test_the_reset_suite_is_submitted_without_exclusive_a_validation_suite_with_it(
    tmp_path: Path,
) -> None:
    fake = FakeSlurm(NODES)
    runner = SlurmValidation(fake, str(tmp_path), user="gpuwarden")
    runner.start(NODE, suite(ResetPolicy(), "3"), "reset-1", "gpuwarden: xid 79")
    runner.start(NODE, Suite("validate", suite(ResetPolicy(), "3").steps), "v-1", "gpuwarden: x")
    sbatch = [c for c in fake.calls if c[0] == "sbatch"]
    assert "--exclusive" not in sbatch[0] and "--exclusive" in sbatch[1]


def release(svc: Service) -> tuple[int, dict[str, Any]]:
    return svc.request_release(NODE, "alice")


def test_a_manual_release_during_a_slurm_gpu_reset_is_refused_and_the_node_stays_out(
    svc: Service, slurm: FakeSlurm
) -> None:
    """On main the release went through: the node resumed with the reset job on it and the
    action superseded, so nothing ever concluded or cancelled the job."""
    aid = decide(svc)
    state, _ = drive(svc, slurm, aid, "reset_done")
    assert state == "waiting"  # the reset job runs
    status, body = release(svc)
    assert status == 409 and body["guard"] == "gpu_reset", body
    assert f"GPU reset (action #{aid}) runs on {NODE}" in body["reason"]
    assert "release again then" in body["reason"] and "at the latest" in body["reason"]
    assert slurm.ours(NODE)  # still drained by gpuwarden
    [row] = svc.journal.rows("SELECT state FROM actions WHERE id=?", (aid,))
    assert row["state"] == "waiting"  # the saga still owns (and will conclude) the job
    assert svc.executor.resetter.cancelled == []  # not interrupted half-way


def test_a_release_once_the_reset_ended_goes_through(svc: Service, slurm: FakeSlurm) -> None:
    aid = decide(svc)
    drive(svc, slurm, aid, "reset_done")
    svc.executor.resetter.result = [StepRun(0, "reset"), StepRun(0, SMI_Q.read_text())]
    assert drive(svc, slurm, aid, "reset_finish")[0] == "done"
    status, body = release(svc)
    assert status == 200 and body["released"] is True, body
    assert not slurm.ours(NODE)


def test_a_release_without_any_reset_is_not_held_by_this_check(svc: Service) -> None:
    svc.backend.take_out(NODE, "gpuwarden: by hand", False)
    assert release(svc)[0] == 200


def test_a_reset_left_by_a_failed_action_is_cancelled_and_read_back_before_the_release(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc)
    drive(svc, slurm, aid, "reset_done")
    with svc.journal.tx() as db:  # failed after its retries: nothing will conclude the job
        db.execute("UPDATE actions SET state='failed' WHERE id=?", (aid,))
    stub = svc.executor.resetter
    status, body = release(svc)  # the stub still shows it running after the cancel
    assert status == 409 and "cancelled, not yet ended; ask again" in body["reason"]
    assert stub.cancelled == ["9001"]
    stub.result = []  # the scheduler now says it ended
    status, body = release(svc)
    assert status == 200, body
    verdict = json.loads(svc.journal.step_detail(aid, "reset_verdict"))
    assert verdict == {"passed": False,
                       "why": "cancelled by a manual release after its action ended"}  # fmt: skip


def test_a_release_landing_while_the_reset_job_is_submitted_cancels_that_job(
    svc: Service, slurm: FakeSlurm
) -> None:
    aid = decide(svc)
    stub = svc.executor.resetter
    stub.on_start = lambda: svc.engine.release(NODE, True, "bob")  # between check and submit
    state, outcome = drive(svc, slurm, aid, "reset_done")
    assert state == "superseded", outcome
    assert "reset job cancelled" in outcome
    assert stub.finished == [None]  # no re-drain: the node was released


@pytest.mark.parametrize(("detail", "nodes", "node", "want"), [
    (["gpu:2(IDX:1-2)"], ["n1"], "n1", {"1", "2"}),  # 22.05, as the real lab shows it
    (["gpu:h100:3(IDX:0-1,3)"], ["n1"], "n1", {"0", "1", "3"}),  # typed GRES, a list
    (["gpu:1(IDX:0)", "gpu:1(IDX:5)"], ["n1", "n2"], "n2", {"5"}),  # per node, in order
    (["gpu:1(IDX:0),gpu:a100:1(IDX:4)"], ["n1"], "n1", {"0", "4"}),  # two GPU types
    ([], ["n1"], "n1", None),  # no GPU GRES: cannot tell
    (["shard:2(2/8,0/8)"], ["n1"], "n1", None),  # no GPU entry
    (["gpu:1(IDX:N/A)"], ["n1"], "n1", None),  # unknown index
    (["gpu:1(IDX:3-1)"], ["n1"], "n1", None),  # garbage range
    (["gpu:1(IDX:0)"], ["n1", "n2"], "n2", None),  # fewer entries than nodes
    (None, ["n1"], "n1", None),  # an older squeue without the field
])  # fmt: skip
def test_a_jobs_gpus_are_read_from_gres_detail_or_are_unknown(
    detail: Any, nodes: list[str], node: str, want: set[str] | None
) -> None:
    from remediation.backends.slurmstate import gpu_indices

    got = gpu_indices({"gres_detail": detail} if detail is not None else {}, node, nodes)
    assert (None if got is None else set(got)) == want


def test_an_automatic_release_after_probation_waits_for_a_running_reset(
    svc: Service, slurm: FakeSlurm
) -> None:
    """The same hole as the manual release, through probation: the XID alert resolves while
    the reset job runs and probation (60 s here) passes; the engine released the node,
    superseding the reset action, and nothing concluded the reset job. Now the node stays
    on probation while the reset runs."""
    aid = decide(svc)
    assert drive(svc, slurm, aid, "reset_done")[0] == "waiting"
    done = alert(NODE, "xid_fatal", "reboot", status="resolved", gpu="3", xid="79",
                 reset_suffices="true")  # fmt: skip
    svc.journal.accept([done], svc.clock.now())
    svc.engine.decide(done)
    for _ in range(3):
        svc.clock.advance(100)  # type: ignore[attr-defined]
        svc.engine.tick()
    [row] = svc.journal.rows("SELECT state FROM actions WHERE id=?", (aid,))
    assert row["state"] == "waiting" and slurm.ours(NODE)
    assert svc.journal.node(NODE)["state"] == "probation"  # type: ignore[index]
    # the reset concludes (verified): the next tick past probation releases the node
    svc.executor.resetter.result = [StepRun(0, "reset"), StepRun(0, SMI_Q.read_text())]
    assert drive(svc, slurm, aid, "reset_finish")[0] == "done"
    assert svc.engine.tick() == [NODE]
    assert not slurm.ours(NODE)


def test_a_node_whose_reset_runs_holds_back_no_other_nodes_release(
    svc: Service, slurm: FakeSlurm
) -> None:
    """The reset's node is skipped, not the rest of the tick: another node whose probation
    ended is released in the same tick."""
    other = "gpu-node-002"
    aid = decide(svc)
    assert drive(svc, slurm, aid, "reset_done")[0] == "waiting"
    done = alert(NODE, "xid_fatal", "reboot", status="resolved", gpu="3", xid="79",
                 reset_suffices="true")  # fmt: skip
    svc.journal.accept([done], svc.clock.now())
    svc.engine.decide(done)
    svc.backend.take_out(other, "gpuwarden: by hand", False)
    now = svc.clock.now()
    with svc.journal.tx() as db:
        for node in (NODE, other):  # both past probation, nothing firing
            svc.journal.set_node(db, node, state="probation", resolved_at=now - 600,
                                 probation_s=60, fault_class="xid_fatal")  # fmt: skip
    calls: list[str] = []
    blocked = svc.engine.release_blocked
    assert blocked is not None

    def watched(node: str) -> str | None:
        calls.append(node)
        return blocked(node)

    svc.engine.release_blocked = watched
    assert svc.engine.tick() == [other]
    assert sorted(calls) == [NODE, other]
    assert slurm.ours(NODE) and not slurm.ours(other)
