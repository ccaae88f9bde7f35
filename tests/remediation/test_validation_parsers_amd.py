"""AMD's validation tools (rccl-tests, RVS, TransferBench) parse into checks and bandwidths,
and an output cut short is never a pass. Layouts: fixtures/validation/ (origins in its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation.validation.parsers import PARSERS, ParseError, parse_rccl_tests
from remediation.validation.parsers_amd import parse_rvs, parse_transferbench
from remediation.validation.suite import Step, StepRun, judge

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"


def read(name: str) -> str:
    return (FIX / name).read_text()


def test_rccl_tests_on_eight_mi300x_reads_like_nccl_tests() -> None:
    r = parse_rccl_tests(read("rccl-all_reduce_perf-mi300x.txt"))
    assert r.tool == "rccl-tests" and not r.failed
    assert r.measurements["busbw_at_max_size_gbps"] == pytest.approx(339.94)
    assert r.measurements["avg_busbw_gbps"] == pytest.approx(275.819)


def test_an_rccl_tests_table_cut_before_max_bytes_is_not_a_pass() -> None:
    text = read("rccl-all_reduce_perf-mi300x.txt")
    cut = text[: text.index("   536870912 ")]
    with pytest.raises(ParseError, match=r"cut off|before maxBytes"):
        parse_rccl_tests(cut)


def test_a_passing_rvs_summary_gives_one_passing_check_per_action() -> None:
    r = parse_rvs(read("rvs-mi300x-pass.txt"))
    assert [c.name for c in r.checks][:2] == ["gpup-properties (gpup)", "peqt-pcie-props (peqt)"]
    assert len(r.checks) == 8 and not r.failed
    assert r.measurements["gst_min_gflops"] > 1_100_000


def test_a_failed_rvs_action_names_the_gpu_by_index_not_by_rvs_gpu_id() -> None:
    r = parse_rvs(read("rvs-mi300x-gst-fail.txt"))
    [failed] = r.failed
    assert failed.name == "gst-fp16-1000tf (gst)"
    assert failed.gpus == (5,)  # RVS GPU ID 63812 is index 5 in the summary's GPU table
    assert r.measurements["gst_min_gflops"] == pytest.approx(702311.864878)


@pytest.mark.parametrize(
    ("cut_at", "message"),
    [("|                 ROCm Validation Suite", "no RVS summary"),
     ("| babel-hbm", "cut off after action 'gst-fp16-1000tf'")],
)  # fmt: skip
def test_an_rvs_output_without_its_whole_summary_is_not_a_pass(cut_at: str, message: str) -> None:
    text = read("rvs-mi300x-gst-fail.txt")
    with pytest.raises(ParseError, match=message):
        parse_rvs(text[: text.index(cut_at)])


def test_an_unknown_rvs_result_is_refused_not_guessed() -> None:
    text = read("rvs-mi300x-pass.txt").replace("| PASS            |", "| MAYBE           |", 1)
    with pytest.raises(ParseError, match="unknown result 'MAYBE'"):
        parse_rvs(text)


def test_transferbench_p2p_gives_the_slowest_gpu_pair_both_ways() -> None:
    r = parse_transferbench(read("transferbench-p2p-mi300x.txt"))
    assert 47 < r.measurements["unidir_gpu_min_gbps"] < 49  # the diagonal (local) is left out
    assert r.measurements["bidir_gpu_min_gbps"] > 90
    assert not r.failed


def test_one_slow_xgmi_link_shows_in_the_minimum_long_before_the_average() -> None:
    r = parse_transferbench(read("transferbench-p2p-mi300x-slow-link.txt"))
    assert r.measurements["unidir_gpu_min_gbps"] < 17
    assert r.measurements["unidir_gpu_avg_gbps"] > 45
    [slowest] = r.checks
    assert set(slowest.gpus) == {2, 6} and "GB/s" in slowest.detail


def test_a_transferbench_table_without_its_averages_line_was_cut_short() -> None:
    text = read("transferbench-p2p-mi300x.txt")
    with pytest.raises(ParseError, match="cut off"):
        parse_transferbench(text[: text.index("   GPU 05  ->")])
    with pytest.raises(ParseError, match="no GPU 07 <-> row"):
        parse_transferbench(text[: text.index("   GPU 07 <->")])


def test_the_suite_judges_amd_tools_against_per_model_minimums() -> None:
    step = Step("p2p", ("TransferBench", "p2p"), 60.0, "transferbench",
                {"unidir_gpu_min_gbps": {"default": 100.0, "AMD Instinct MI300X": 40.0}})  # fmt: skip
    slow = StepRun(0, read("transferbench-p2p-mi300x-slow-link.txt"))
    bad = judge(step, slow, "AMD Instinct MI300X")
    assert not bad.passed and "unidir_gpu_min_gbps" in bad.reasons[0]
    assert judge(
        step, StepRun(0, read("transferbench-p2p-mi300x.txt")), "AMD Instinct MI300X"
    ).passed
    assert not judge(step, StepRun(0, read("transferbench-p2p-mi300x.txt"))).passed  # default
    assert {"rccl-tests", "rvs", "transferbench"} <= set(PARSERS)
