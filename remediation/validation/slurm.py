"""Running a validation suite on a drained Slurm node, through a gpuwarden-owned reservation.

A drained node takes no jobs, not even ours. So the node goes into a maintenance
reservation that only gpuwarden's user may use (``gpuwarden-validate-<node>``,
``Flags=MAINT,IGNORE_JOBS``, ``Duration=UNLIMITED``); only then is our drain lifted, and the
suite runs as one batch job pinned to the node inside the reservation. No other job can
land there meanwhile, and ``sinfo`` still shows the node out of service (MAINTENANCE). When
the job ends, the node is drained again with the verdict in the reason, whatever it was:
releasing it is the normal release path's business (budgets, probation), never this one's.

Non-blocking: :meth:`start` submits and returns, :meth:`poll` reads the job's state and the
step outputs (``<out_dir>/<run>/<i>.out`` and ``.rc``, which the job writes), :meth:`finish`
re-drains, cancels the job and removes the reservation, and reads all three back (raising
while the scheduler has not confirmed them: the caller retries every tick). The caller
drives them from its tick loop.

Fail closed: a ``squeue`` that fails is :class:`SchedulerUnknown` (the job may well still
run), never "the job ended"; only an answer from slurmctld ends a run. The reservation
has no end of its own (``UNLIMITED``: slurmctld keeps it a year): it is deleted
explicitly, only once the node is drained again, so neither a silent slurmctld past the
run's deadline nor a service killed (-9) and down for hours lets it lapse under a node
whose drain is lifted. A reservation left by a service that never comes back keeps the
node out of service (fail closed); ``scontrol delete ReservationName=gpuwarden-validate-*``
is the human's way out.
"""

from __future__ import annotations

import getpass
import shlex
from dataclasses import dataclass
from pathlib import Path

from remediation.backends.base import BackendError
from remediation.backends.runner import Runner, checked
from remediation.backends.slurm import RESERVATION_PREFIX
from remediation.model import REASON_PREFIX
from remediation.validation.suite import StepRun, Suite

PREFIX = RESERVATION_PREFIX
RESERVATION_DURATION = "UNLIMITED"  # deleted explicitly, never left to lapse
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "")
LIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING")
GONE = ("Invalid job id", "already completing or completed")  # slurmctld's answers: ended


class SchedulerUnknown(BackendError):
    """slurmctld did not answer: the run's state is unknown (never read as ended)."""


class SuiteCancelled(BackendError):
    """The suite job was cancelled outside gpuwarden (an admin's ``scancel``, a Kubernetes
    Job deleted by someone else): no verdict on the node; the run fails closed as
    ``cancelled``, never as "timed out"."""


@dataclass(frozen=True)
class ValidationRun:
    node: str
    run_id: str
    job_id: str
    reservation: str
    out_dir: str
    steps: int


def reservation_name(node: str) -> str:
    return PREFIX + node


def batch_script(suite: Suite, out: Path) -> str:
    """One step after the other, each under ``timeout``; its output and exit code on disk.
    A step's exit code 124 is a timeout (coreutils ``timeout``)."""
    lines = ["#!/bin/sh", "# gpuwarden validation suite " + shlex.quote(suite.name)]
    for i, step in enumerate(suite.steps):
        cmd = " ".join(shlex.quote(a) for a in step.command)
        o, rc = shlex.quote(str(out / f"{i}.out")), shlex.quote(str(out / f"{i}.rc"))
        lines.append(f"timeout -k 10 {step.timeout_s:g} {cmd} > {o} 2>&1; echo $? > {rc}")
    return "\n".join(lines) + "\n"


