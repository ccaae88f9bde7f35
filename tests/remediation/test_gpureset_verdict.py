"""The reset verdict over recorded ``nvidia-smi -q`` outputs of R470 to R570
(fixtures/gpureset/, origins in its README): a healthy GPU of every generation passes; what
NVIDIA says needs a reset or an RMA fails it in each generation's wording (a pending page
retirement, a pending row remap, a remapping failure, reset required / drain and reset
recommended, a recovery action other than None); anything unknown or unreadable fails
closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation.gpureset.smi import parse
from remediation.gpureset.verdict import judge, judge_output
from remediation.validation.suite import StepRun

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "gpureset"
HEALTHY = [
    "smi-q-r470.256-gtx680.txt",
    "smi-q-r535.154-rtx4090-unknown-error-field.txt",
    "smi-q-r535.161-h100.txt",
    "smi-q-r550.127-v100.txt",
    "smi-q-r560.35-titanv.txt",
    "smi-q-r565.57-h100.txt",
    "smi-q-r570.124-rtx5090.txt",
]
OK = StepRun(0, "GPU 00000000:3B:00.0 was successfully reset.")


def text(name: str) -> str:
    return (FIX / name).read_text()


def edited(name: str, old: str, new: str) -> str:
    t = text(name)
    assert t.count(old) == 1, (name, old)
    return t.replace(old, new)


def field(key: str, value: str, indent: int = 8) -> str:
    """A line as nvidia-smi prints it: the colons of every level in column 42."""
    return " " * indent + key.ljust(42 - indent) + ": " + value


def verdict(out: str) -> tuple[bool, str]:
    passed, ev = judge([OK, StepRun(0, out)])
    return passed, str(ev["why"])


def test_every_recorded_driver_generation_is_a_fixture_with_its_origin() -> None:
    readme = (FIX / "README.md").read_text()
    names = sorted(p.name for p in FIX.glob("*.txt"))
    assert all(n in readme for n in names)
    drivers = {parse(text(n)).driver.split(".")[0] for n in names}
    assert drivers == {"470", "535", "550", "555", "560", "565", "570"}


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_gpu_of_every_driver_generation_passes_the_reset(name: str) -> None:
    passed, why = verdict(text(name))
    assert passed, why
    assert why == "reset and verified: the GPU answers NVML, nothing pending"


def test_the_evidence_names_the_driver_the_gpu_and_every_field_read() -> None:
    _, ev = judge([OK, StepRun(0, text("smi-q-r565.57-h100.txt"))])
    assert ev["state"] == {
        "driver": "565.57.01",
        "gpu": "00000000:18:00.0",
        "Retired Pages/Pending Page Blacklist": "N/A",
        "Remapped Rows/Pending": "No",
        "Remapped Rows/Remapping Failure Occurred": "No",
        "ECC Errors/Aggregate/SRAM Threshold Exceeded": "No",
        "GPU Reset Status/Reset Required": "No",
        "GPU Reset Status/Drain and Reset Recommended": "No",
        "GPU Recovery Action": "None",
    }


def test_a_real_a100_with_a_row_remap_pending_is_not_verified() -> None:
    passed, why = verdict(text("smi-q-r555.42-a100-remap-pending.txt"))
    assert not passed
    assert why == (
        "the GPU still reports after reset: Remapped Rows/Pending: Yes (a row remap waits "
        "for a reset)"
    )


@pytest.mark.parametrize("key", ["Pending Page Blacklist", "Pending Page Retirement"])
@pytest.mark.parametrize(("name", "was"), [("smi-q-r550.127-v100.txt", "No"),
                                           ("smi-q-r535.161-h100.txt", "N/A")])  # fmt: skip
def test_a_page_retirement_still_pending_fails_the_reset_in_either_wording(
    key: str, name: str, was: str
) -> None:
    out = edited(name, field("Pending Page Blacklist", was), field(key, "Yes"))
    passed, why = verdict(out)
    assert not passed and f"Retired Pages/{key}: Yes (a page retirement waits" in why


def test_a_row_remapping_failure_fails_the_reset_as_an_rma() -> None:
    old = field("Remapping Failure Occurred", "No")
    passed, why = verdict(edited("smi-q-r535.161-h100.txt", old, old.replace("No", "Yes")))
    assert not passed and "Remapping Failure Occurred: Yes (row remapping failed: RMA)" in why


@pytest.mark.parametrize("key", ["Reset Required", "Drain and Reset Recommended"])
def test_a_gpu_that_still_asks_for_a_reset_fails_it(key: str) -> None:
    passed, why = verdict(edited("smi-q-r535.161-h100.txt", field(key, "No"), field(key, "Yes")))
    assert not passed and f"GPU Reset Status/{key}: Yes (NVIDIA asks for a reset)" in why


@pytest.mark.parametrize("action", ["Reset", "Reboot", "Drain P2P", "Drain and Reset", "N/A"])
@pytest.mark.parametrize("name", ["smi-q-r565.57-h100.txt", "smi-q-r570.124-rtx5090.txt"])
def test_a_recovery_action_other_than_none_fails_the_reset(name: str, action: str) -> None:
    old = field("GPU Recovery Action", "None", 4)
    passed, why = verdict(edited(name, old, field("GPU Recovery Action", action, 4)))
    assert not passed and f"GPU Recovery Action: {action!r}" in why


@pytest.mark.parametrize("value", ["Unknown Error", "", "Maybe", "yes"])
@pytest.mark.parametrize("key", ["Pending", "Remapping Failure Occurred", "Reset Required"])
def test_an_unknown_value_of_a_judged_field_fails_closed(key: str, value: str) -> None:
    out = edited("smi-q-r555.42-a100-remap-pending.txt", field(key, "Yes" if key == "Pending"
                 else "No"), field(key, value))  # fmt: skip
    passed, why = verdict(out)
    assert not passed and "unknown: not judged healthy" in why, why


@pytest.mark.parametrize(("old", "new", "says"), [
    ("    Retired Pages\n", "    Retired Pagez\n", "Retired Pages: 'missing' (unknown)"),
    ("    Remapped Rows\n", "    Remapped Rowz\n", "Remapped Rows: 'missing' (unknown)"),
    (field("Pending", "No") + "\n", "", "Remapped Rows/Pending: 'missing'"),
    (field("Pending Page Blacklist", "N/A"), "", "Pending Page Blacklist: 'missing'"),
    (field("Reset Required", "No") + "\n", "", "Reset Required: 'missing'"),
])  # fmt: skip
def test_a_missing_section_or_field_fails_closed(old: str, new: str, says: str) -> None:
    passed, why = verdict(edited("smi-q-r535.161-h100.txt", old, new))
    assert not passed and says in why, why


def test_reset_status_deprecated_without_a_recovery_action_is_unreadable_and_fails() -> None:
    out = edited("smi-q-r570.124-rtx5090.txt", field("GPU Recovery Action", "None", 4) + "\n", "")
    passed, why = verdict(out)
    assert not passed and "no readable reset state" in why


@pytest.mark.parametrize("out", [
    "",
    "garbage \x00\x01 not nvidia-smi",
    "No devices were found",
    "Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error",
    "Unable to determine the device handle for gpu 0000:3B:00.0: GPU requires reset",
    "GPU 00000000:3B:00.0\n    Product Name : NVIDIA H100 80GB HBM3\n",  # the old fakes' output
])  # fmt: skip
def test_garbage_errors_or_a_bare_product_line_fail_closed(out: str) -> None:
    assert verdict(out)[0] is False


def test_two_gpu_blocks_fail_closed_the_reset_gpu_is_not_known() -> None:
    one = text("smi-q-r565.57-h100.txt")
    gpu = one[one.index("GPU 0000") :]
    passed, why = verdict(one + gpu.replace("00000000:18:00.0", "00000000:2A:00.0"))
    assert not passed and "expected one GPU's nvidia-smi -q block, found 2" in why


def test_a_gpu_lost_message_fails_even_beside_a_clean_block() -> None:
    out = text("smi-q-r565.57-h100.txt") + "\nGPU 00000000:18:00.0: GPU has fallen off the bus.\n"
    bad, _ = judge_output(out)
    assert bad and "fallen off the bus" in bad[0]


def test_unknown_error_in_a_field_the_verdict_does_not_judge_passes() -> None:
    # real: R535 prints "Addressing Mode : Unknown Error" for a healthy RTX 4090
    assert "Unknown Error" in text("smi-q-r535.154-rtx4090-unknown-error-field.txt")
    assert verdict(text("smi-q-r535.154-rtx4090-unknown-error-field.txt"))[0] is True


def test_pending_of_other_sections_is_never_read_as_a_remap() -> None:
    """MIG Mode, Driver Model, ECC Mode all have a ``Pending`` field: each is read through
    its own section, and only the Remapped Rows one is judged."""
    [(bus, gpu)] = parse(text("smi-q-r555.42-a100-remap-pending.txt")).gpus
    assert bus == "00000000:9E:00.0"
    assert gpu.sections["MIG Mode"].fields["Pending"] == "Disabled"
    assert gpu.sections["ECC Mode"].fields["Pending"] == "Enabled"
    assert gpu.sections["Remapped Rows"].fields["Pending"] == "Yes"
    hist = gpu.sections["Remapped Rows"].sections["Bank Remap Availability Histogram"]
    assert hist.fields["Max"] == "639 bank(s)"
    assert gpu.fields["Product Name"] == "NVIDIA A100-SXM4-80GB"


def test_a_failed_or_timed_out_reset_or_a_gpu_not_answering_never_passes() -> None:
    good = StepRun(0, text("smi-q-r535.161-h100.txt"))
    for runs, why in [
        ([StepRun(124, "")], "the reset job left no result"),
        ([StepRun(124, ""), good], "the reset command timed out"),
        ([StepRun(None, ""), good], "the reset command timed out"),
        ([StepRun(3, "in use"), good], "the reset command failed (exit 3)"),
        ([OK, StepRun(9, "")], "the GPU does not answer NVML after reset (exit 9)"),
    ]:
        passed, ev = judge(runs)
        assert (passed, ev["why"]) == (False, why)
    _, ev = judge([OK, good])
    assert set(ev) == {"reset", "verify", "state", "why"}
    assert ev["verify"] == {"exit_code": 0, "output": good.stdout.strip()[-300:]}
    assert len(ev["verify"]["output"]) == 300 and ev["verify"]["output"].endswith("None")


def test_retired_pages_as_a_bare_na_field_passes_anything_else_there_fails() -> None:
    block = "    Retired Pages\n" + "\n".join(
        field(k, "N/A") for k in ("Single Bit ECC", "Double Bit ECC", "Pending Page Blacklist")
    )
    assert block in text("smi-q-r535.161-h100.txt")
    bare = edited("smi-q-r535.161-h100.txt", block, field("Retired Pages", "N/A", 4))
    assert verdict(bare)[0] is True
    unknown = bare.replace(field("Retired Pages", "N/A", 4), field("Retired Pages", "n/a", 4))
    passed, why = verdict(unknown)
    assert not passed and "Retired Pages: 'n/a' (unknown)" in why


def test_drain_and_reset_recommended_is_judged_even_when_reset_required_is_deprecated() -> None:
    key = "Drain and Reset Recommended"
    old = field(key, "Requested functionality has been deprecated")
    passed, why = verdict(edited("smi-q-r570.124-rtx5090.txt", old, field(key, "Yes")))
    assert not passed and f"GPU Reset Status/{key}: Yes" in why


def test_every_finding_is_named_in_the_why() -> None:
    out = edited("smi-q-r570.124-rtx5090.txt", field("GPU Recovery Action", "None", 4) + "\n", "")
    out = out.replace(field("Pending Page Blacklist", "N/A"), field("Pending Page Blacklist", ""))
    assert verdict(out)[1] == (
        "the GPU still reports after reset: Retired Pages/Pending Page Blacklist: '' "
        "(unknown: not judged healthy); GPU Reset Status: no readable reset state "
        "(deprecated, no recovery action)"
    )


def test_blank_lines_and_sibling_sections_keep_their_place_in_the_tree() -> None:
    # R570 prints blank lines inside the PCI section (a public V100 output, see the README)
    rollovers = field("Replay Number Rollovers", "0")
    out = edited("smi-q-r535.161-h100.txt", rollovers, rollovers + "\n\n")
    [(_, gpu)] = parse(out).gpus
    assert gpu.sections["PCI"].fields["Tx Throughput"] == "3875 KB/s"
    assert gpu.sections["Remapped Rows"].fields["Pending"] == "No"
    ecc = gpu.sections["ECC Errors"]
    assert set(ecc.sections) >= {"Volatile", "Aggregate"}
    assert ecc.sections["Aggregate"].fields["SRAM Threshold Exceeded"] == "No"
    assert verdict(out)[0] is True


def test_an_output_without_a_readable_driver_version_says_unknown() -> None:
    body = text("smi-q-r565.57-h100.txt")
    headless = body[body.index("GPU 0000") :]
    assert parse(headless).driver == ""
    assert judge_output(headless) == ([], {**judge_output(body)[1], "driver": "unknown"})
    empty = body.replace(
        "Driver Version                            : 565.57.01", "Driver Version :"
    )
    assert parse(empty).driver == "" and judge_output(empty)[1]["driver"] == "unknown"


R580 = FIX.parent / "device" / "h200-r580" / "nvidia-smi-q.txt"


def test_a_healthy_h200_recorded_on_a_real_r580_driver_passes_the_reset() -> None:
    passed, why = verdict(R580.read_text())
    assert passed, why
    bad, state = judge_output(R580.read_text())
    assert bad == []
    assert state["driver"] == "580.159.04" and state["GPU Recovery Action"] == "None"
    assert state["ECC Errors/Channel Repair Pending"] == "No"


@pytest.mark.parametrize(
    ("line", "new", "meaning"),
    [
        ("        Channel Repair Pending                         : No", "Yes",
         "(a memory channel repair waits for a reset)"),
        ("        TPC Repair Pending                             : No", "Yes",
         "(a TPC repair waits for a reset)"),
        ("        Unrepairable Memory                            : No", "Yes",
         "(memory the GPU cannot repair: RMA)"),
        ("            SRAM Threshold Exceeded                    : No", "Yes",
         "(SRAM errors past NVIDIA's RMA threshold)"),
        ("        Channel Repair Pending                         : No", "Maybe",
         "(unknown: not judged healthy)"),
        ("    GPU Recovery Action                                : None", "Reset",
         "(NVIDIA asks for more than None)"),
    ],
)  # fmt: skip
def test_an_r580_repair_pending_unrepairable_memory_or_sram_threshold_fails_the_reset(
    line: str, new: str, meaning: str
) -> None:
    t = R580.read_text()
    assert t.count(line) == 1
    passed, why = verdict(t.replace(line, line.rsplit(":", 1)[0] + ": " + new))
    assert not passed
    key = line.split(":")[0].strip()
    assert f"{key}: " in why and new in why and why.endswith(meaning)
