"""Every alert keeps the label contract (docs/contracts.md), reads only known metrics, has a
runbook entry and is covered by promtool unit tests, firing and not firing."""

from __future__ import annotations

import re

import pytest

from exporter import catalog
from tests.alerts.ruleset import (
    ACTIONS,
    EXTERNAL_METRICS,
    FAULT_CLASSES,
    HOLD,
    RESET_ACTIONS,
    ROOT,
    SEVERITIES,
    SOFT_ACTIONS,
    Rule,
    alert_tests,
    alerting_rules,
    load_rules,
    metric_names,
    recorded_names,
    runbook_sections,
)

ALERTS = alerting_rules()
ALERT_NAMES = sorted({r.alert for r in ALERTS if r.alert})
TEMPLATED_ACTION = "{{ $labels.action }}"
ACTION_SELECTOR = 'action=~"' + "|".join(ACTIONS) + '"'
IDENTITY = ("node", "gpu", "link", "device", "port", "subject", "reason", "collector")


def _id(rule: Rule) -> str:
    return f"{rule.file.name}:{rule.alert or rule.record}"


def test_the_rules_cover_every_subject_the_issue_names() -> None:
    expected = {
        "GpuXidFatalHardware", "GpuXidFatalMemory", "GpuXidFatalLink", "GpuXidFatalFirmware",
        "GpuXidRepeatedApplication", "GpuEccUncorrectable", "GpuRowRemapPending",
        "GpuRowRemapFailed", "GpuLost", "NvlinkErrorRateHigh", "NvlinkDown",
        "InfinibandErrorRateHigh", "InfinibandLinkFlapping", "InfinibandPortDown",
        "InfinibandPortRateLow", "GpuPcieLinkDowngraded", "GpuThrottlingSustained",
        "FindingStraggler", "FindingDegradedLink", "FindingFaultyMachine",
        "GpuwardenExporterDown", "GpuwardenExporterStale", "GpuwardenCollectorFailing",
        "GpuwardenAnalyzerDown", "GpuwardenRemediationDown", "GpuwardenWebhookDeliveryFailing",
        "GpuwardenRemediationBreakerOpen",
    }  # fmt: skip
    assert expected <= set(ALERT_NAMES), expected - set(ALERT_NAMES)


@pytest.mark.parametrize("rule", load_rules(), ids=_id)
def test_every_expr_reads_only_catalogue_metrics_or_recording_rules(rule: Rule) -> None:
    known = catalog.names() | recorded_names() | EXTERNAL_METRICS
    unknown = metric_names(rule.expr) - known
    assert not unknown, f"{_id(rule)} reads unknown metrics {sorted(unknown)}"


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_queries_inside_annotations_read_only_known_metrics(rule: Rule) -> None:
    known = catalog.names() | recorded_names() | EXTERNAL_METRICS
    for text in rule.annotations.values():
        for query in re.findall(r'query "((?:\\.|[^"\\])*)"', text):
            assert metric_names(query) <= known, f"{_id(rule)}: {query}"


def test_the_metric_name_check_catches_a_misspelt_metric() -> None:
    expr = f'sum by (node) (rate({catalog.GPU_ECC_ERRORS.name}{{error_type="x"}}[5m])) > 0'
    assert metric_names(expr) == {catalog.GPU_ECC_ERRORS.name}
    wrong = catalog.GPU_ECC_ERRORS.name.replace("errors_total", "error_total")
    assert metric_names(expr.replace(catalog.GPU_ECC_ERRORS.name, wrong)) - catalog.names() == {
        wrong
    }
    nested = "absent(gpuwarden:up:by_component{component=\"analyzer\"}) or label_replace(up, 'a', 'b', '', '')"
    assert metric_names(nested) == {"gpuwarden:up:by_component", "up"}


