"""NVIDIA Health Validation's node verdict reads as a validation suite step: PASS and INFO pass,
WARNING passes with the warning kept, CRITICAL and UNKNOWN fail with each failing check named,
and anything that is not one readable verdict is never a pass. Fixtures (constructed from the
documented types): fixtures/validation/health-validation-*.json, origins in its README."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from remediation.model import ACTIONS
from remediation.validation.parsers import PARSERS, ParseError
from remediation.validation.parsers_hv import GPUWARDEN_ACTION, OVERALL, parse_health_validation
from remediation.validation.suite import Step, StepRun, Suite, judge_suite, load_suites

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"


def read(name: str) -> str:
    return (FIX / f"health-validation-{name}.json").read_text()


def verdict(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(read(name))
    return doc


def by_name(result: Any) -> dict[str, Any]:
    return {c.name: c for c in result.checks}


def test_the_parser_is_registered_under_health_validation() -> None:
    assert PARSERS["health-validation"] is parse_health_validation


def test_a_pass_verdict_passes_with_its_measurements_per_gpu() -> None:
    r = parse_health_validation(read("pass"))
    assert r.tool == "health-validation" and not r.failed
    assert [(c.name, c.status) for c in r.checks] == [(OVERALL, "pass")]  # INFO is a pass
    assert r.measurements["nvlink_active.gpu1.inactive_count"] == 0
    assert r.measurements["gpu_average_power_draw.gpu0.average_power_draw_w"] == 412.5
    assert r.measurements["critical_checks"] == 0


def test_a_warning_verdict_passes_and_keeps_the_warning_like_dcgmi_diag() -> None:
    r = parse_health_validation(read("warning"))
    assert not r.failed
    checks = by_name(r)
    assert checks[OVERALL].status == "warn"
    warned = checks["nvlink_bandwidth_count_speed"]
    assert warned.status == "warn" and warned.gpus == ()  # a UUID entity names no index
    assert "GPU-8b1e2c3d" in warned.detail and "expected 53125" in warned.detail
    uuid = "GPU-8b1e2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e"
    assert r.measurements[f"nvlink_bandwidth_count_speed.{uuid}.speed_mbytes_per_sec"] == 50000
    assert r.measurements["warning_checks"] == 1


def test_a_critical_verdict_fails_each_check_on_its_gpu_with_the_recommended_action() -> None:
    r = parse_health_validation(read("critical-xid-nvlink"))
    checks = by_name(r)
    assert {c.name for c in r.failed} == {OVERALL, "gpu_xid_46", "nvlink_active"}
    assert r.failed_gpus() == {3, 5}  # nvlink_active passed on GPU 4: not a failed GPU
    xid = checks["gpu_xid_46"]
    assert xid.gpus == (3,) and "GPU stopped processing" in xid.detail
    assert "recommended: drain, then reset_gpu -> service_required" in xid.detail
    assert "(gpuwarden: drain, then reset_gpu -> inspect)" in xid.detail
    nvl = checks["nvlink_active"]
    assert nvl.gpus == (5,)
    assert "gpuwarden: drain, then reset_gpu -> reboot -> inspect" in nvl.detail
    assert r.measurements["gpu_xid_46.gpu3.xid_count"] == 2
    assert r.measurements["nvlink_active.gpu5.inactive_count"] == 2
    assert r.measurements["critical_checks"] == 2


def test_an_unknown_verdict_fails_closed_and_says_the_node_was_not_assessed() -> None:
    r = parse_health_validation(read("unknown"))
    checks = by_name(r)
    assert checks[OVERALL].status == "fail"
    assert "could not be assessed" in checks[OVERALL].detail
    assert checks["nvlink_active"].status == "fail" and checks["nvlink_active"].gpus == (2,)
    assert "failed closed" in checks["nvlink_active"].detail
    assert r.measurements["unknown_checks"] == 1


def test_every_mapped_remediation_step_is_a_gpuwarden_action() -> None:
    assert set(GPUWARDEN_ACTION.values()) <= set(ACTIONS)


def test_a_step_with_no_gpuwarden_equivalent_is_named_as_such() -> None:
    doc = verdict("critical-xid-nvlink")
    doc["checks"][0]["recommended_action"] = {"steps": ["reseat_cable"]}
    detail = by_name(parse_health_validation(json.dumps(doc)))["gpu_xid_46"].detail
    assert "recommended: reseat_cable (gpuwarden: reseat_cable (no gpuwarden action))" in detail


def test_a_verdict_without_per_check_verdicts_reads_its_affected_components() -> None:
    doc = verdict("critical-xid-nvlink")
    del doc["checks"]
    r = parse_health_validation(json.dumps(doc))
    assert {c.name for c in r.failed} == {OVERALL, "XID", "NVLINK"}
    assert by_name(r)["XID"].gpus == (3,) and "gpu_xid_46" in by_name(r)["XID"].detail


def test_log_lines_before_the_verdict_are_skipped() -> None:
    r = parse_health_validation("collecting signals...\n" + read("pass"))
    assert not r.failed


def _mutated(name: str, **changes: Any) -> str:
    doc = verdict(name)
    for key, value in changes.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return json.dumps(doc)


def _bad_check(**entry: Any) -> str:
    return json.dumps({"overall_severity": "CRITICAL", "checks": [entry]})


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"no verdict: empty output .*exits 2"),
        ("   \n", r"no verdict: empty output"),
        ("health-validation: failed to load catalog\n", r"no verdict: no JSON object"),
        ('{"overall_severity": "PASS", "checks": [', r"not valid JSON \(cut off"),
        ('["PASS"]', r"no verdict: no JSON object"),
        (read("pass") + read("pass"), r"text after the NodeVerdict"),
        (_mutated("pass", schema_version="2.0"), r"unsupported NodeVerdict schema_version '2.0'"),
        (_mutated("pass", schema_version=True), r"unsupported NodeVerdict schema_version"),
        (_mutated("pass", overall_severity=None), r"no overall_severity"),
        (_mutated("pass", overall_severity="OK"), r"'OK' is not one of PASS, INFO"),
    ],
    ids=[
        "empty-exit-2", "blank", "error-text", "cut-off", "not-an-object", "two-verdicts",
        "schema-v2", "schema-bool", "no-overall", "unknown-overall",
    ],
)  # fmt: skip
def test_malformed_output_is_a_clear_error_never_a_pass(text: str, message: str) -> None:
    with pytest.raises(ParseError, match=message):
        parse_health_validation(text)


@pytest.mark.parametrize(
    "changes",
    [
        {"checks": {"a": 1}},
        {"checks": [{"severity": "PASS"}]},
        {"checks": [{"id": "gpu_xid_48", "level": "PASS"}]},
        {"checks": [{"check_id": "gpu_xid_48", "severity": "FINE"}]},
        {"checks": [7]},
        {"checks": None, "affected_components": "x"},
        {"checks": None, "affected_components": [{"category": "GPU"}]},
    ],
    ids=["checks-not-list", "no-check-id", "other-keys", "other-severity", "not-an-object",
         "components-not-list", "component-no-severity"],
)  # fmt: skip
def test_per_check_details_in_another_shape_are_shown_and_the_overall_decides(
    changes: dict[str, Any],
) -> None:
    passed = parse_health_validation(_mutated("pass", **changes))
    unread = [c for c in passed.checks if c.name.startswith("unread ")]
    assert not passed.failed and unread and all(c.status == "warn" for c in unread)
    assert "not in the assumed shape" in unread[0].detail
    failed = parse_health_validation(_mutated("pass", overall_severity="CRITICAL", **changes))
    assert [c.name for c in failed.failed] == [OVERALL]


def test_an_action_or_measurements_in_another_shape_are_quoted_not_fatal() -> None:
    r = parse_health_validation(_bad_check(check_id="x", severity="CRITICAL",
                                           recommended_action=7, measurements=[1]))  # fmt: skip
    assert "unread (7)" in by_name(r)["x"].detail and by_name(r)["x"].status == "fail"
    assert r.measurements["critical_checks"] == 1


@pytest.mark.parametrize("overall", ["PASS", "INFO", "WARNING"])
def test_a_verdict_whose_checks_fail_under_a_passing_overall_is_refused(overall: str) -> None:
    text = _mutated("critical-xid-nvlink", overall_severity=overall)
    with pytest.raises(ParseError, match=rf"contradicts itself: overall_severity {overall}"):
        parse_health_validation(text)


def test_schema_version_one_in_any_spelling_is_read() -> None:
    for version in ("1", "1.2.0", "v1", 1):
        assert not parse_health_validation(_mutated("pass", schema_version=version)).failed


# -- as a suite step, judged like the other tools --------------------------------------------

SUITES = load_suites(
    {
        "pre-release": [
            {
                "name": "hv",
                "command": ["health-validation"],
                "timeout_s": 120,
                "parser": "health-validation",
            }
        ]
    }
)


def _judge(run: StepRun) -> Any:
    return judge_suite(SUITES["pre-release"], [run])


def test_a_suite_step_passes_on_a_pass_or_warning_verdict_with_exit_0() -> None:
    assert _judge(StepRun(0, read("pass"))).passed
    warned = _judge(StepRun(0, read("warning")))
    assert warned.passed and warned.steps[0].reasons == ()


def test_a_suite_step_fails_on_a_critical_verdict_and_its_evidence_names_checks_and_actions() -> (
    None
):
    v = _judge(StepRun(1, read("critical-xid-nvlink")))
    assert not v.passed
    [step] = v.evidence()["steps"]
    assert step["failed_gpus"] == [3, 5]
    assert step["reasons"][0] == "exit code 1"
    assert any(
        r.startswith("gpu_xid_46 failed on GPU 3: CRITICAL") and "gpuwarden: drain" in r
        for r in step["reasons"]
    )
    assert any(r.startswith("nvlink_active failed on GPU 5") for r in step["reasons"])
    assert step["measurements"]["critical_checks"] == 2


def test_a_suite_step_fails_on_unknown_even_if_the_tool_exited_0() -> None:
    v = _judge(StepRun(0, read("unknown")))
    assert not v.passed
    assert any("could not be assessed" in r for r in v.steps[0].reasons)


def test_a_suite_step_fails_when_health_validation_gave_no_verdict() -> None:
    v = _judge(StepRun(2, ""))
    assert not v.passed
    assert v.steps[0].reasons == (
        "exit code 2; output not understood: no verdict: empty output "
        "(health-validation exits 2 when it produces none)",
    )


def test_a_pass_verdict_with_a_failing_exit_code_is_not_a_pass() -> None:
    assert not _judge(StepRun(1, read("pass"))).passed


def test_a_minimum_on_a_verdict_measurement_is_judged() -> None:
    def suite(minimum: float) -> Suite:
        step = Step(
            "hv", ("health-validation",), 120, "health-validation",
            {"gpu_average_power_draw.gpu0.average_power_draw_w": {"default": minimum}},
        )  # fmt: skip
        return Suite("s", (step,))

    assert judge_suite(suite(400), [StepRun(0, read("pass"))]).passed
    low = judge_suite(suite(450), [StepRun(0, read("pass"))])
    assert not low.passed and "412.5 below the minimum 450" in low.steps[0].reasons[0]
    missing = judge_suite(suite(400), [StepRun(0, read("warning"))])
    assert not missing.passed and "missing from the output" in missing.steps[0].reasons[0]


# -- what the operator reads: each check's exact status, GPUs and detail ---------------------


def _shown(text: str) -> list[tuple[str, str, tuple[int, ...], str]]:
    return [(c.name, c.status, c.gpus, c.detail) for c in parse_health_validation(text).checks]


def test_each_fixture_reads_as_exactly_these_checks() -> None:
    assert _shown(read("pass")) == [(OVERALL, "pass", (), "overall PASS")]
    assert _shown(read("critical-xid-nvlink")) == [
        (OVERALL, "fail", (), "overall CRITICAL"),
        ("gpu_xid_46", "fail", (3,),
         "CRITICAL; GPU 3: Xid 46 (GPU stopped processing) logged 2 times; recommended: drain, "
         "then reset_gpu -> service_required (gpuwarden: drain, then reset_gpu -> inspect)"),
        ("nvlink_active", "fail", (5,),
         "CRITICAL; GPU 5: 2 inactive NVLinks (allowed: 0); recommended: drain, then reset_gpu "
         "-> restart_os -> service_required (gpuwarden: drain, then reset_gpu -> reboot -> "
         "inspect)"),
    ]  # fmt: skip
    assert _shown(read("unknown")) == [
        (OVERALL, "fail", (), "overall UNKNOWN: the node's health could not be assessed "
                              "(failed closed)"),
        ("nvlink_active", "fail", (2,),
         "UNKNOWN; GPU 2: NVLink state could not be read; not assessed: failed closed"),
    ]  # fmt: skip
    assert _shown(read("warning")) == [
        (OVERALL, "warn", (), "overall WARNING: nvlink_bandwidth_count_speed"),
        ("nvlink_bandwidth_count_speed", "warn", (),
         "WARNING; entity GPU-8b1e2c3d-4f5a-6b7c-8d9e-0f1a2b3c4d5e; GPU 2: NVLink speed 50000 "
         "MB/s per link, expected 53125"),
    ]  # fmt: skip


def test_affected_components_read_as_one_check_per_category_with_their_checks_and_entities() -> (
    None
):
    doc = verdict("critical-xid-nvlink")
    del doc["checks"]
    doc["affected_components"].append({"check_ids": [], "entities": [], "max_severity": "INFO"})
    doc["affected_components"].append(
        {"check_ids": ["a", "b"], "entities": ["0", "GPU 1"], "max_severity": "CRITICAL"}
    )
    assert _shown(json.dumps(doc)) == [
        (OVERALL, "fail", (), "overall CRITICAL"),
        ("XID", "fail", (3,), "CRITICAL; checks gpu_xid_46; entities 3"),
        ("NVLINK", "fail", (5,), "CRITICAL; checks nvlink_active; entities 5"),
        ("uncategorised", "fail", (0, 1), "CRITICAL; checks a, b; entities 0, GPU 1"),
    ]
    doc["affected_components"] = [{"max_severity": "WARNING"}, 3, {"max_severity": "PASS"},
                                  {"check_ids": ["c"], "max_severity": "WARNING"}]  # fmt: skip
    doc["overall_severity"] = "WARNING"
    assert _shown(json.dumps(doc)) == [
        (OVERALL, "warn", (), "overall WARNING: uncategorised, unread affected_components[1], "
                              "uncategorised"),
        ("uncategorised", "warn", (), "WARNING; checks ?"),
        ("unread affected_components[1]", "warn", (), "not in the assumed shape: 3"),
        ("uncategorised", "warn", (), "WARNING; checks c"),
    ]  # fmt: skip


def test_unread_entries_are_quoted_sorted_and_cut_and_the_rest_still_read() -> None:
    long = {"z": "x" * 300, "a": 1}
    doc = {"overall_severity": "CRITICAL",
           "checks": [long, {"check_id": "k", "severity": "CRITICAL", "entity": True}]}  # fmt: skip
    shown = _shown(json.dumps(doc))
    assert shown[1][0] == "unread checks[0]" and shown[1][1] == "warn" and shown[1][2] == ()
    quoted = json.dumps(long, sort_keys=True)[:160]
    assert shown[1][3] == f"not in the assumed shape: {quoted}"
    assert shown[2] == ("k", "fail", (), "CRITICAL; entity True")  # a bool is no GPU index
    doc["checks"] = {"not": "a list"}
    assert _shown(json.dumps(doc))[1] == (
        "unread checks",
        "warn",
        (),
        'not in the assumed shape: {"not": "a list"}',
    )


def test_a_check_with_an_odd_action_or_no_steps_says_what_it_recommends() -> None:
    def detail(action: Any, **more: Any) -> str:
        doc = {"overall_severity": "CRITICAL", "checks": [
            {"check_id": "k", "severity": "CRITICAL", "entity": "GPU 4", "recommended_action":
             action, **more}]}  # fmt: skip
        return _shown(json.dumps(doc))[1][3]

    assert detail({"operational_state": "drain"}) == (
        "CRITICAL; recommended: drain (gpuwarden: drain)"
    )
    assert detail(["reset_gpu", "restart_os"]) == (
        "CRITICAL; recommended: reset_gpu -> restart_os (gpuwarden: reset_gpu -> reboot)"
    )
    assert detail({"steps": ["reset_gpu", 3]}).startswith('CRITICAL; recommended: unread ({"steps')
    assert detail(None) == "CRITICAL"
    assert detail({}) == "CRITICAL"
    assert detail(None, message="") == "CRITICAL"
    assert detail(None, message=5) == "CRITICAL"


def test_measurements_are_read_per_gpu_per_entity_and_booleans_are_not_numbers() -> None:
    doc = {"overall_severity": "PASS", "checks": [
        {"check_id": "p", "severity": "PASS", "entity": 2,
         "measurements": {"watts": 400, "ok": True, "name": "x"}},
        {"check_id": "q", "severity": "PASS", "entity": "mlx5_0", "measurements": {"flaps": 0}},
        {"check_id": "r", "severity": "PASS", "measurements": {"n": 8.5}},
    ]}  # fmt: skip
    m = parse_health_validation(json.dumps(doc)).measurements
    assert m == {"p.gpu2.watts": 400.0, "q.mlx5_0.flaps": 0.0, "r.n": 8.5,
                 "critical_checks": 0.0, "warning_checks": 0.0, "unknown_checks": 0.0}  # fmt: skip


def test_what_is_not_a_verdict_is_said_plainly() -> None:
    with pytest.raises(ParseError, match=r"^NodeVerdict has no overall_severity$"):
        parse_health_validation("{}")
    with pytest.raises(ParseError, match=r"^NodeVerdict.overall_severity: 'ok'"):
        parse_health_validation('{"overall_severity": "ok"}')
    with pytest.raises(ParseError, match=r"overall_severity PASS with 2 CRITICAL/UNKNOWN check"):
        parse_health_validation(
            json.dumps(
                {
                    "overall_severity": "PASS",
                    "checks": [
                        {"check_id": "a", "severity": "CRITICAL"},
                        {"check_id": "b", "severity": "UNKNOWN"},
                    ],
                }
            )
        )
    with pytest.raises(ParseError, match=r"^text after the NodeVerdict \(expected one JSON"):
        parse_health_validation('{"overall_severity": "PASS"} trailing')
