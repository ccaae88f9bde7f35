"""Load the shipped rule files and their promtool tests; list the metric names an expr reads.

Shared by tests/alerts and tests/dashboards (the dashboards query the same recording rules).
"""

from __future__ import annotations

import functools
import importlib.util
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
ALERTS = ROOT / "alerts"
RULE_FILES = sorted(ALERTS.glob("*.rules.yml"))
TEST_FILES = sorted((ALERTS / "tests").glob("*_test.yml"))
RUNBOOKS = ALERTS / "runbooks.md"


def generator(name: str) -> ModuleType:
    """``alerts/<name>.py`` (a script, not a package module) loaded as a module; registered
    in ``sys.modules`` first, where its dataclasses look themselves up."""
    spec = importlib.util.spec_from_file_location(name, ALERTS / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


# ARCHITECTURE.md decision 9 and docs/contracts.md.
ACTIONS = ("notify", "cordon", "drain", "requeue", "checkpoint_restart", "reboot")
# Soft actions (placement tiers, issue 26): set by a rule by name, never passed through from a
# finding's action label (the findings selector admits only ACTIONS).
SOFT_ACTIONS = ("avoid",)
# The GPU-reset rung (issue 26): an XID rule may name it; usually an XID alert says reboot with
# reset_suffices="true" (NVIDIA's resolution RESET_GPU) and remediation tries the reset first.
RESET_ACTIONS = ("reset_gpu",)
FAULT_CLASSES = (
    "xid_fatal",
    "xid_application_repeated",
    "gpu_lost",
    "memory",
    "nvlink",
    "infiniband",
    "pcie",
    "thermal",
    "straggler",
    "faulty_machine",
    "switch",
    "storage",
    "marginal",  # placement tiers (issue 26): de-prefer, never drain
)
SEVERITIES = ("critical", "warning", "info")
# The pipeline's own alerts (exporter or analyzer down) tell remediation "unknown", never
# "healthy": action hold with fault_class unwatched (issue 17; remediation, issue 18).
HOLD = {"action": "hold", "fault_class": "unwatched"}
# Series no gpuwarden component exports: Prometheus's own `up` and `ALERTS`, Alertmanager's
# counters.
EXTERNAL_METRICS = frozenset({"up", "alertmanager_notifications_failed_total", "ALERTS"})

_KEYWORDS = frozenset(
    {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}
    | {"group_left", "group_right", "inf", "nan", "atan2"}
)
_STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
_BRACES = re.compile(r"\{[^{}]*\}")
_BRACKETS = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_TOKEN = re.compile(r"(?P<num>\d[\w.]*)|(?P<id>[A-Za-z_:][\w:]*)(?P<call>\s*\()?")


@dataclass(frozen=True)
class Rule:
    file: Path
    group: str
    body: dict[str, Any]

    @property
    def alert(self) -> str | None:
        return self.body.get("alert")

    @property
    def record(self) -> str | None:
        return self.body.get("record")

    @property
    def expr(self) -> str:
        return str(self.body["expr"])

    @property
    def labels(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.body.get("labels") or {}).items()}

    @property
    def annotations(self) -> dict[str, str]:
        return {k: str(v) for k, v in (self.body.get("annotations") or {}).items()}


def load_rules(files: list[Path] = RULE_FILES) -> list[Rule]:
    return list(_load_rules(tuple(files)))


@functools.cache
def _load_rules(files: tuple[Path, ...]) -> tuple[Rule, ...]:
    out = []
    for f in files:
        for group in yaml.safe_load(f.read_text())["groups"]:
            out += [Rule(f, group["name"], r) for r in group["rules"]]
    return tuple(out)


def alerting_rules() -> list[Rule]:
    return [r for r in load_rules() if r.alert]


@functools.cache
def recorded_names() -> frozenset[str]:
    return frozenset(r.record for r in load_rules() if r.record)


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects (not functions, keywords or labels)."""
    text = _STRING.sub('""', expr)
    text = _BRACES.sub("", text)
    text = _BRACKETS.sub("", text)
    text = _GROUPING.sub("", text)
    names = set()
    for m in _TOKEN.finditer(text):
        name = m.group("id")
        if name and not m.group("call") and name not in _KEYWORDS:
            names.add(name)
    return names


def anchor(heading: str) -> str:
    """GitHub's anchor for a markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@functools.cache
def runbook_sections() -> dict[str, str]:
    """Anchor -> body text of each `## ` section of alerts/runbooks.md."""
    sections: dict[str, str] = {}
    current = None
    for line in RUNBOOKS.read_text().splitlines():
        if line.startswith("## "):
            current = anchor(line[3:])
            sections[current] = ""
        elif current is not None:
            sections[current] += line + "\n"
    return sections


@functools.cache
def alert_tests() -> list[dict[str, Any]]:
    """Every alert_rule_test case of every promtool test file."""
    cases: list[dict[str, Any]] = []
    for f in TEST_FILES:
        for test in yaml.safe_load(f.read_text())["tests"]:
            cases += test.get("alert_rule_test") or []
    return cases