def test_recording_rules_follow_the_level_metric_operation_convention() -> None:
    for name in recorded_names():
        assert re.fullmatch(r"gpuwarden:[a-z_]+:[a-z0-9_]+", name), name


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_every_alert_has_severity_summary_description_and_runbook(rule: Rule) -> None:
    assert rule.labels.get("severity") in SEVERITIES
    assert {"summary", "description", "runbook_url"} <= set(rule.annotations)
    if not rule.expr.startswith("absent("):  # an absent series has no value to show
        assert "{{" in rule.annotations["description"], "the description must carry values"
    assert rule.annotations["runbook_url"].endswith("runbooks.md#" + rule.alert.lower())  # type: ignore[union-attr]


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_every_alert_names_what_it_is_about(rule: Rule) -> None:
    """node (plus gpu/link/port ... where relevant), component for pipeline alerts, the run
    for a maintenance run's."""
    text = rule.annotations["summary"] + rule.annotations["description"]
    if rule.file.name == "pipeline.rules.yml":
        assert "component" in rule.labels or 'component="' in rule.expr
    elif rule.labels.get("scope") == "cluster":  # a shared fault: named by what is shared
        assert "$labels.mount" in text
    elif rule.labels.get("scope") == "domain":  # an NVLink domain's fault: named by the domain
        assert "$labels.nvlink_domain" in text and "nvlink_domain" in rule.expr
    elif "maintenance_nodes" in rule.expr:  # a maintenance run's: named by its run
        assert "$labels.run" in text
    else:
        assert "$labels.node" in text
    per_node = ":by_node" in rule.expr  # a count of GPUs per node names no single GPU
    if "gpu" in rule.expr and rule.file.name in ("gpu.rules.yml", "memory.rules.yml"):
        assert "$labels.gpu" in text or per_node
    for identity in ("link", "port"):
        if f"$labels.{identity}" in text:
            assert "$labels.node" in text


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_an_alert_that_recommends_an_action_uses_the_vocabulary(rule: Rule) -> None:
    action = rule.labels.get("action")
    if action is None:
        assert "fault_class" not in rule.labels
        return
    if action == HOLD["action"]:
        assert rule.labels.get("fault_class") == HOLD["fault_class"]
        assert rule.file.name == "pipeline.rules.yml" and "$labels.node" in str(rule.annotations)
        return
    if action == TEMPLATED_ACTION:
        # Passed through from an analyzer finding: the selector admits only known actions.
        assert ACTION_SELECTOR in rule.expr
    else:
        assert action in ACTIONS or action in SOFT_ACTIONS or action in RESET_ACTIONS
    assert rule.labels.get("fault_class") in FAULT_CLASSES


def test_the_action_check_rejects_an_unknown_action() -> None:
    assert "format_disk" not in ACTIONS
    assert ACTION_SELECTOR not in catalog.FINDING.name + '{action=~".+"}'


def test_every_alert_action_is_one_remediation_knows() -> None:
    from remediation.model import ACTIONS as REMEDIATION_ACTIONS

    assert set(ACTIONS) | set(SOFT_ACTIONS) | set(RESET_ACTIONS) <= set(REMEDIATION_ACTIONS)


@pytest.mark.parametrize("rule", [r for r in ALERTS if "reset_suffices" in r.labels], ids=_id)
def test_an_alert_saying_a_reset_suffices_names_the_gpu_and_a_rung_remediation_resets_at(
    rule: Rule,
) -> None:
    """remediation swaps reboot for reset_gpu only on reset_suffices="true" with a gpu label;
    a reset_gpu action without reset_suffices="true" would reset where NVIDIA says it is not
    enough."""
    value, action = rule.labels["reset_suffices"], rule.labels.get("action")
    assert value in ("true", "false")
    if value == "true":
        assert "$labels.gpu" in str(rule.annotations)  # the series are per GPU
        assert action in ("drain", "reboot", "reset_gpu")
    else:
        assert action != "reset_gpu"


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_alert_has_a_runbook_entry_with_the_four_parts(name: str) -> None:
    sections = runbook_sections()
    assert name.lower() in sections, f"alerts/runbooks.md has no '## {name}'"
    body = sections[name.lower()]
    for part in ("**Meaning.**", "**Confirm.**", "**Act.**", "**Escalate.**"):
        assert part in body, f"runbook {name} lacks {part}"


