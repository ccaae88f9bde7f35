"""The validation tools' outputs, as published, parse into checks and bandwidths."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation.validation.parsers import (
    ParseError,
    parse_dcgmi_diag,
    parse_ib_write_bw,
    parse_nccl_tests,
    parse_nvbandwidth,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_a_passing_dcgmi_diag_table_has_no_failed_check() -> None:
    r = parse_dcgmi_diag(read("dcgmi-diag-r3-pass.txt"))
    names = {c.name for c in r.checks}
    assert {"Denylist", "PCIe", "GPU Memory", "Targeted Power", "Memory Bandwidth"} <= names
    assert not r.failed
    assert {c.status for c in r.checks} == {"pass", "skip"}  # the EUD row is a skip
    assert r.measurements["dcgm_version_major"] == 3


def test_a_failing_dcgmi_diag_table_names_the_failed_gpu_and_keeps_the_warning() -> None:
    r = parse_dcgmi_diag(read("dcgmi-diag-r2-fail.txt"))
    failed = {c.name: c for c in r.failed}
    assert set(failed) == {"PCIe", "Memory Bandwidth"}
    assert failed["PCIe"].gpus == (3,)
    assert "link width of 8" in failed["PCIe"].detail
    assert "1210.5 GB/" in failed["Memory Bandwidth"].detail
    assert r.failed_gpus() == {3}
    passed = next(c for c in r.checks if c.name == "PCIe" and c.status == "pass")
    assert passed.gpus == (0, 1, 2, 4, 5, 6, 7)


def test_dcgmi_diag_json_passes_and_fails_per_gpu() -> None:
    ok = parse_dcgmi_diag(read("dcgmi-diag-r3-pass.json"))
    assert not ok.failed and len(ok.checks) >= 10
    bad = parse_dcgmi_diag(read("dcgmi-diag-r2-fail.json"))
    (f,) = bad.failed
    assert (f.name, f.gpus) == ("Targeted Power", (5,))
    assert "520.3 W" in f.detail


def test_the_published_nccl_tests_output_gives_its_bus_bandwidths() -> None:
    r = parse_nccl_tests(read("all_reduce_perf-2node-h100.txt"))
    assert r.measurements["avg_busbw_gbps"] == pytest.approx(70.742)
    assert r.measurements["busbw_at_max_size_gbps"] == pytest.approx(338.82)
    assert r.measurements["max_busbw_gbps"] == pytest.approx(338.82)
    assert not r.failed


def test_a_slow_node_has_a_lower_bus_bandwidth_than_a_healthy_one() -> None:
    good = parse_nccl_tests(read("all_reduce_perf-8gpu.txt")).measurements
    slow = parse_nccl_tests(read("all_reduce_perf-slow.txt")).measurements
    assert slow["busbw_at_max_size_gbps"] < 0.7 * good["busbw_at_max_size_gbps"]


def test_wrong_results_in_nccl_tests_fail_the_correctness_check() -> None:
    text = read("all_reduce_perf-2node-h100.txt").replace(
        "338.82      0    47743", "338.82      3    47743"
    )
    (f,) = parse_nccl_tests(text).failed
    assert f.name == "data correctness" and "#wrong=3" in f.detail


def test_nvbandwidth_sums_and_the_slowest_pair() -> None:
    m = parse_nvbandwidth(read("nvbandwidth-h100.txt")).measurements
    assert m["host_to_device_memcpy_ce.sum_gbps"] == pytest.approx(222.55)
    assert m["device_to_device_memcpy_read_ce.min_gbps"] == pytest.approx(201.12)
    assert m["device_to_device_memcpy_write_ce.min_gbps"] == pytest.approx(389.21)


def test_ib_write_bw_in_mb_and_in_gbits_both_become_gigabytes_per_second() -> None:
    mb = parse_ib_write_bw(read("ib_write_bw.txt")).measurements
    assert mb["bw_average_gbps"] == pytest.approx(48.74107)
    gb = parse_ib_write_bw(read("ib_write_bw-gbits.txt")).measurements
    assert gb["bw_peak_gbps"] == pytest.approx(98.40 / 8)


@pytest.mark.parametrize(
    "parser", [parse_dcgmi_diag, parse_nccl_tests, parse_nvbandwidth, parse_ib_write_bw]
)
@pytest.mark.parametrize("text", ["", "Segmentation fault (core dumped)\n", "{not json"])
def test_unreadable_output_is_a_parse_error_never_a_pass(parser, text) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ParseError):
        parser(text)


def test_an_unknown_dcgmi_status_is_an_error() -> None:
    text = read("dcgmi-diag-r3-pass.txt").replace("| Pass - All      ", "| Maybe - All     ", 1)
    with pytest.raises(ParseError, match="Maybe"):
        parse_dcgmi_diag(text)


def cut(text: str, keep: int) -> str:
    """The output as a killed tool or a cut log leaves it: its first ``keep`` lines."""
    return "\n".join(text.splitlines()[:keep]) + "\n"


def test_nccl_tests_output_cut_before_its_largest_size_fails_the_suite_not_passes() -> None:
    from remediation.validation.suite import Step, StepRun, judge

    step = Step("nccl", ("all_reduce_perf",), 60, "nccl-tests",
                {"busbw_at_max_size_gbps": {"default": 400}})  # fmt: skip
    full = read("all_reduce_perf-slow.txt")
    assert not judge(step, StepRun(0, full)).passed
    lines = full.splitlines()
    last_row = max(i for i, line in enumerate(lines) if line.strip()[:1].isdigit())
    verdict = judge(step, StepRun(0, cut(full, last_row)))  # exit code 0, largest row gone
    assert not verdict.passed and "cut off" in verdict.reasons[0]
    with pytest.raises(ParseError, match="cut off"):
        parse_nccl_tests(cut(read("all_reduce_perf-8gpu.txt"), 25))


def test_nccl_tests_table_ending_before_max_bytes_is_a_failure_even_with_its_summary() -> None:
    text = read("all_reduce_perf-8gpu.txt").splitlines()
    without_last = [line for line in text if not line.lstrip().startswith("8589934592")]
    with pytest.raises(ParseError, match="before maxBytes"):
        parse_nccl_tests("\n".join(without_last))


def test_nvbandwidth_cut_inside_a_case_fails() -> None:
    text = read("nvbandwidth-h100.txt")
    lines = text.splitlines()
    last_sum = max(i for i, line in enumerate(lines) if line.startswith("SUM "))
    with pytest.raises(ParseError, match="cut off"):
        parse_nvbandwidth(cut(text, last_sum))


def test_ib_write_bw_without_its_closing_rule_fails() -> None:
    text = read("ib_write_bw.txt")
    lines = text.splitlines()
    with pytest.raises(ParseError, match="cut off"):
        parse_ib_write_bw(cut(text, len(lines) - 1))
    assert parse_ib_write_bw(text).measurements["bw_peak_gbps"] > 0


@pytest.mark.parametrize("name", ["dcgmi-diag-r3-pass.txt", "dcgmi-diag-r3-pass.json"])
def test_dcgmi_diag_cut_before_its_end_fails(name: str) -> None:
    text = read(name)
    with pytest.raises(ParseError):
        parse_dcgmi_diag(cut(text, len(text.splitlines()) - 3))
