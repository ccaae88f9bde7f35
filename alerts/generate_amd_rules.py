"""Generate the AMD (ROCm Device Metrics Exporter) variant of the rule files: alerts/amd/*.rules.yml.

Sits in alerts/ (decides), beside generate_dcgm_rules.py, whose converter it reuses with the DME
dialect (dashboards/amd_translate.py): a fleet of AMD Instinct GPUs read through DME gets the
same alerts wherever DME's fields can say the same thing, under the same names, severity, action
and fault class, carrying ``node`` (from DME's ``hostname``) and ``gpu`` (from ``gpu_id``) as
every gpuwarden alert does, so one remediation policy decides both vendors. What DME cannot say
is left out and listed, with the reason, at the top of its file. The rules only AMD has
(alerts/amd_rules.py) are added: GPU health, deferred errors, XGMI errors, AFIDs from
analyzer/afid_catalog.yaml (afid.rules.yml stands where xid.rules.yml does), throttling from
violation residency. The InfiniBand rules read node_exporter's series (alerts/dcgm_infiniband.py).
Findings, pipeline and remediation rules read gpuwarden's own services' series: load them as
they are. DME's names are read unprefixed (``MetricsFieldPrefix`` empty).

    python alerts/generate_amd_rules.py           # rewrite alerts/amd/
    python alerts/generate_amd_rules.py --check   # exit 1 if a committed file is stale

tests/alerts/test_amd_variant.py fails when the committed files drift from their sources.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from dashboards import translate as t
from dashboards.amd_translate import DME, HOST_LABEL, RECORD_PREFIX

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "alerts" / "amd"
GROUP_PREFIX = "gpuwarden-amd-"


def _sibling(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, ROOT / "alerts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN, AMD = _sibling("generate_dcgm_rules"), _sibling("amd_rules")
IB = GEN.IB
# native rules DME could be read for but would say wrong, and why (checked before translating)
LEFT_OUT = {
    "GpuLost": "DME has no lost state: gpu_health 0 is its health verdict (GpuUnhealthy: "
    "cordon, the ECC/RAS/AFID alerts say whether to drain), a GPU off the bus loses its series "
    "(GpuCountBelowInventory)",
}
NO_XID = ("NVIDIA XIDs; an AMD GPU's RAS events are AFIDs (afid.rules.yml, from "
          "analyzer/afid_catalog.yaml)")  # fmt: skip


def _annotation(text: str) -> str:
    """DME's label names for the labels an alert does not carry under the native name."""
    return text.replace("$labels.uuid", "$labels.gpu_uuid").replace(
        "{{ $labels.link }}", "{{ $labels.link_index }}")  # fmt: skip


_translated = GEN.rule_translator(DME, _annotation)


def _rule(rule: dict[str, Any], produced: set[str]) -> dict[str, Any]:
    name = rule.get("alert") or rule.get("record")
    if name in LEFT_OUT:
        raise t.Untranslatable(LEFT_OUT[name])
    return _translated(rule, produced)


def _ib_rule(rule: dict[str, Any], produced: set[str]) -> dict[str, Any]:
    """An InfiniBand rule over node_exporter's series (node from instance, DME's hostname
    beside it for the AMD dashboards, records renamed)."""

    def tr(text: str) -> str:
        return IB.translate(text, produced, host=HOST_LABEL, record_prefix=RECORD_PREFIX)

    out = {**rule, "expr": tr(str(rule["expr"]))}
    if "record" in rule:
        out["record"] = t.record_name(rule["record"], DME)
    if "annotations" in rule:
        out["annotations"] = {k: tr(str(v)) for k, v in rule["annotations"].items()}
    return out


def _own(rules: list[dict[str, Any]], produced: set[str]) -> list[dict[str, Any]]:
    """AMD-only rules in native terms (and DME names), translated as the native ones are."""
    out = []
    for r in rules:
        out.append(_translated(r, produced))
        if "record" in r:
            produced.add(r["record"])
    return out


def _group(name: str, rules: list[dict[str, Any]]) -> dict[str, Any]:
    return {"groups": [{"name": f"{GROUP_PREFIX}{name}-alerts", "rules": rules}]}


def render_all() -> dict[str, str]:
    """File name -> text of every variant file."""
    cat = AMD.catalogue()
    produced: set[str] = {t.record_name(AMD.THROTTLE_RECORD, DME)}
    docs = {p.name: yaml.safe_load(p.read_text()) for p in GEN.SOURCES}
    out: dict[str, tuple[dict[str, Any], list[str], str]] = {}
    for name in sorted(docs, key=lambda n: (n != "gpu.rules.yml", n)):  # records first
        src = f"alerts/{name}"
        if name == "xid.rules.yml":
            records = AMD.afid_records()
            doc = _group("afid", records + _own(AMD.afid_alerts(cat), produced))
            out["afid.rules.yml"] = (doc, [f"alerts/xid.rules.yml (all): {NO_XID}"],
                                     "analyzer/afid_catalog.yaml")  # fmt: skip
            continue
        rule_of = _ib_rule if name == "infiniband.rules.yml" else _rule
        doc, left_out = GEN.convert(docs[name], produced, rule_of, GROUP_PREFIX)
        if name == "gpu.rules.yml":
            rules = [AMD.throttle_record(), *doc["groups"][0]["rules"]]
            doc = _group("gpu", rules + _own(AMD.gpu_rules(), produced))
        elif name == "memory.rules.yml":
            kept = doc["groups"][0]["rules"] if doc["groups"] else []
            left_out = [x for x in left_out if not x.startswith("GpuEccUncorrectable:")]
            doc = _group("memory", kept + _own(AMD.memory_rules(cat), produced))
        out[name] = (doc, left_out, src)
    out["xgmi.rules.yml"] = (_group("xgmi", _own(AMD.xgmi_rules(), produced)), [],
                             "alerts/amd_rules.py")  # fmt: skip
    return {
        name: GEN.generated_file(
            "alerts/generate_amd_rules.py", src,
            "The AMD DME variant (dashboards/amd_translate.py, alerts/amd_rules.py);", "DME's",
            doc, left_out,
        )
        for name, (doc, left_out, src) in sorted(out.items())
    }  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    return int(GEN.write_or_check(render_all(), OUTPUT, "alerts/generate_amd_rules.py", argv))


if __name__ == "__main__":
    raise SystemExit(main())
