"""Running scheduler commands (scontrol, sinfo, squeue, scancel) behind a small protocol.

Every command has a timeout; a fake runner in the tests replays recorded outputs.
"""

from __future__ import annotations

import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from remediation.backends.base import BackendError, Unavailable


@dataclass(frozen=True)
class Result:
    rc: int
    stdout: str
    stderr: str


class Runner(Protocol):
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result: ...


class SubprocessRunner:
    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self.env = dict(env) if env is not None else None

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        try:
            p = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=timeout, env=self.env
            )
        except subprocess.TimeoutExpired:
            return Result(124, "", f"{argv[0]}: timed out after {timeout}s")
        except OSError as e:
            return Result(127, "", f"{argv[0]}: {e.strerror or e}")
        return Result(p.returncode, p.stdout, p.stderr)


# What Slurm's clients print when slurmctld does not answer (src/common/slurm_errno.c:
# SLURM_COMMUNICATIONS_CONNECTION_ERROR, SLURM_PROTOCOL_SOCKET_IMPL_TIMEOUT, ...).
UNREACHABLE = ("Unable to contact slurm controller", "Socket timed out",
               "Slurm backup controller in standby mode", "Zero Bytes were transmitted")  # fmt: skip


def checked(runner: Runner, argv: Sequence[str], timeout: float) -> str:
    """stdout of a command that must succeed; a non-zero exit is a BackendError with stderr,
    an Unavailable one when the command timed out or could not reach slurmctld."""
    r = runner.run(argv, timeout)
    if r.rc != 0:
        why = f"{' '.join(argv[:3])}: rc {r.rc}: {r.stderr.strip()[:200]}"
        if r.rc == 124 or any(u in r.stderr for u in UNREACHABLE):
            raise Unavailable(why)
        raise BackendError(why)
    return r.stdout
