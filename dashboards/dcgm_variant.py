"""The dcgm-exporter variant of a rendered dashboard: the same panels over dcgm-exporter's
series (``dashboards/json/dcgm/<uid>-dcgm.json``), generated from the native dashboard by
:func:`dashboards.dcgm_translate.translate`, never hand-copied.

A target dcgm-exporter cannot feed is dropped; a panel left without targets is dropped, and the
dashboard's description lists those panels. Identity comes from any dcgm series (each carries
``UUID``, ``modelName``, ``Hostname`` and the driver label), so gpu_info becomes the GPU
temperature field in variable queries and identity tables. Recording rules are the variant's
(``gpuwarden_dcgm:...``, alerts/dcgm/); ``produced`` names the native records it has.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from dashboards.dcgm_translate import Untranslatable, relabel, translate
from exporter import catalog as c

SUFFIX = "-dcgm"
IDENTITY = c.GPU_TEMPERATURE.name  # a default dcgm field every GPU serves, for identity


def _identity(expr: str) -> str:
    """gpu_info (no dcgm field) as a source of label values or an identity table."""
    return re.sub(rf"\b{c.GPU_INFO.name}\b", IDENTITY, expr)


def _target(t: dict[str, Any], produced: set[str]) -> dict[str, Any] | None:
    expr = t.get("expr", "")
    if expr.strip().startswith(c.GPU_INFO.name):
        expr = _identity(expr)
    try:
        out = {**t, "expr": translate(expr, produced)}
    except Untranslatable:
        return None
    if "legendFormat" in t:
        out["legendFormat"] = relabel(t["legendFormat"])
    return out


def _variable(v: dict[str, Any], produced: set[str]) -> dict[str, Any]:
    query = v.get("definition")
    if not isinstance(query, str) or not query:
        return v
    try:
        new = translate(_identity(query), produced)
    except Untranslatable:
        return v
    return {**v, "definition": new, "query": {**v["query"], "query": new}}


def variant(data: dict[str, Any], produced: set[str]) -> dict[str, Any]:
    """The dcgm-exporter variant of one dashboard (``to_json`` output)."""
    out = copy.deepcopy(data)
    out["uid"] = data["uid"] + SUFFIX
    out["title"] = data["title"] + " (dcgm-exporter)"
    panels, dropped = [], []
    for p in out["panels"]:
        if p.get("type") == "row" or not p.get("targets"):
            panels.append(p)
            continue
        targets = [t for t in (_target(t, produced) for t in p["targets"]) if t is not None]
        if targets:
            panels.append({**p, "targets": targets})
        else:
            dropped.append(p.get("title", "?"))
    out["panels"] = panels
    out["templating"] = {"list": [_variable(v, produced) for v in out["templating"]["list"]]}
    note = " On dcgm-exporter's series (generated from the native dashboard)."
    if dropped:
        note += " Not observable with its fields: " + ", ".join(dropped) + "."
    out["description"] = (data.get("description") or "") + note
    out["links"] = []  # links point at native dashboards' uids
    return out
