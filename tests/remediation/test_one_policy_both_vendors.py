"""One policy decides both vendors: every finding kind the analyzer emits for AMD Instinct GPUs,
and every alert of the AMD rule variant (alerts/amd/), lands on a named rule and ladder of the
shipped policy (never only its notify catch-all) that allows the action it recommends, the same
rule as its NVIDIA counterpart."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from analyzer.afidcat import load_catalog
from analyzer.findings import FAULT_CLASS, KINDS
from remediation.policy import load, loads

ROOT = Path(__file__).resolve().parents[2]
POLICY = load(None)
# the AMD detectors and the kinds they emit, read from their source so a new kind is checked
AMD_DETECTORS = ("afid", "xgmi", "ras")
# an AMD kind -> the NVIDIA kind that stands for the same fault
COUNTERPART = {"afid_fatal": "xid_fatal", "afid_event": "faulty_machine",
               "xgmi_link_lost": "nvlink_down", "ras_deferred": "ecc_uncorrectable"}  # fmt: skip


def _amd_kinds() -> set[str]:
    kinds: set[str] = set()
    for name in AMD_DETECTORS:
        src = (ROOT / "analyzer" / "detectors" / f"{name}.py").read_text()
        kinds |= set(re.findall(r'"((?:afid|xgmi|ras)_[a-z_]+)"', src))
    return kinds & KINDS


def _actions(kind: str) -> set[str]:
    """What the detector may recommend for ``kind``."""
    if kind.startswith("afid_"):
        fatal = kind == "afid_fatal"
        return {e.action for e in load_catalog().entries.values()
                if e.fatal == fatal and e.severity != "info"}  # fmt: skip
    src = "\n".join(
        (ROOT / "analyzer" / "detectors" / f"{n}.py").read_text() for n in AMD_DETECTORS
    )
    return set(re.findall(rf'"{kind}", "\w+", "(\w+)"', src))


def test_the_amd_kinds_checked_here_are_the_ones_the_detectors_emit() -> None:
    assert _amd_kinds() == set(COUNTERPART)


@pytest.mark.parametrize("kind", sorted(COUNTERPART))
def test_every_amd_finding_kind_maps_to_a_named_policy_rule_that_allows_its_action(
    kind: str,
) -> None:
    fault_class = FAULT_CLASS[kind]
    labels = {"fault_class": fault_class}
    rule = POLICY.rule_for(labels)
    assert rule is not None and "fault_class" in rule.match, (kind, fault_class)
    assert POLICY.knows_class(fault_class) and fault_class in POLICY.ladders
    actions = _actions(kind)
    assert actions, kind
    assert actions <= rule.allow, (kind, actions - rule.allow)
    # the same fault class (so rule and ladder) as the NVIDIA fault it stands beside
    assert FAULT_CLASS[COUNTERPART[kind]] == fault_class


def _amd_alerts() -> list[dict]:
    return [r for p in sorted((ROOT / "alerts" / "amd").glob("*.rules.yml"))
            for g in yaml.safe_load(p.read_text())["groups"] for r in g["rules"] if "alert" in r]  # fmt: skip


def test_every_amd_alert_that_acts_lands_on_a_named_rule_allowing_its_action() -> None:
    alerts = _amd_alerts()
    assert len(alerts) >= 15
    for r in alerts:
        labels = r["labels"]
        rule = POLICY.rule_for(labels)
        assert rule is not None and labels["action"] in rule.allow, r["alert"]
        if labels["action"] != "notify":
            assert "fault_class" in rule.match, r["alert"]
        assert POLICY.knows_class(labels["fault_class"]), r["alert"]


def test_a_policy_without_a_rule_for_an_amd_class_is_caught() -> None:
    """The check can fail: a policy whose named rules forget the memory class leaves deferred
    errors to the notify-only catch-all."""
    text = (ROOT / "remediation" / "default_policy.yaml").read_text()
    broken = text.replace("~xid_fatal|gpu_lost|memory|faulty_machine",
                          "~xid_fatal|gpu_lost|faulty_machine")  # fmt: skip
    assert broken != text
    rule = loads(broken).rule_for({"fault_class": FAULT_CLASS["ras_deferred"]})
    assert rule is not None and "fault_class" not in rule.match and "cordon" not in rule.allow