class SlurmValidation:
    def __init__(self, runner: Runner, out_dir: str, user: str | None = None) -> None:
        """``user``: who may use the reservation; the service's own user by default (the one
        that submits the suite). ``out_dir`` must be readable by the service and writable by
        the job on the node (shared storage, like the checkpoint ack directory)."""
        self.runner, self.out_dir = runner, Path(out_dir)
        self.user = user or getpass.getuser()

    def _ok(self, *argv: str) -> str:
        return checked(self.runner, argv, 15.0)

    def start(self, node: str, suite: Suite, run_id: str, drain_reason: str) -> ValidationRun:
        """Reserve the node (no end of its own: it outlasts the run whatever happens), lift
        our drain into the reservation, submit the suite."""
        if not drain_reason.startswith(REASON_PREFIX):
            raise BackendError(f"node {node} is not drained by gpuwarden ({drain_reason!r})")
        res = reservation_name(node)
        self.runner.run(["scontrol", "delete", f"ReservationName={res}"])  # a stale one
        self._ok("scontrol", "create", "reservation", f"ReservationName={res}", f"Nodes={node}",
                 "StartTime=now", f"Duration={RESERVATION_DURATION}", f"Users={self.user}",
                 "Flags=MAINT,IGNORE_JOBS")  # fmt: skip
        out = self.out_dir / run_id
        try:
            out.mkdir(parents=True, exist_ok=True)
            script = out / "suite.sh"
            script.write_text(batch_script(suite, out))
            script.chmod(0o755)
            self._ok("scontrol", "update", f"NodeName={node}", "State=RESUME")
            whole = ["--exclusive"] if suite.exclusive else []
            job = self._ok("sbatch", "--parsable", f"--reservation={res}", f"--nodelist={node}",
                           *whole, f"--job-name=gpuwarden-validate-{node}",
                           f"--output={out / 'job.log'}", f"--chdir={out}",
                           str(script)).strip().split(";")[0]  # fmt: skip
        except (BackendError, OSError) as e:
            self._redrain(node, f"{REASON_PREFIX} validation could not start: {e}"[:200])
            self.runner.run(["scontrol", "delete", f"ReservationName={res}"])
            raise BackendError(f"validation of {node} not started: {e}") from e
        return ValidationRun(node, run_id, job, res, str(out), len(suite.steps))

    def job_state(self, job_id: str) -> str:
        """The job's state as slurmctld tells it ("" once it left the queue); raises
        SchedulerUnknown when slurmctld did not answer."""
        r = self.runner.run(["squeue", "-h", "-j", job_id, "-o", "%T"], 15.0)
        if r.rc == 0:
            return r.stdout.strip().split("\n")[0].strip()
        if any(g in r.stderr for g in GONE):
            return ""
        raise SchedulerUnknown(f"squeue -j {job_id}: rc {r.rc}: {r.stderr.strip()[:200]}")

    def poll(self, run: ValidationRun, gone_is_cancel: bool = False) -> list[StepRun] | None:
        """None while the job runs; then one StepRun per step (None exit code: no result).
        SchedulerUnknown when slurmctld does not answer; SuiteCancelled for an admin's scancel
        and, with ``gone_is_cancel`` (the validator), for a job that left the queue before
        its steps wrote their results (the GPU-reset saga judges that as no result)."""
        state = self.job_state(run.job_id)
        if state not in ENDED:
            return None
        out, runs = Path(run.out_dir), []
        for i in range(run.steps):
            try:
                rc = int((out / f"{i}.rc").read_text().strip())
                stdout = (out / f"{i}.out").read_text(errors="replace")
            except (OSError, ValueError):
                runs.append(StepRun.no_result())  # never ran or no result: not a pass
                continue
            runs.append(StepRun.exited(rc, stdout))
        gone = state == "" and gone_is_cancel
        if (state == "CANCELLED" or gone) and any(r.missing for r in runs):
            # gone from the queue (or cancelled) before its steps ended: nobody but an
            # admin's scancel (or a purge) ends it so; gpuwarden only cancels concluded runs
            how = "was cancelled" if state else "left the queue without a result"
            raise SuiteCancelled(f"suite job {run.job_id} {how} outside gpuwarden")
        return runs

    def cancel(self, run: ValidationRun) -> None:
        self._scancel(["scancel", run.job_id])

    def finish(self, run: ValidationRun, verdict: str | None) -> None:
        """Drain the node again (the verdict in the reason; ``None``: the node was released,
        so no drain), cancel the job, drop the reservation; each read back. Raises
        BackendError until slurmctld confirmed all three (the caller retries)."""
        self.stop(run.node, run.reservation, ["scancel", run.job_id], verdict)

    def finish_lost(self, node: str, verdict: str) -> None:
        """A run whose handle was never saved (a crash after ``State=RESUME``): whatever it
        may have left is found by name: the job, the reservation; the node drained again."""
        job = ["scancel", "-u", self.user, f"--name=gpuwarden-validate-{node}"]
        self.stop(node, reservation_name(node), job, verdict)

    def stop(self, node: str, res: str, scancel: list[str], verdict: str | None) -> None:
        if verdict is not None:  # first: no job may land once the reservation is gone
            self._redrain(node, f"{REASON_PREFIX} validation {verdict}"[:200])
        self._scancel(scancel)
        r = self.runner.run(["scontrol", "delete", f"ReservationName={res}"], 15.0)
        if r.rc != 0 and "invalid" not in r.stderr.lower():
            raise BackendError(f"reservation {res} not deleted: rc {r.rc}: {r.stderr[:200]}")
        shown = self.runner.run(["scontrol", "show", "reservation", res], 15.0)
        if shown.rc == 0 or "not found" not in (shown.stdout + shown.stderr):
            raise BackendError(f"reservation {res} still there (or unknown): {shown.stderr[:200]}")
        if verdict is not None and not self._drained(node):
            raise BackendError(f"node {node} not drained by gpuwarden after the validation")

    def _scancel(self, argv: list[str]) -> None:
        r = self.runner.run(argv, 15.0)
        if r.rc != 0 and not any(g in r.stderr for g in GONE):
            raise BackendError(f"{' '.join(argv)}: rc {r.rc}: {r.stderr.strip()[:200]}")

    def _drained(self, node: str) -> bool:
        text = self._ok("scontrol", "show", "-o", "node", node)
        state = next((w[6:] for w in text.split() if w.startswith("State=")), "")
        return "DRAIN" in state.split("+") and f"Reason={REASON_PREFIX}" in text

    def _redrain(self, node: str, reason: str) -> None:
        self._ok("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
