"""Did the reset work? Both steps ran and exited 0, and the verification's ``nvidia-smi -q``
output shows one GPU that answers NVML with nothing left that NVIDIA says needs a reset or
an RMA. Pure: the suite runner's StepRuns in, (passed, evidence) out.

What is read, in every driver generation's wording (the fields are NVIDIA's, see
``fixtures/gpureset/README.md`` for recorded outputs of R470 to R570):

- ``Retired Pages`` / ``Pending Page Blacklist`` (``Pending Page Retirement`` in NVIDIA's
  newer wording): a page waits for a reset to be retired (dynamic page retirement).
- ``Remapped Rows`` / ``Pending``: a row remap waits for a reset; ``Remapping Failure
  Occurred``: the GPU can no longer remap (NVIDIA's RMA criterion, "A100 GPU memory error
  management").
- ``GPU Reset Status`` / ``Reset Required`` and ``Drain and Reset Recommended`` (R510 to
  R565; "Requested functionality has been deprecated" from R570 on, where
  ``GPU Recovery Action`` replaces them): ``GPU Recovery Action`` must be ``None`` (Reset,
  Reboot, Drain P2P, Drain and Reset: NVML_GPU_RECOVERY_ACTION_*).

- ``ECC Errors`` / ``Channel Repair Pending``, ``TPC Repair Pending`` (a repair waits for a
  reset), ``Unrepairable Memory`` and ``Aggregate`` / ``SRAM Threshold Exceeded`` (RMA): R575
  and newer print them (recorded on a real H200 with R580, ``fixtures/device/``); judged
  where printed.

Fail closed: an output with no GPU block or several, a section missing (every driver since
R470 prints ``Retired Pages`` and ``Remapped Rows``, ``N/A`` where the GPU lacks the
feature), a value that is not one of the known answers, or reset signals of which none is
readable, all fail the reset with what was found; so does an NVML error printed anywhere
("Unknown Error", GPU lost, fallen off the bus, "requires reset").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from remediation.gpureset import amd as amd_smi
from remediation.gpureset.smi import Section, parse
from remediation.validation.suite import StepRun

# NVML's answers for a GPU it cannot reach; printed instead of (or inside) the GPU's block.
# "Unknown Error" alone is not one: healthy GPUs print it for fields NVML cannot read there
# (``Addressing Mode`` on R535, ``Host Max`` in a VM: see fixtures/gpureset/); in a field
# judged below it is an unknown value and fails that field.
BAD = re.compile(
    r"(?i)(requires? (a )?reset|gpu is lost|fallen off the bus|no devices were found"
    r"|unable to determine the device handle)"
)
CLEAR = ("No", "N/A")  # a flag that is not set, or a GPU without the feature
DEPRECATED = "Requested functionality has been deprecated"  # R570+: see GPU Recovery Action
PENDING_PAGES = ("Pending Page Blacklist", "Pending Page Retirement")


def _flag(state: dict[str, str], bad: list[str], name: str, value: str | None,
          meaning: str) -> None:  # fmt: skip
    """One yes/no flag: Yes is the fault itself, anything but No/N/A is unknown."""
    state[name] = "missing" if value is None else value
    if value == "Yes":
        bad.append(f"{name}: Yes ({meaning})")
    elif value not in CLEAR:
        bad.append(f"{name}: {state[name]!r} (unknown: not judged healthy)")


def _memory(gpu: Section, state: dict[str, str], bad: list[str]) -> None:
    pages = gpu.sections.get("Retired Pages")
    if pages is None:
        state["Retired Pages"] = gpu.fields.get("Retired Pages", "missing")
        if state["Retired Pages"] != "N/A":
            bad.append(f"Retired Pages: {state['Retired Pages']!r} (unknown)")
    else:
        key = next((k for k in PENDING_PAGES if k in pages.fields), PENDING_PAGES[0])
        _flag(state, bad, f"Retired Pages/{key}", pages.fields.get(key),
              "a page retirement waits for a reset")  # fmt: skip
    rows = gpu.sections.get("Remapped Rows")
    if rows is None:
        state["Remapped Rows"] = gpu.fields.get("Remapped Rows", "missing")
        if state["Remapped Rows"] != "N/A":
            bad.append(f"Remapped Rows: {state['Remapped Rows']!r} (unknown)")
        return
    _flag(state, bad, "Remapped Rows/Pending", rows.fields.get("Pending"),
          "a row remap waits for a reset")  # fmt: skip
    _flag(state, bad, "Remapped Rows/Remapping Failure Occurred",
          rows.fields.get("Remapping Failure Occurred"), "row remapping failed: RMA")  # fmt: skip
    _repairs(gpu, state, bad)


# R575+ print these under ``ECC Errors`` (fixtures/device/h200-r580/nvidia-smi-q.txt); older
# drivers do not, so each is judged only where printed.
REPAIRS = (
    ("Channel Repair Pending", "a memory channel repair waits for a reset"),
    ("TPC Repair Pending", "a TPC repair waits for a reset"),
    ("Unrepairable Memory", "memory the GPU cannot repair: RMA"),
)


def _repairs(gpu: Section, state: dict[str, str], bad: list[str]) -> None:
    ecc = gpu.sections.get("ECC Errors")
    if ecc is None:
        return
    for key, meaning in REPAIRS:
        if key in ecc.fields:
            _flag(state, bad, f"ECC Errors/{key}", ecc.fields[key], meaning)
    aggregate = ecc.sections.get("Aggregate")
    if aggregate is not None and "SRAM Threshold Exceeded" in aggregate.fields:
        _flag(state, bad, "ECC Errors/Aggregate/SRAM Threshold Exceeded",
              aggregate.fields["SRAM Threshold Exceeded"], "SRAM errors past NVIDIA's RMA threshold")  # fmt: skip


def _reset_state(gpu: Section, state: dict[str, str], bad: list[str]) -> None:
    status = gpu.sections.get("GPU Reset Status")
    action = gpu.fields.get("GPU Recovery Action")
    readable = False
    for key in ("Reset Required", "Drain and Reset Recommended"):
        value = None if status is None else status.fields.get(key)
        if status is None or value == DEPRECATED:
            continue
        _flag(state, bad, f"GPU Reset Status/{key}", value, "NVIDIA asks for a reset")
        readable = readable or value == "No"
    if action is not None:
        state["GPU Recovery Action"] = action
        if action != "None":
            bad.append(f"GPU Recovery Action: {action!r} (NVIDIA asks for more than None)")
        readable = True
    if status is not None and not readable:
        bad.append("GPU Reset Status: no readable reset state (deprecated, no recovery action)")


def judge_output(text: str) -> tuple[list[str], dict[str, Any]]:
    """What in the verification output says the GPU still needs a reset (or an RMA), and
    the fields read (evidence). Empty list: nothing pending."""
    nvml = BAD.search(text)
    report = parse(text)
    state: dict[str, Any] = {"driver": report.driver or "unknown"}
    bad = [f"NVML says {nvml.group(0)!r}"] if nvml else []
    if len(report.gpus) != 1:
        bad.append(f"expected one GPU's nvidia-smi -q block, found {len(report.gpus)}")
        return bad, state
    state["gpu"], gpu = report.gpus[0]
    _memory(gpu, state, bad)
    _reset_state(gpu, state, bad)
    return bad, state


def judge(runs: Sequence[StepRun], *, amd: bool = False) -> tuple[bool, dict[str, Any]]:
    """The reset job's verdict; ``amd``: the verification is ``amd-smi bad-pages --json``."""
    names = ("reset", "verify")
    lib = "amdsmi" if amd else "NVML"
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
            "why": f"the GPU does not answer {lib} after reset (exit {verify.exit_code})",
        }
    bad, state = (amd_smi.judge_output if amd else judge_output)(verify.stdout)
    ev["state"] = state
    if bad:
        return False, {**ev, "why": "the GPU still reports after reset: " + "; ".join(bad)}
    return True, {**ev, "why": f"reset and verified: the GPU answers {lib}, nothing pending"}
