"""alerts/xid.rules.yml is generated from the XID catalogue, by class, and never drifts."""

from __future__ import annotations

import os
import re

import pytest

from tests.alerts.ruleset import ALERTS, Rule, generator, load_rules
from tests.realcomp import promtool

GEN = generator("generate_xid_rules")
CATALOGUE = GEN.load_catalogue()
XID_RULES = [r for r in load_rules([ALERTS / "xid.rules.yml"]) if r.alert]


def _xids(rule: Rule) -> set[int]:
    m = re.search(r'xid=~"([0-9|]+)"', rule.expr)
    assert m, rule.expr
    return {int(x) for x in m.group(1).split("|")}


def test_the_committed_xid_rules_match_the_catalogue() -> None:
    if os.environ.get("UPDATE_GOLDEN"):
        GEN.main([])
    assert GEN.OUTPUT.read_text() == GEN.render(), (
        "alerts/xid.rules.yml is stale: run python alerts/generate_xid_rules.py"
    )
    assert GEN.main(["--check"]) == 0


def test_every_critical_xid_is_in_exactly_one_fatal_rule_of_its_class() -> None:
    fatal = [r for r in XID_RULES if r.alert and r.alert.startswith("GpuXidFatal")]
    for xid, entry in CATALOGUE.items():
        owners = [r for r in fatal if xid in _xids(r)]
        if entry["severity"] != "critical":
            assert not owners, f"XID {xid} is not critical but is in {owners[0].alert}"
            continue
        assert len(owners) == 1, f"XID {xid}: {[r.alert for r in owners]}"
        rule = owners[0]
        assert rule.alert == "GpuXidFatal" + entry["class"].capitalize()
        assert rule.labels["action"] == entry["action"]
        assert rule.labels["xid_class"] == entry["class"]


def test_every_warning_xid_alerts_with_the_catalogue_action() -> None:
    errors = [r for r in XID_RULES if r.alert == "GpuXidError"]
    for xid, entry in CATALOGUE.items():
        owners = [r for r in errors if xid in _xids(r)]
        assert len(owners) == (entry["severity"] == "warning"), xid
        if owners:
            assert owners[0].labels["action"] == entry["action"]


def test_every_repeat_rule_of_the_catalogue_has_its_count_and_window() -> None:
    repeated = [r for r in XID_RULES if r.alert == "GpuXidRepeatedApplication"]
    for xid, entry in CATALOGUE.items():
        owners = [r for r in repeated if xid in _xids(r)]
        if "repeat" not in entry:
            assert not owners, xid
            continue
        (rule,) = owners
        assert rule.labels["window"] == entry["repeat"]["window"]
        assert f">= {entry['repeat']['count']}" in rule.expr
        assert f"count{entry['repeat']['window']}" in rule.expr


@pytest.mark.parametrize("severity", ["critical", "warning"])
def test_a_new_catalogue_entry_changes_the_generated_rules(severity: str) -> None:
    extra = {**CATALOGUE, 999: {"name": "Test", "class": "hardware", "severity": severity,
                                "action": "drain"}}  # fmt: skip
    assert "999" in GEN.render(extra)
    assert "999" not in GEN.render(CATALOGUE)


def test_a_sites_xid_overrides_reach_the_generated_rules_that_promtool_accepts(tmp_path) -> None:
    site = tmp_path / "analyzer.yaml"
    site.write_text(
        "xid_overrides:\n"
        "  63: {severity: critical, action: drain}\n"  # catalogue: a warning
        "  13: {repeat: {count: 5}}\n"  # keeps its 1h window
        "  1001: {name: Vendor fault, class: hardware, severity: critical, action: reboot}\n"
    )
    out = tmp_path / "xid.rules.yml"
    assert GEN.main(["--site-config", str(site), "--output", str(out)]) == 0
    text = out.read_text()
    assert f"with the xid_overrides of {site}" in text.splitlines()[1]
    rules = [r for r in load_rules([out]) if r.alert]
    drain = [r for r in rules if r.alert.startswith("GpuXidFatal") and 63 in _xids(r)]
    assert [(r.labels["action"], r.labels["severity"]) for r in drain] == [("drain", "critical")]
    assert any(1001 in _xids(r) and r.labels["action"] == "reboot" for r in rules)
    (repeat13,) = [r for r in rules if r.alert == "GpuXidRepeatedApplication" and 13 in _xids(r)]
    assert ">= 5)" in repeat13.expr and repeat13.labels["window"] == "1h"
    check = promtool("check", "rules", str(out))
    assert check.returncode == 0, check.stdout + check.stderr
    assert GEN.main(["--check", "--site-config", str(site), "--output", str(out)]) == 0
    assert GEN.main(["--check", "--output", str(out)]) == 1  # without the overrides: stale


