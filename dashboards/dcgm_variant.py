"""The exporter variants of a rendered dashboard: the same panels over dcgm-exporter's series
(``dashboards/json/dcgm/<uid>-dcgm.json``) or AMD DME's (``dashboards/json/amd/<uid>-amd.json``),
generated from the native dashboard by :func:`dashboards.translate.translate` with the
dialect's table, never hand-copied.

A target dcgm-exporter cannot feed is dropped; a panel left without targets is dropped, and the
dashboard's description lists those panels. Identity comes from any vendor series (each dcgm
series carries ``UUID``, ``modelName``, ``Hostname`` and the driver label; each DME series
``gpu_uuid``, ``card_model``, ``hostname``, ``serial_number``), so gpu_info becomes the GPU
temperature field in variable queries and identity tables. Recording rules are the variant's
(``gpuwarden_dcgm:...``, alerts/dcgm/; ``gpuwarden_amd:...``, alerts/amd/); ``produced`` names
the native records it has.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Any

from dashboards import translate as t
from dashboards.amd_translate import DME
from dashboards.dcgm_translate import DCGM
from dashboards.translate import Untranslatable
from exporter import catalog as c


@dataclass(frozen=True)
class Flavour:
    """One exporter's variant: its table, the uid suffix, the name in titles."""

    dialect: t.Dialect
    suffix: str
    title: str
    identity: str  # one series every GPU serves, standing for gpu_info (a native or vendor name)


# dcgm: the GPU temperature, a default field; DME: gpu_health, one plain field (the temperature
# is two, junction or edge, which no label_values() selector can read)
DCGM_VARIANT = Flavour(DCGM, "-dcgm", "dcgm-exporter", c.GPU_TEMPERATURE.name)
AMD_VARIANT = Flavour(DME, "-amd", "AMD DME", "gpu_health")
SUFFIX = DCGM_VARIANT.suffix
IDENTITY = DCGM_VARIANT.identity


def _identity(expr: str, identity: str = IDENTITY) -> str:
    """gpu_info (no vendor field) as a source of label values or an identity table."""
    return re.sub(rf"\b{c.GPU_INFO.name}\b", identity, expr)


def _target(target: dict[str, Any], produced: set[str], f: Flavour) -> dict[str, Any] | None:
    d, expr = f.dialect, target.get("expr", "")
    if expr.strip().startswith(c.GPU_INFO.name):
        expr = _identity(expr, f.identity)
    try:
        out = {**target, "expr": t.translate(expr, d, produced)}
    except Untranslatable:
        return None
    if "legendFormat" in target:
        out["legendFormat"] = t.legend(target["legendFormat"], d)
    return out


def _variable(v: dict[str, Any], produced: set[str], f: Flavour) -> dict[str, Any]:
    query = v.get("definition")
    if not isinstance(query, str) or not query:
        return v
    try:
        new = t.translate(_identity(query, f.identity), f.dialect, produced)
    except Untranslatable:
        return v
    return {**v, "definition": new, "query": {**v["query"], "query": new}}


def variant(data: dict[str, Any], produced: set[str], flavour: Flavour = DCGM_VARIANT
            ) -> dict[str, Any]:  # fmt: skip
    """The ``flavour`` variant of one dashboard (``to_json`` output): dcgm-exporter's by default."""
    out = copy.deepcopy(data)
    out["uid"] = data["uid"] + flavour.suffix
    out["title"] = data["title"] + f" ({flavour.title})"
    panels, dropped = [], []
    for p in out["panels"]:
        if p.get("type") == "row" or not p.get("targets"):
            panels.append(p)
            continue
        targets = [
            x for x in (_target(x, produced, flavour) for x in p["targets"]) if x is not None
        ]
        if targets:
            panels.append({**p, "targets": targets})
        else:
            dropped.append(p.get("title", "?"))
    out["panels"] = panels
    out["templating"] = {
        "list": [_variable(v, produced, flavour) for v in out["templating"]["list"]]
    }
    note = f" On {flavour.title}'s series (generated from the native dashboard)."
    if dropped:
        note += " Not observable with its fields: " + ", ".join(dropped) + "."
    out["description"] = (data.get("description") or "") + note
    out["links"] = []  # links point at native dashboards' uids
    return out
