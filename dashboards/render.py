"""Turn a grafanalib Dashboard into the JSON a current Grafana imports without migrating.

grafanalib 0.7 emits schemaVersion 12 with legacy fields (string datasources, ``span``,
explicit nulls). This module is the one place that knows the difference: it sets a current
``schemaVersion``, points every panel, target and variable at a ``${datasource}`` variable of
type prometheus, drops nulls and legacy keys, and serialises with sorted keys so the
committed JSON only changes when a dashboard does.
"""

from __future__ import annotations

import json
from typing import Any

from grafanalib import core as g
from grafanalib._gen import DashboardEncoder

SCHEMA_VERSION = 39
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
DATASOURCE_VARIABLE = {
    "name": "datasource",
    "label": "Data source",
    "type": "datasource",
    "query": "prometheus",
    "current": {},
    "hide": 0,
    "includeAll": False,
    "multi": False,
    "options": [],
    "refresh": 1,
    "regex": "",
}
LEGACY_DASHBOARD_KEYS = (
    "__inputs", "gnetId", "hideControls", "id", "rows", "sharedCrosshair", "style",
)  # fmt: skip
LEGACY_PANEL_KEYS = (
    "cacheTimeout", "color", "columns", "editable", "error", "fontSize", "height",
    "hideTimeOverride", "mappings", "maxDataPoints", "minSpan", "span", "styles", "transparent",
)  # fmt: skip
TARGET_KEYS = ("expr", "legendFormat", "refId", "instant", "format")


def drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value if v is not None]
    return value


def _target(t: dict[str, Any]) -> dict[str, Any]:
    out = {k: t[k] for k in TARGET_KEYS if k in t}
    out.update(datasource=DATASOURCE, editorMode="code", range=not t.get("instant", False))
    return out


def _thresholds(defaults: dict[str, Any]) -> None:
    """grafanalib leaves steps empty (or "") on some panels; Grafana wants a base step."""
    th = defaults.get("thresholds")
    if not isinstance(th, dict):
        return
    steps = [{"color": s["color"], "value": s.get("value")} for s in th.get("steps") or []]
    th["steps"] = steps or [{"color": "green", "value": None}]
    th["steps"][0]["value"] = None  # the base step starts at -infinity


def _panel(p: dict[str, Any]) -> dict[str, Any]:
    for k in LEGACY_PANEL_KEYS:
        p.pop(k, None)
    if p.get("type") == "row":
        p.pop("datasource", None)
        return p
    if p.get("type") == "table":  # grafanalib puts value mappings beside fieldConfig
        p.setdefault("fieldConfig", {}).setdefault("defaults", {}).setdefault("mappings", [])
    p["datasource"] = DATASOURCE
    p["targets"] = [_target(t) for t in p.get("targets", [])]
    defaults = p.setdefault("fieldConfig", {}).setdefault("defaults", {})
    _thresholds(defaults)
    if defaults.get("color") is None:
        defaults.pop("color", None)
    return p


def _variable(v: dict[str, Any]) -> dict[str, Any]:
    query = v["query"]
    return {
        "name": v["name"],
        "label": v.get("label", v["name"]),
        "type": "query",
        "datasource": DATASOURCE,
        "definition": query,
        "query": {"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery"},
        "refresh": v.get("refresh", 2),
        "includeAll": v.get("includeAll", False),
        "multi": v.get("multi", False),
        **({"allValue": v["allValue"]} if v.get("allValue") else {}),
        "sort": v.get("sort", 0),
        "hide": 0,
        "regex": "",
        "current": {},
        "options": [],
    }


def to_json(dashboard: g.Dashboard) -> dict[str, Any]:
    """The dashboard as a plain dict, in the shape of Grafana's current schema."""
    data = drop_nulls(json.loads(json.dumps(dashboard.to_json_data(), cls=DashboardEncoder)))
    for k in LEGACY_DASHBOARD_KEYS:
        data.pop(k, None)
    data["schemaVersion"] = SCHEMA_VERSION
    data["graphTooltip"] = 1  # shared crosshair across panels
    data["panels"] = [_panel(p) for p in data["panels"]]
    variables = [_variable(v) for v in data.get("templating", {}).get("list", [])]
    data["templating"] = {"list": [DATASOURCE_VARIABLE, *variables]}
    return data


def to_text(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=2, sort_keys=True) + "\n"
