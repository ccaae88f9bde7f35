"""The executor's step journal: after a crash, interrupted steps are looked at, not repeated."""

from __future__ import annotations

from pathlib import Path

from remediation.backends.dryrun import DryRunBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Job
from tests.remediation.helpers import alert, live_policy


class JobsBackend(DryRunBackend):
    """Dry-run plus one job on the node, whose ack never comes (a hand-written fake)."""

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return (Job("42", "RUNNING", (node,)),)

    def job(self, job_id: str) -> Job | None:
        return Job("42", "RUNNING", ("gpu-node-009",), 1)


CLOCK = FakeClock()


def setup(tmp: Path, action: str = "drain") -> tuple[Journal, DryRunBackend, Executor, dict]:
    j = Journal(tmp / "s.db")
    topo: dict[str, dict[str, str]] = {f"gpu-node-{i:03d}": {} for i in range(1, 11)}
    b = JobsBackend(j, topo, CLOCK.now)
    pol = live_policy(checkpoint=live_policy().checkpoint.__class__(str(tmp), 0.2, "requeue", 2))
    eng = Engine(j, b, pol, CLOCK, Metrics())
    j.accept([alert("gpu-node-001", action=action)], 0)
    aid = eng.decide(alert("gpu-node-001", action=action))
    assert aid is not None
    [row] = j.rows("SELECT * FROM actions WHERE id=?", (aid,))
    return j, b, Executor(j, b, pol, CLOCK.now), row


def effects(j: Journal, op: str) -> int:
    return int(j.scalar("SELECT COUNT(*) FROM dry_run_effects WHERE op=?", (op,)))


def test_a_drain_interrupted_after_it_took_effect_is_reconciled_not_repeated(
    tmp_path: Path,
) -> None:
    j, b, ex, row = setup(tmp_path)
    j.set_step(row["id"], "take_out", "started")
    b.action_id = row["id"]
    b.take_out("gpu-node-001", row["reason"], True)  # happened, then the crash
    assert ex.run(row) == ("done", "reconciled after restart")
    assert effects(j, "take_out") == 1


def test_a_drain_interrupted_before_it_took_effect_is_done_once(tmp_path: Path) -> None:
    j, _, ex, row = setup(tmp_path)
    j.set_step(row["id"], "take_out", "started")
    assert ex.run(row)[0] == "done"
    assert effects(j, "take_out") == 1


def test_a_checkpoint_signal_without_evidence_is_sent_again_not_called_done(
    tmp_path: Path,
) -> None:
    j, _, ex, row = setup(tmp_path, "checkpoint_restart")
    j.set_step(row["id"], "take_out", "done")
    j.set_step(row["id"], "signal:42", "started")  # crashed around the signal: no evidence
    assert ex.run(row)[0] == "waiting"  # the ack wait is a persisted deadline, not a sleep
    assert effects(j, "checkpoint") == 1  # the job still runs: the signal is re-sent
    assert j.step_detail(row["id"], "signal:42") == "checkpoint requested"
    CLOCK.advance(1)  # past the 0.2 s ack deadline
    state, outcome = ex.run(row)
    assert "no ack by deadline; requeued anyway" in outcome and state == "done"
    assert effects(j, "requeue") == 1 and effects(j, "checkpoint") == 1
    assert j.step_state(row["id"], "requeue:42") == "done"


def test_a_reboot_waits_for_an_idle_node_and_happens_once_it_is(tmp_path: Path) -> None:
    j, b, ex, row = setup(tmp_path, "reboot")
    state, outcome = ex.run(row)
    assert state == "deferred" and "node busy (1 jobs)" in outcome
    assert effects(j, "reboot") == 0
    b.jobs_on = lambda node: ()  # type: ignore[method-assign]  # the job ended
    assert ex.run(row) == ("done", "would reboot")
    assert effects(j, "reboot") == 1 and effects(j, "take_out") == 1
    assert ex.run(row) == ("done", "would reboot")  # finished: running it again does nothing
    assert effects(j, "reboot") == 1
