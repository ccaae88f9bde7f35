"""Every analyzer finding kind and every catalogue metric reaches a human through a rule, or is
marked dashboard-only with a reason in alerts/coverage.yml (issue 17)."""

from __future__ import annotations

import re

import pytest
import yaml

from analyzer.findings import KINDS
from exporter import catalog
from tests.alerts.ruleset import ALERTS, alerting_rules, load_rules, metric_names

COVERAGE = yaml.safe_load((ALERTS / "coverage.yml").read_text())
ALERT_NAMES = {r.alert for r in alerting_rules()}


def _read_by_rules() -> set[str]:
    read: set[str] = set()
    for rule in load_rules():
        read |= metric_names(rule.expr)
    return read


def _kinds_selected(expr: str) -> set[str]:
    out: set[str] = set()
    for value in re.findall(r'kind=~?"([^"]+)"', expr):
        out |= set(value.split("|"))
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_finding_kind_has_a_rule_or_a_dashboard_only_reason(kind: str) -> None:
    entry = COVERAGE["findings"].get(kind)
    assert entry, f"finding kind {kind!r}: no alert and no dashboard_only mark in coverage.yml"
    if isinstance(entry, dict):
        assert str(entry.get("dashboard_only", "")).strip(), (
            f"{kind}: dashboard_only needs a reason"
        )
        return
    missing = set(entry) - ALERT_NAMES
    assert not missing, f"{kind}: coverage.yml names alerts that do not exist: {missing}"


def test_a_finding_alert_selects_every_kind_that_coverage_says_it_covers() -> None:
    selected: dict[str, set[str]] = {}
    for rule in alerting_rules():
        if rule.file.name == "findings.rules.yml" and rule.alert:
            selected.setdefault(rule.alert, set()).update(_kinds_selected(rule.expr))
    for kind, entry in COVERAGE["findings"].items():
        for alert in entry if isinstance(entry, list) else []:
            if alert in selected:
                assert kind in selected[alert], f"{alert} does not select kind {kind}"


def test_coverage_names_no_finding_kind_the_analyzer_does_not_have() -> None:
    assert set(COVERAGE["findings"]) <= KINDS


@pytest.mark.parametrize("name", sorted(catalog.names()))
def test_every_catalogue_metric_is_alerted_on_or_marked_dashboard_only(name: str) -> None:
    marked = COVERAGE["dashboard_only_metrics"]
    if name in _read_by_rules():
        assert name not in marked, f"{name} is read by a rule: drop its dashboard_only mark"
        return
    assert str(marked.get(name, "")).strip(), (
        f"{name}: no rule reads it and coverage.yml gives no dashboard_only reason"
    )


def test_the_coverage_check_fails_for_a_metric_nobody_decided_about() -> None:
    undecided = catalog.GPU_UP.name + "_new_field"  # a metric someone might add tomorrow
    assert undecided not in _read_by_rules()
    assert undecided not in COVERAGE["dashboard_only_metrics"]


def test_dashboard_only_marks_name_only_catalogue_metrics() -> None:
    assert set(COVERAGE["dashboard_only_metrics"]) <= catalog.names()