@pytest.mark.parametrize(
    ("overrides", "complaint"),
    [
        ("xid_overrides: {63: {action: explode}}", "unknown action"),
        ("xid_overrides: {abc: {action: drain}}", "'abc' is not an XID number"),
        ("xid_overrides: {13: {repeat: {window: 90}}}", "not like 30m"),
        ("xid_overrides: [63]", "expected a mapping"),
        ("- not a mapping", "expected a YAML mapping"),
    ],
)
def test_bad_site_overrides_exit_2_with_the_reason_and_write_nothing(
    tmp_path, capsys, overrides: str, complaint: str
) -> None:
    site = tmp_path / "analyzer.yaml"
    site.write_text(overrides + "\n")
    out = tmp_path / "xid.rules.yml"
    assert GEN.main(["--site-config", str(site), "--output", str(out)]) == 2
    assert complaint in capsys.readouterr().err
    assert not out.exists()


def test_every_per_xid_alert_carries_nvidia_s_resolution_and_reset_suffices() -> None:
    per_xid = [r for r in XID_RULES if r.alert in ("GpuXidError",) or
               r.alert.startswith("GpuXidFatal")]  # fmt: skip
    for rule in per_xid:
        for xid in _xids(rule):
            entry = CATALOGUE[xid]
            assert rule.labels["reset_suffices"] == str(bool(entry.get("reset_suffices"))).lower()
            assert rule.labels["nvidia_resolution"] == (entry["nvidia"]["immediate"] or "none")


def test_reset_suffices_reaches_remediation_for_the_codes_nvidia_resets() -> None:
    reset = {x for r in XID_RULES if r.labels.get("reset_suffices") == "true"
             and r.alert != "GpuXidNvlink5" for x in _xids(r)}  # fmt: skip
    assert {46, 62, 64, 95, 109, 110, 119, 120, 136, 140, 143, 150, 155, 158} <= reset
    assert 79 not in reset and 48 not in reset


def _nvl5_rows(rule: Rule) -> set[tuple[int, str, str, int]]:
    """The decode rows (xid, unit, status, sub-code) of the catalogue a rule's regex matches."""
    m = re.search(r'row=~"([^"]+)"', rule.expr)
    assert m, rule.expr
    pattern = re.compile(m.group(1))
    return {
        (x, r["unit"], r["error_status"], r["index"])
        for x, e in CATALOGUE.items()
        for r in e.get("subcodes", [])
        for unit in (r["unit"], *r["unit"].split("/"))
        if pattern.fullmatch(f"{x}:{unit}:{r['error_status']}:{r['index']}")
    }


def test_every_alerting_nvlink5_decode_row_is_in_one_rule_with_its_action() -> None:
    rules = [r for r in XID_RULES if r.alert == "GpuXidNvlink5"]
    for xid, entry in CATALOGUE.items():
        for row in entry.get("subcodes", []):
            key = (xid, row["unit"], row["error_status"], row["index"])
            owners = [r for r in rules if key in _nvl5_rows(r)]
            assert len(owners) == (row["severity"] != "info"), key
            if owners:
                assert owners[0].labels["action"] == row["action"]
                assert owners[0].labels["severity"] == row["severity"]
                assert owners[0].labels["nvidia_resolution"] == row["nvidia"]["immediate"]


def test_the_per_xid_rules_leave_out_lines_that_decode_to_a_row() -> None:
    link = [r for r in XID_RULES if r.alert == "GpuXidFatalLink" and 149 in _xids(r)]
    assert link and all("unless on (node, gpu, xid)" in r.expr for r in link)
    hardware = [r for r in XID_RULES if r.alert == "GpuXidFatalHardware"]
    assert all("unless" not in r.expr for r in hardware)
