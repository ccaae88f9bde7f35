"""The reset as a validation-style suite: run on the node like a validation suite (a Slurm
job in gpuwarden's maintenance reservation, not exclusive: the jobs of the node's other
GPUs keep running beside it; or a Kubernetes Job bound to the node), two
steps: the reset (persistence mode off around it when it was on) and the verification that
the GPU answers NVML again (on AMD nodes ``amd-smi``'s reset and check, :mod:`.amd`). Pure: builds the Suite; the suite runners do the I/O."""

from __future__ import annotations

import shlex

from remediation.gpureset.config import ResetPolicy
from remediation.validation.suite import Step, Suite

SUITE = "gpu-reset"


def reset_shell(p: ResetPolicy, index: str) -> str:
    """The reset step's shell: persistence mode is turned off for the reset (a GPU in
    persistence mode keeps a driver handle open) and back on after, when it was on."""
    reset = " ".join(shlex.quote(a) for a in p.argv(p.command, index))
    if not p.persistence_mode:
        return reset
    i = shlex.quote(index)
    return (
        f"pm=$(nvidia-smi -i {i} --query-gpu=persistence_mode --format=csv,noheader "
        "2>/dev/null); "
        f'[ "$pm" = Enabled ] && nvidia-smi -i {i} -pm 0 >/dev/null 2>&1; '
        f"{reset}; rc=$?; "
        f'[ "$pm" = Enabled ] && nvidia-smi -i {i} -pm 1 >/dev/null 2>&1; '
        "exit $rc"
    )


def suite(p: ResetPolicy, index: str, *, amd: bool = False) -> Suite:
    """The two steps; on an AMD node ``amd-smi``'s (no persistence mode to turn off)."""
    if amd:
        reset = ("sh", "-c", " ".join(shlex.quote(a) for a in p.argv(p.amd_command, index)))
        verify = p.argv(p.amd_verify_command, index)
    else:
        reset, verify = ("sh", "-c", reset_shell(p, index)), p.argv(p.verify_command, index)
    return Suite(
        SUITE,
        (
            Step("reset", reset, p.timeout_s, "exit_code"),
            Step("verify", verify, 60.0, "exit_code"),
        ),
        exclusive=False,  # the jobs of the node's other GPUs keep running beside it
    )
