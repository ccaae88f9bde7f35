"""Read the rendered dashboards and pull out what the tests check: panels, queries, variables."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

from dashboards.__main__ import JSON_DIR

BUILTIN_VARIABLES = {
    "__rate_interval": "1m",
    "__interval": "15s",
    "__range": "1h",
    "__range_s": "3600",
}
VARIABLE = re.compile(r"\$\{?(\w+)\}?")
LABEL_VALUES = re.compile(r"^label_values\((?:(?P<selector>.+),\s*)?(?P<label>\w+)\)$")


def load_all() -> dict[str, dict[str, Any]]:
    return {p.stem: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in board["panels"] if p["type"] != "row"]


def targets(board: dict[str, Any]) -> Iterator[tuple[dict[str, Any], dict[str, Any]]]:
    for p in panels(board):
        for t in p.get("targets", []):
            yield p, t


def query_variables(board: dict[str, Any]) -> list[dict[str, Any]]:
    return [v for v in board["templating"]["list"] if v["type"] == "query"]


def variable_selector(variable: dict[str, Any]) -> tuple[str, str]:
    """``label_values(selector, label)`` -> (the PromQL selector, the label)."""
    m = LABEL_VALUES.match(variable["definition"])
    assert m and m.group("selector"), f"unsupported variable query {variable['definition']}"
    return m.group("selector"), m.group("label")


def substitute(expr: str, values: dict[str, str]) -> str:
    """Replace Grafana variables (built-ins and template variables) with concrete values."""
    return VARIABLE.sub(lambda m: {**BUILTIN_VARIABLES, **values}.get(m.group(1), m.group(0)), expr)
