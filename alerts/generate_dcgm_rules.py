"""Generate the dcgm-exporter variant of the rule files: alerts/dcgm/*.rules.yml.

Sits in alerts/ (decides): a fleet that runs NVIDIA dcgm-exporter instead of gpuwarden's
exporter gets the same alerts wherever dcgm-exporter's fields can say the same thing. Every
rule of alerts/*.rules.yml is rewritten by :func:`dashboards.dcgm_translate.translate`
(names, units, labels from the metric catalogue); a rule that needs a series dcgm-exporter
does not serve is left out and listed, with the reason, at the top of its file. Alerts keep
their names, severity, action and fault class, and carry ``node`` (copied from dcgm's host
label) as every gpuwarden alert does. The XID rules are generated anew from the XID catalogue
over dcgm's last-XID gauge (alerts/dcgm_xid.py: a repeat of the same XID is invisible there);
the InfiniBand rules are rewritten over node_exporter's infiniband series instead
(alerts/dcgm_infiniband.py: dcgm-exporter serves no HCA field). The finding, pipeline and
remediation alerts read gpuwarden's own services' series and work unchanged on either fleet:
load them as they are.

    python alerts/generate_dcgm_rules.py           # rewrite alerts/dcgm/
    python alerts/generate_dcgm_rules.py --check   # exit 1 if a committed file is stale

tests/alerts/test_dcgm_variant.py fails when the committed files drift from their sources.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

from dashboards import translate as t
from dashboards.dcgm_translate import DCGM, Untranslatable, record_name, with_node
from dashboards.translate import Dialect

ROOT = Path(__file__).resolve().parent.parent
LINKS = "{{ with $labels.link }}{{ . }}{{ else }}(all links: dcgm sums them){{ end }}"
# the hardware rule files; findings, pipeline and remediation rules read gpuwarden's own
# services' series and apply unchanged on either fleet
HARDWARE = ("gpu", "memory", "nvlink", "infiniband", "xid", "storage")
SOURCES = [ROOT / "alerts" / f"{n}.rules.yml" for n in HARDWARE]
OUTPUT = ROOT / "alerts" / "dcgm"


def _sibling(name: str) -> ModuleType:
    """A module of alerts/ (a folder of scripts, not a package), loaded by its path."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "alerts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


XID, IB = _sibling("generate_xid_rules"), _sibling("dcgm_infiniband")
DCGM_XID = _sibling("dcgm_xid")
Translator = Callable[[dict[str, Any], set[str]], dict[str, Any]]
_PRINTF = re.compile(r'printf "[^"]*"')


def rule_translator(d: Dialect, annotation: Callable[[str], str]) -> Translator:
    """The rewriting of one native rule over dialect ``d``'s series; ``annotation`` rewrites
    an annotation's text (label names the alert carries under the vendor's name)."""

    def _rule(rule: dict[str, Any], produced: set[str]) -> dict[str, Any]:
        notes = rule.get("annotations") or {}
        if any(re.search(r"gpuwarden[_:]", _PRINTF.sub("", str(v))) for v in notes.values()):
            raise Untranslatable("its annotations query gpuwarden series")
        expr = t.translate(str(rule["expr"]), d, produced)
        out = dict(rule)
        if "annotations" in rule:
            out["annotations"] = {k: annotation(t.annotation_queries(str(v), d, produced))
                                  for k, v in notes.items()}  # fmt: skip
        if "record" in rule:
            out["record"] = t.record_name(rule["record"], d)
            out["expr"] = expr
        else:
            out["expr"] = t.with_node(expr, d) + ("\n" if "\n" in str(rule["expr"]) else "")
        return out

    return _rule


def _annotation(text: str) -> str:
    """dcgm's label names; a link dcgm sums per GPU is said to be all of them."""
    text = text.replace("$labels.uuid", "$labels.UUID")
    return text.replace("{{ $labels.link }}", LINKS)


_rule = rule_translator(DCGM, _annotation)


def _ib_rule(rule: dict[str, Any], produced: set[str]) -> dict[str, Any]:
    """An InfiniBand rule over node_exporter's series (node from instance, records renamed)."""
    out = {**rule, "expr": IB.translate(str(rule["expr"]), produced)}
    if "record" in rule:
        out["record"] = record_name(rule["record"])
    if "annotations" in rule:
        notes = {k: IB.translate(str(v), produced) for k, v in rule["annotations"].items()}
        out["annotations"] = notes
    return out


