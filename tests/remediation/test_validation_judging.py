"""How a step's run is judged, reason by reason (the on-call engineer reads these in the
journal), what goes into the decision's evidence, and each suite setting that stops the
start with its own line."""

from __future__ import annotations

from typing import Any

import pytest

from common.settings import SettingsError
from remediation.validation.suite import (
    Step,
    StepRun,
    StepVerdict,
    Suite,
    SuiteVerdict,
    judge,
    judge_suite,
    load_suites,
)

AVG = "# Avg bus bandwidth    : {v}\n"
NCCL = Step(
    "nccl",
    ("all_reduce_perf",),
    600,
    "nccl-tests",
    {"avg_busbw_gbps": {"default": 100.0, "NVIDIA A100-SXM4-80GB": 50.0}, "unnamed": {"H200": 1.0}},
)
DIAG_FAIL = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Fail - GPUs: 1, 3                              |
| Warning                   | bad rows                                       |
| Diagnostic Check          | Warn - GPU: 2                                  |
| PCIe                      | Fail - All                                     |
+---------------------------+------------------------------------------------+
"""
DIAG = Step("diag", ("dcgmi", "diag"), 1800.5, "dcgmi-diag")


def test_a_step_without_a_result_or_one_that_timed_out_fails_with_that_reason() -> None:
    assert judge(NCCL, StepRun.no_result()) == StepVerdict(
        "nccl", False, ("no result (the step did not run to its end)",)
    )
    assert StepRun.no_result() == StepRun(None, "", missing=True)
    assert judge(DIAG, StepRun.exited(124, "")) == StepVerdict(
        "diag", False, ("timed out after 1800.5 s",)
    )
    assert StepRun.exited(137, "x") == StepRun(None, "x")  # killed after the grace period
    assert StepRun.exited(138, "x") == StepRun(138, "x")


def test_output_nobody_can_read_fails_and_names_the_exit_code_when_there_is_one() -> None:
    assert judge(NCCL, StepRun(0, "segfault")) == StepVerdict(
        "nccl",
        False,
        ("output not understood: no nccl-tests result rows and no '# Avg bus bandwidth' line",),
    )
    assert judge(NCCL, StepRun(139, "segfault")).reasons == (
        "exit code 139; output not understood: no nccl-tests result rows and no "
        "'# Avg bus bandwidth' line",
    )


def test_failed_checks_name_their_gpus_and_detail_and_a_warning_is_not_a_failure() -> None:
    v = judge(DIAG, StepRun(1, DIAG_FAIL))
    assert v == StepVerdict(
        "diag",
        False,
        ("exit code 1", "GPU Memory failed on GPU 1, 3: bad rows", "PCIe failed"),
        {},
        (1, 3),
    )


def test_a_measurement_at_its_minimum_passes_and_the_gpu_models_own_minimum_applies() -> None:
    at = judge(NCCL, StepRun(0, AVG.format(v=100)))
    assert at.passed and at.reasons == () and at.measurements == {"avg_busbw_gbps": 100.0}
    below = judge(NCCL, StepRun(0, AVG.format(v=99.5)))
    assert below.reasons == ("avg_busbw_gbps 99.5 below the minimum 100",)
    a100 = judge(NCCL, StepRun(0, AVG.format(v=60)), "NVIDIA A100-SXM4-80GB")
    assert a100.passed
    # a threshold only for another model is no threshold; one for this model is required
    assert judge(NCCL, StepRun(0, AVG.format(v=100)), "H200").reasons == (
        "unnamed missing from the output (minimum 1)",
    )


def test_the_suite_is_judged_per_step_with_the_gpu_model_and_needs_one_run_per_step() -> None:
    suite = Suite("pre-release", (NCCL, DIAG))
    runs = [StepRun(0, AVG.format(v=60)), StepRun.exited(124, "")]
    v = judge_suite(suite, runs, "NVIDIA A100-SXM4-80GB")
    assert v.suite == "pre-release" and not v.passed
    assert [s.passed for s in v.steps] == [True, False]
    with pytest.raises(ValueError, match=r"^suite pre-release: 1 runs for 2 steps$"):
        judge_suite(suite, runs[:1])
    assert not SuiteVerdict("empty", ()).passed  # nothing judged is no pass


def test_the_evidence_is_every_steps_verdict_as_json() -> None:
    v = judge_suite(Suite("s", (DIAG,)), [StepRun(0, DIAG_FAIL)])
    assert v.evidence() == {
        "suite": "s",
        "passed": False,
        "steps": [
            {
                "step": "diag",
                "passed": False,
                "reasons": ["GPU Memory failed on GPU 1, 3: bad rows", "PCIe failed"],
                "measurements": {},
                "failed_gpus": [1, 3],
            }
        ],
    }


GOOD = {"name": "n", "command": ["x", 1, 2.5], "timeout_s": 10, "parser": "nccl-tests"}


def test_a_good_suite_loads_with_its_numbers_as_text_and_its_minimums_per_model() -> None:
    suites = load_suites({"s": [{**GOOD, "min": {"a": 5, "b": {"default": 1, "H100": 2.5}}}]})
    assert suites == {
        "s": Suite(
            "s",
            (
                Step(
                    "n",
                    ("x", "1", "2.5"),
                    10.0,
                    "nccl-tests",
                    {"a": {"default": 5.0}, "b": {"default": 1.0, "H100": 2.5}},
                ),
            ),
        )
    }
    assert load_suites(None) == {}


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (["s"], "validation.suites: expected a mapping of suite name -> steps"),
        ({"s": []}, "validation.suites.s: expected a non-empty list of steps"),
        ({"s": "step"}, "validation.suites.s: expected a non-empty list of steps"),
        ({"s": {"a": 1}}, "validation.suites.s: expected a non-empty list of steps"),
        ({"s": ["x"]}, "validation.suites.s[0]: expected a mapping"),
        ({"s": [GOOD, {**GOOD, "z": 1, "a": 2}]}, "validation.suites.s[1]: unknown keys a, z"),
        ({"s": [{**GOOD, "name": ""}]}, "validation.suites.s[0].name: required"),
        ({"s": [{**GOOD, "name": 3}]}, "validation.suites.s[0].name: required"),
        ({"s": [{**GOOD, "command": "x y"}]}, "validation.suites.s[0].command: expected a non-empty list of arguments"),
        ({"s": [{**GOOD, "command": []}]}, "validation.suites.s[0].command: expected"),
        ({"s": [{**GOOD, "command": ["x", None]}]}, "validation.suites.s[0].command: expected"),
        ({"s": [{**GOOD, "timeout_s": True}]}, "validation.suites.s[0].timeout_s: expected a positive number of seconds"),
        ({"s": [{**GOOD, "timeout_s": 0}]}, "validation.suites.s[0].timeout_s: expected"),
        ({"s": [{**GOOD, "timeout_s": "10"}]}, "validation.suites.s[0].timeout_s: expected"),
        ({"s": [{**GOOD, "parser": "iperf"}]}, "validation.suites.s[0].parser: 'iperf' is not one of dcgmi-diag, nccl-tests, nvbandwidth, ib_write_bw"),
        ({"s": [{**GOOD, "min": {"a": True}}]}, "validation.suites.s[0].min.a: expected a number or model -> number"),
        ({"s": [{**GOOD, "min": {"a": {"H100": "1"}}}]}, "validation.suites.s[0].min.a: expected"),
        ({"s": [{**GOOD, "min": {"a": {"H100": False}}}]}, "validation.suites.s[0].min.a: expected"),
        ({"s": [{**GOOD, "min": {"a": [1]}}]}, "validation.suites.s[0].min.a: expected"),
    ],
)  # fmt: skip
def test_each_bad_suite_setting_stops_the_start_with_its_own_line(raw: Any, why: str) -> None:
    with pytest.raises(SettingsError) as e:
        load_suites(raw)
    assert str(e.value).startswith(why)
