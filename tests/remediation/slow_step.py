"""``python tests/remediation/slow_step.py <remediation flags>``: the service with the dry-run
backend's take-out slowed to ``$SLOW`` seconds and each one's start and end appended to
``$MARK`` (pid, start|end, wall time): a step still running when the service is told to
stop (test_leader_service.py)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from remediation.backends import dryrun

_take_out = dryrun.DryRunBackend.take_out


def _mark(what: str) -> None:
    with open(os.environ["MARK"], "a") as f:
        f.write(f"{os.getpid()} {what} {time.time():.3f}\n")


def take_out(self: dryrun.DryRunBackend, *args: object, **kw: object) -> object:
    _mark("start")
    time.sleep(float(os.environ.get("SLOW", "4")))
    _mark("end")
    return _take_out(self, *args, **kw)  # type: ignore[arg-type]


dryrun.DryRunBackend.take_out = take_out  # type: ignore[method-assign,assignment]

if __name__ == "__main__":
    from remediation.cli import main

    raise SystemExit(main())
