"""Validation suites: judged from the tools' outputs, per GPU model, failing closed."""

from __future__ import annotations

from pathlib import Path

import pytest

from common.settings import SettingsError
from remediation.validation.suite import StepRun, judge, judge_suite, load_suites

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"

RAW = {
    "pre-release": [
        {
            "name": "diag",
            "command": ["dcgmi", "diag", "-r", "2", "-j"],
            "timeout_s": 1800,
            "parser": "dcgmi-diag",
        },
        {
            "name": "nccl",
            "command": ["all_reduce_perf", "-g", 8],
            "timeout_s": 600,
            "parser": "nccl-tests",
            "min": {"busbw_at_max_size_gbps": {"default": 400, "NVIDIA A100-SXM4-80GB": 200}},
        },
    ]
}


def suite():  # type: ignore[no-untyped-def]
    return load_suites(RAW)["pre-release"]


def run(name: str, code: int | None = 0) -> StepRun:
    return StepRun(code, (FIX / name).read_text())


def test_a_healthy_node_passes_the_suite_with_its_measurements_as_evidence() -> None:
    v = judge_suite(suite(), [run("dcgmi-diag-r3-pass.json"), run("all_reduce_perf-8gpu.txt")])
    assert v.passed
    ev = v.evidence()
    assert ev["steps"][1]["measurements"]["busbw_at_max_size_gbps"] > 400


def test_a_slow_node_fails_with_the_bandwidth_and_its_minimum_in_the_reason() -> None:
    v = judge_suite(suite(), [run("dcgmi-diag-r3-pass.json"), run("all_reduce_perf-slow.txt")])
    assert not v.passed
    (reason,) = v.steps[1].reasons
    assert "below the minimum 400" in reason


def test_thresholds_come_from_the_gpu_model() -> None:
    # the published 2-node H100 run reaches 339 GB/s: below an H100 node's 400, above an A100's 200
    step = suite().steps[1]
    assert not judge(step, run("all_reduce_perf-2node-h100.txt"), "NVIDIA H100 80GB HBM3").passed
    assert judge(step, run("all_reduce_perf-2node-h100.txt"), "NVIDIA A100-SXM4-80GB").passed


def test_a_failed_diagnostic_names_the_gpu() -> None:
    v = judge(suite().steps[0], run("dcgmi-diag-r2-fail.json"))
    assert not v.passed and v.failed_gpus == (5,)
    assert "Targeted Power failed on GPU 5" in v.reasons[0]


@pytest.mark.parametrize(
    ("stdout", "code", "want"),
    [
        ("", None, "timed out after 600 s"),
        ("garbage", 0, "output not understood"),
        ("garbage", 127, "exit code 127"),
    ],
)
def test_timeouts_crashes_and_garbage_fail_the_step(
    stdout: str, code: int | None, want: str
) -> None:
    v = judge(suite().steps[1], StepRun(code, stdout))
    assert not v.passed and want in v.reasons[0]


def test_a_step_with_no_result_fails_as_such_never_as_a_timeout() -> None:
    v = judge(suite().steps[1], StepRun.no_result())
    assert not v.passed and v.reasons == ("no result (the step did not run to its end)",)


def test_a_non_zero_exit_fails_even_with_good_numbers() -> None:
    v = judge(suite().steps[1], run("all_reduce_perf-8gpu.txt", code=1))
    assert not v.passed and v.reasons == ("exit code 1",)


def test_a_required_measurement_missing_from_the_output_fails() -> None:
    text = "\n".join(
        line
        for line in (FIX / "all_reduce_perf-8gpu.txt").read_text().splitlines()
        if line.startswith("# Avg")
    )
    v = judge(suite().steps[1], StepRun(0, text))
    assert not v.passed and "missing from the output" in v.reasons[0]


def test_an_empty_suite_never_passes() -> None:
    from remediation.validation.suite import Suite, SuiteVerdict

    assert not SuiteVerdict("x", ()).passed
    with pytest.raises(ValueError):
        judge_suite(Suite("x", ()), [StepRun(0, "")])


@pytest.mark.parametrize(
    ("raw", "msg"),
    [
        ({"s": []}, "non-empty list of steps"),
        (
            {"s": [{"name": "a", "command": "dcgmi diag", "timeout_s": 1, "parser": "nccl-tests"}]},
            "command",
        ),
        (
            {"s": [{"name": "a", "command": ["x"], "timeout_s": 0, "parser": "nccl-tests"}]},
            "timeout_s",
        ),
        ({"s": [{"name": "a", "command": ["x"], "timeout_s": 1, "parser": "gpu-burn"}]}, "parser"),
        (
            {
                "s": [
                    {
                        "name": "a",
                        "command": ["x"],
                        "timeout_s": 1,
                        "parser": "nccl-tests",
                        "min": {"busbw": "fast"},
                    }
                ]
            },
            "min.busbw",
        ),
        (
            {
                "s": [
                    {
                        "name": "a",
                        "command": ["x"],
                        "timeout_s": 1,
                        "parser": "nccl-tests",
                        "retries": 3,
                    }
                ]
            },
            "unknown keys retries",
        ),
        ("suite", "mapping"),
    ],
)
def test_bad_suites_stop_the_start_with_one_line(raw: object, msg: str) -> None:
    with pytest.raises(SettingsError, match=msg):
        load_suites(raw)
