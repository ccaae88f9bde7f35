"""Running a validation suite on a drained Slurm node, through a gpuwarden-owned reservation.

A drained node takes no jobs, not even ours. So the node goes into a maintenance
reservation that only gpuwarden's user may use (``gpuwarden-validate-<node>``,
``Flags=MAINT,IGNORE_JOBS``, bounded ``Duration``); only then is our drain lifted, and the
suite runs as one batch job pinned to the node inside the reservation. No other job can
land there meanwhile, and ``sinfo`` still shows the node out of service (MAINTENANCE). When
the job ends, the node is drained again with the verdict in the reason, whatever it was:
releasing it is the normal release path's business (budgets, probation), never this one's.

Non-blocking: :meth:`start` submits and returns, :meth:`poll` reads the job's state and the
step outputs (``<out_dir>/<run>/<i>.out`` and ``.rc``, which the job writes), :meth:`finish`
re-drains and removes the reservation. The caller drives them from its tick loop.
"""

from __future__ import annotations

import getpass
import shlex
from dataclasses import dataclass
from pathlib import Path

from remediation.backends.base import BackendError
from remediation.backends.runner import Runner, checked
from remediation.model import REASON_PREFIX
from remediation.validation.suite import StepRun, Suite

PREFIX = "gpuwarden-validate-"
RESERVATION_MARGIN_S = 600.0
ENDED = ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "")


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
        """Reserve the node, lift our drain into the reservation, submit the suite."""
        if not drain_reason.startswith(REASON_PREFIX):
            raise BackendError(f"node {node} is not drained by gpuwarden ({drain_reason!r})")
        res = reservation_name(node)
        minutes = max(1, int((sum(s.timeout_s for s in suite.steps) + RESERVATION_MARGIN_S) // 60))
        self.runner.run(["scontrol", "delete", f"ReservationName={res}"])  # a stale one
        self._ok("scontrol", "create", "reservation", f"ReservationName={res}", f"Nodes={node}",
                 "StartTime=now", f"Duration={minutes}", f"Users={self.user}",
                 "Flags=MAINT,IGNORE_JOBS")  # fmt: skip
        out = self.out_dir / run_id
        try:
            out.mkdir(parents=True, exist_ok=True)
            script = out / "suite.sh"
            script.write_text(batch_script(suite, out))
            script.chmod(0o755)
            self._ok("scontrol", "update", f"NodeName={node}", "State=RESUME")
            job = self._ok("sbatch", "--parsable", f"--reservation={res}", f"--nodelist={node}",
                           "--exclusive", f"--job-name=gpuwarden-validate-{node}",
                           f"--output={out / 'job.log'}", f"--chdir={out}",
                           str(script)).strip().split(";")[0]  # fmt: skip
        except (BackendError, OSError) as e:
            self._redrain(node, f"{REASON_PREFIX} validation could not start: {e}"[:200])
            self.runner.run(["scontrol", "delete", f"ReservationName={res}"])
            raise BackendError(f"validation of {node} not started: {e}") from e
        return ValidationRun(node, run_id, job, res, str(out), len(suite.steps))

    def poll(self, run: ValidationRun) -> list[StepRun] | None:
        """None while the job runs; then one StepRun per step (None exit code: no result)."""
        r = self.runner.run(["squeue", "-h", "-j", run.job_id, "-o", "%T"])
        if r.rc == 0 and r.stdout.strip() not in ENDED:
            return None
        out, runs = Path(run.out_dir), []
        for i in range(run.steps):
            try:
                rc = int((out / f"{i}.rc").read_text().strip())
                stdout = (out / f"{i}.out").read_text(errors="replace")
            except (OSError, ValueError):
                runs.append(StepRun(None, ""))  # never ran or no result: not a pass
                continue
            runs.append(StepRun.exited(rc, stdout))
        return runs

    def cancel(self, run: ValidationRun) -> None:
        self.runner.run(["scancel", run.job_id])

    def finish(self, run: ValidationRun, verdict: str) -> None:
        """Drain the node again (the verdict in the reason) and drop the reservation."""
        self._redrain(run.node, f"{REASON_PREFIX} validation {verdict}"[:200])
        self.runner.run(["scontrol", "delete", f"ReservationName={run.reservation}"])

    def _redrain(self, node: str, reason: str) -> None:
        self._ok("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}")
