"""The reset rung end to end on what ships: every generated XID alert that says
``reset_suffices="true"`` and recommends reboot becomes a reset_gpu decision through the engine
under both shipped policies (a GPU reset before a reboot, as NVIDIA's resolution says); the
ones whose resolution needs more (``reset_suffices="false"``) still reboot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from remediation import policy
from remediation.backends.dryrun import DryRunBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Alert

REPO = Path(__file__).resolve().parents[2]
POLICIES = [
    REPO / "remediation/default_policy.yaml",
    REPO / "deploy/remediation/policy.example.yaml",
]
NODES = {f"gpu-node-{i:03d}": {"rack": "r1"} for i in range(1, 65)}


def xid_alerts(action: str) -> list[dict[str, Any]]:
    doc = yaml.safe_load((REPO / "alerts/xid.rules.yml").read_text())
    rules = [r for g in doc["groups"] for r in g["rules"] if "alert" in r]
    return [r for r in rules if r["labels"].get("action") == action]


def decide(path: Path, tmp: Path, labels: dict[str, str]) -> dict[str, Any]:
    clock, journal = FakeClock(), Journal(tmp / "state.db")
    pol = policy.load(path)
    engine = Engine(journal, DryRunBackend(journal, NODES, clock.now), pol, clock, Metrics())
    a = Alert("fp-1", "2026-12-01T10:00:00Z", "firing", labels)
    journal.accept([a], clock.now())
    engine.decide(a)
    row = journal.rows("SELECT action, verdict, guard, reason FROM decisions")[-1]
    journal.close()
    return row


REBOOTS = xid_alerts("reboot")


def test_the_generated_rules_have_reboot_alerts_on_both_sides_of_reset_suffices() -> None:
    assert {r["labels"]["reset_suffices"] for r in REBOOTS} == {"true", "false"}


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
@pytest.mark.parametrize(
    "rule", REBOOTS, ids=lambda r: f"{r['alert']}-{r['labels']['reset_suffices']}"
)
def test_a_reboot_xid_takes_the_reset_rung_exactly_when_a_reset_suffices(
    path: Path, rule: dict[str, Any], tmp_path: Path
) -> None:
    """The example policy acts on critical alerts only (a warning XID is denied by policy
    there, reset or reboot alike); the default policy acts on every one (in dry-run)."""
    labels = {**rule["labels"], "alertname": rule["alert"], "node": "gpu-node-007", "gpu": "3"}
    row = decide(path, tmp_path, labels)
    want = "reset_gpu" if rule["labels"]["reset_suffices"] == "true" else "reboot"
    acts = path.name == "default_policy.yaml" or labels["severity"] == "critical"
    if acts:
        assert (row["action"], row["verdict"]) == (want, "allow"), row
    else:
        assert (row["verdict"], row["guard"]) == ("deny", "policy"), row
