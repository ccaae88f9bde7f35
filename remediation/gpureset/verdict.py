"""Did the reset work? Both steps ran and exited 0, and the verification's output shows a
GPU that answers NVML with nothing pending (no "requires reset", no "Unknown Error", no GPU
lost). Pure: the suite runner's StepRuns in, (passed, evidence) out."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from remediation.validation.suite import StepRun

BAD = re.compile(
    r"(?i)(requires? (a )?reset|unknown error|gpu is lost|fallen off the bus|no devices were found"
    r"|pending\s*:\s*yes)"
)


def judge(runs: Sequence[StepRun]) -> tuple[bool, dict[str, Any]]:
    names = ("reset", "verify")
    ev: dict[str, Any] = {}
    for name, r in zip(names, runs, strict=False):
        ev[name] = {"exit_code": r.exit_code, "output": r.stdout.strip()[-300:]}
    if len(runs) < 2:
        return False, {**ev, "why": "the reset job left no result"}
    reset, verify = runs[0], runs[1]
    if reset.exit_code is None or reset.exit_code == 124:
        return False, {**ev, "why": "the reset command timed out"}
    if reset.exit_code != 0:
        return False, {**ev, "why": f"the reset command failed (exit {reset.exit_code})"}
    if verify.exit_code != 0:
        return False, {
            **ev,
            "why": f"the GPU does not answer NVML after reset (exit {verify.exit_code})",
        }
    bad = BAD.search(verify.stdout)
    if bad:
        return False, {**ev, "why": f"the GPU still reports {bad.group(0)!r} after reset"}
    return True, {**ev, "why": "reset and verified: the GPU answers NVML, nothing pending"}