def convert(doc: dict[str, Any], produced: set[str], rule_of: Translator = _rule,
            group_prefix: str = "gpuwarden-dcgm-") -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The variant of one rule file, and the rules left out (``name: reason``)."""
    groups, left_out = [], []
    for group in doc.get("groups", []):
        rules = []
        for rule in group["rules"]:
            try:
                rules.append(rule_of(rule, produced))
            except Untranslatable as e:
                left_out.append(f"{rule.get('alert') or rule.get('record')}: {e}")
                continue
            if "record" in rule:
                produced.add(rule["record"])
        if rules:
            groups.append({**group, "name": group["name"].replace("gpuwarden-", group_prefix, 1),
                           "rules": rules})  # fmt: skip
    return {"groups": groups}, left_out


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def xid_document(native: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The XID rules over dcgm's last-XID gauge, from the catalogue as the native ones are
    (no NVLink5 decode on dcgm: every XID alerts per class), and the native rules left out."""
    cat = {x: {k: v for k, v in e.items() if k != "subcodes"}
           for x, e in XID.load_catalogue().items()}  # fmt: skip
    native_record = XID.increase_record(XID.FATAL_WINDOW)
    record = record_name(native_record)
    rules: list[dict[str, Any]] = DCGM_XID.recordings(cat, record)
    for rule in XID.fatal_rules(cat) + XID.warning_rules(cat):
        out = DCGM_XID.alert(rule, native_record, record)
        out["expr"] = with_node(out["expr"])
        out["annotations"] = {k: _annotation(v) for k, v in out["annotations"].items()}
        rules.append(out)
    kept = {r.get("alert") or r.get("record") for r in rules}
    left_out = []
    for group in native["groups"]:
        for r in group["rules"]:
            name = r.get("alert") or r["record"]
            if name in kept or record_name(name) in kept:
                continue
            reason = DCGM_XID.LEFT_OUT.get(name, "it reads the per-XID counter or NVLink domains,"
                                           " which dcgm-exporter does not serve")  # fmt: skip
            left_out.append(f"{name}: {reason}")
    group = {**native["groups"][0], "name": "gpuwarden-dcgm-xid-alerts", "rules": rules}
    return {"groups": [group]}, list(dict.fromkeys(left_out))


def render_all() -> dict[str, str]:
    """File name -> text of every variant file (one per hardware rule file)."""
    produced: set[str] = set()
    out = {}
    docs = {p.name: yaml.safe_load(p.read_text()) for p in SOURCES}
    for name in sorted(docs, key=lambda n: (n != "gpu.rules.yml", n)):  # records first
        if name == "xid.rules.yml":
            doc, left_out = xid_document(docs[name])
        else:  # none kept: the file says why
            rule_of = _ib_rule if name == "infiniband.rules.yml" else _rule
            doc, left_out = convert(docs[name], produced, rule_of)
        out[name] = generated_file(
            "alerts/generate_dcgm_rules.py", f"alerts/{name}",
            "The dcgm-exporter variant (dashboards/dcgm_translate.py);", "dcgm-exporter's",
            doc, left_out,
        )  # fmt: skip
    return out


def generated_file(script: str, src: str, variant: str, fields_of: str,
                   doc: dict[str, Any], left_out: list[str]) -> str:  # fmt: skip
    """A variant rule file: the generated-from header, what is left out and why, the rules."""
    head = [f"# GENERATED by {script} from {src}: do not edit.",
            f"# {variant} findings, pipeline and remediation rules apply unchanged."]  # fmt: skip
    if left_out:
        head.append(f"# Left out (not observable with {fields_of} fields):")
        head += [f"#   {line}" for line in left_out]
    return "\n".join(head) + "\n" + yaml.dump(doc, Dumper=_Dumper, sort_keys=False, width=100)


def write_or_check(files: dict[str, str], output: Path, script: str,
                   argv: list[str] | None = None) -> int:  # fmt: skip
    """A variant generator's command line: write ``files`` into ``output`` (removing rule
    files it no longer makes), or with ``--check`` fail when any is stale."""
    parser = argparse.ArgumentParser(description=f"regenerate {output.name}/ ({script})")
    parser.add_argument("--check", action="store_true", help="fail if a file is stale")
    args = parser.parse_args(argv)
    if args.check:
        stale = [n for n, text in files.items()
                 if not (output / n).exists() or (output / n).read_text() != text]  # fmt: skip
        extra = sorted({p.name for p in output.glob("*.rules.yml")} - set(files))
        if stale or extra:
            print(f"alerts/{output.name} is stale ({', '.join(stale + extra)}): run python "
                  f"{script}", file=sys.stderr)  # fmt: skip
            return 1
        return 0
    output.mkdir(exist_ok=True)
    for p in output.glob("*.rules.yml"):
        if p.name not in files:
            p.unlink()
    for name, text in files.items():
        (output / name).write_text(text)
        print(f"wrote {output / name}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return write_or_check(render_all(), OUTPUT, "alerts/generate_dcgm_rules.py", argv)


if __name__ == "__main__":
    raise SystemExit(main())