def test_the_runbook_has_no_entry_for_an_alert_that_does_not_exist() -> None:
    # and the feature rules' health alerts (alerts/features/, tests/alerts/test_feature_rules.py)
    features = load_rules(sorted((ROOT / "alerts" / "features").glob("*.rules.yml")))
    # and the alerts only the AMD (DME) variant has (alerts/amd/, tests/alerts/test_amd_variant.py)
    amd = load_rules(sorted((ROOT / "alerts" / "amd").glob("*.rules.yml")))
    names = {*ALERT_NAMES, *(r.alert for r in [*features, *amd] if r.alert)}
    assert set(runbook_sections()) == {n.lower() for n in names}


@pytest.mark.parametrize("name", ALERT_NAMES)
def test_every_alert_has_a_firing_and_a_silent_promtool_case(name: str) -> None:
    cases = [c for c in alert_tests() if c["alertname"] == name]
    assert any(c.get("exp_alerts") for c in cases), f"{name}: no test where it fires"
    assert any(not c.get("exp_alerts") for c in cases), f"{name}: no test where it stays quiet"


@pytest.mark.parametrize("rule", ALERTS, ids=_id)
def test_alerts_on_gauges_wait_out_a_scrape_glitch(rule: Rule) -> None:
    """Counter windows (increase/rate/absent, a counter's rise as last_over_time -
    min_over_time) already span scrapes; a raw gauge needs `for`."""
    windowed = re.search(
        r"\b(increase|rate|avg_over_time|absent)\(|\blast_over_time\([^)]*\)\s*-\s*min_over_time\("
        r"|:increase|:rate|:avg|:count\d",
        rule.expr,
    )
    if not windowed:
        assert rule.body.get("for"), f"{_id(rule)} compares a raw gauge without `for`"


def test_every_alert_is_documented_in_docs_alerts_md() -> None:
    doc = (ROOT / "docs" / "alerts.md").read_text()
    missing = [name for name in ALERT_NAMES if f"`{name}`" not in doc]
    assert not missing, f"docs/alerts.md does not list {missing}"


_DURATION = re.compile(r"(\d+)([smhd])")


def _seconds(text: str) -> int:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(int(n) * units[u] for n, u in _DURATION.findall(text))


def _doc_alert_rows() -> list[tuple[int, str, dict[str, str]]]:
    """(line, alert, column -> cell) of every row of docs/alerts.md's alert tables."""
    rows, header = [], None
    lines = (ROOT / "docs" / "alerts.md").read_text().splitlines()
    for i, line in enumerate(lines, 1):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| alert |"):
            header = cells
        elif not line.startswith("|"):
            header = None
        elif header and cells[0].startswith("`"):
            rows.append((i, cells[0].strip("`"), dict(zip(header, cells, strict=False))))
    return rows


def test_the_for_and_keep_firing_durations_in_docs_alerts_md_are_the_rules() -> None:
    rules: dict[str, list[Rule]] = {}
    for rule in alerting_rules():
        rules.setdefault(str(rule.alert), []).append(rule)
    rows = _doc_alert_rows()
    assert len(rows) > 2 * 40, "docs/alerts.md's alert tables were not found"
    wrong = []
    for line, name, cells in rows:
        column = next(k for k in cells if k.startswith("for"))
        fors = {_seconds(str(r.body.get("for", "0s"))) for r in rules[name]}
        keeps = {_seconds(str(r.body.get("keep_firing_for", "0s"))) for r in rules[name]}
        for clause in cells[column].split(";"):  # "3m; per node 1m / 2m": one per rule
            said = [_seconds(f"{n}{u}") for n, u in _DURATION.findall(clause)]
            if said[0] not in fors or (len(said) > 1 and said[1] not in keeps):
                wrong.append(f"line {line} {name}: says {cells[column]!r}, rules' for "
                             f"{sorted(fors)} s, keep firing {sorted(keeps)} s")  # fmt: skip
    assert not wrong, "\n".join(wrong)
