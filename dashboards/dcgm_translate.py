"""PromQL over gpuwarden's series, rewritten for a fleet that runs dcgm-exporter instead.

The dcgm-exporter variants of the alert rules (``alerts/generate_dcgm_rules.py`` ->
``alerts/dcgm/``) and of the dashboards (``python -m dashboards`` -> ``dashboards/json/dcgm/``)
are generated from the same sources as the native ones through this one function, so they
never drift apart. The mapping is the catalogue's: each metric's ``DcgmField`` (name, unit
scale, the native labels a field pins, the labels it sums away), dcgm-exporter's host label
for ``node`` and ``UUID`` for ``uuid``. Recording rules of the variant are named
``gpuwarden_dcgm:...`` so both variants can be loaded into one Prometheus.

What cannot be said with dcgm-exporter's fields raises :class:`Untranslatable` with the
reason (a metric without a dcgm field, one dcgm field fed by two native metrics, a regex
over a label a field pins), and the caller leaves that rule or panel out and says so.
Pure string functions; no I/O.
"""

from __future__ import annotations

import re

from exporter import catalog as c
from exporter.catalog import DcgmField, MetricDef

HOST_LABEL = "Hostname"  # dcgm-exporter 3.x-4.8 (4.x after PR #655: hostname)
RECORD_PREFIX = "gpuwarden_dcgm:"
LABELS = {"node": HOST_LABEL, "uuid": "UUID"}
LINEAR = ("rate", "irate", "increase", "delta", "idelta", "deriv", "avg_over_time",
          "max_over_time", "min_over_time", "sum_over_time", "last_over_time")  # fmt: skip
OTHER = ("changes", "resets", "count_over_time", "present_over_time", "absent_over_time")
_NAME = r"gpuwarden_[a-z0-9_]+"
_MATCHERS = r"(?:\{([^}]*)\})?"
_RANGE = re.compile(rf"\b({'|'.join(LINEAR + OTHER)})\(\s*({_NAME}){_MATCHERS}\[([^\]]+)\]\s*\)")
_INSTANT = re.compile(rf"\b({_NAME})(?![\w:\[(]){_MATCHERS}(?!\s*\[)")
_MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_LABEL_TOKEN = re.compile(r"(?<![$\w.\"])(node|uuid)\b(?!\s*\()")
_RECORD = re.compile(r"\bgpuwarden:")
# series of gpuwarden's own services, not of the node agent: the same on a dcgm fleet
SERVICES = (
    c.FINDING.name,
    c.PREFIX + "analyzer_",
    c.PREFIX + "remediation_",
    c.PREFIX + "accounting_",  # failure accounting: from remediation's journal, any fleet
)


class Untranslatable(ValueError):
    """This expression needs series dcgm-exporter does not serve."""


def _shared() -> frozenset[str]:
    counts: dict[str, int] = {}
    for m in c.all_metrics():
        if "_mig_" in m.name:  # MIG series share the GPU's field names by design
            continue
        for f in m.dcgm:
            counts[f.name] = counts.get(f.name, 0) + 1
    return frozenset(n for n, k in counts.items() if k > 1)


SHARED = _shared()  # dcgm fields several native metrics add into (NVLink TX + RX)
BY_NAME: dict[str, MetricDef] = {m.name: m for m in c.all_metrics()}


def _fields(name: str, matchers: str) -> tuple[list[DcgmField], str]:
    """The dcgm fields a native selector reads, and its matchers for them."""
    m = BY_NAME.get(name)
    if m is None or not m.dcgm or "_mig_" in name:
        raise Untranslatable(f"{name} has no dcgm-exporter field")
    if any(f.name in SHARED for f in m.dcgm):
        raise Untranslatable(f"{name}: dcgm-exporter sums it with another series")
    pinned = {f2[0] for f in m.dcgm for f2 in f.match}
    keep, fields = [], list(m.dcgm)
    for label, op, value in _MATCHER.findall(matchers or ""):
        if label in pinned:
            if op != "=":
                raise Untranslatable(f"{name}: {label}{op} over a label dcgm splits into fields")
            fields = [f for f in fields if (label, value) in f.match]
        elif any(label in f.sum_over for f in m.dcgm):
            raise Untranslatable(f"{name}: dcgm-exporter sums {label} away")
        else:
            keep.append(f'{LABELS.get(label, label)}{op}"{value}"')
    if not fields:
        raise Untranslatable(f"{name}: no dcgm field for {matchers}")
    return fields, ",".join(keep)


def _restore(expr: str, field: DcgmField) -> str:
    """Put back the native labels the field pins (``error_type="uncorrected"``)."""
    for label, value in field.match:
        expr = f'label_replace({expr}, "{label}", "{value}", "", "")'
    return expr


def _union(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def _scaled(expr: str, field: DcgmField, linear: bool = True) -> str:
    return f"({expr} / {field.scale:g})" if linear and field.scale != 1.0 else expr


def _selector(name: str, sel: str) -> str:
    return f"{name}{{{sel}}}" if sel else name


def _range(m: re.Match[str]) -> str:
    fn, name, matchers, rng = m[1], m[2], m[3], m[4]
    fields, sel = _fields(name, matchers)
    return _union([_restore(_scaled(f"{fn}({_selector(f.name, sel)}[{rng}])", f, fn in LINEAR), f)
                   for f in fields])  # fmt: skip


def _instant(m: re.Match[str]) -> str:
    fields, sel = _fields(m[1], m[2])
    return _union([_restore(_scaled(_selector(f.name, sel), f), f) for f in fields])


def translate(expr: str, produced: frozenset[str] | set[str] | None = None) -> str:
    """``expr`` over dcgm-exporter's series. ``produced``: the recording rules the variant
    has (a reference to any other ``gpuwarden:`` record is untranslatable). An expression over
    gpuwarden's own services only (findings, analyzer, remediation) is the same on either
    fleet and comes back unchanged."""
    names = set(re.findall(_NAME, expr))
    if names and all(n.startswith(SERVICES) for n in names) and "gpuwarden:" not in expr:
        return expr
    if names & {n for n in names if n.startswith(SERVICES)}:
        raise Untranslatable("it joins gpuwarden's services' series with the exporter's")
    for rec in re.findall(r"\bgpuwarden:[a-z0-9_:]+", expr):
        if produced is not None and rec not in produced:
            raise Untranslatable(f"{rec} is not recorded from dcgm-exporter's series")
    out = _RANGE.sub(_range, expr)
    out = _INSTANT.sub(_instant, out)
    if re.search(_NAME, out.replace("gpuwarden_dcgm:", "")):
        raise Untranslatable(f"unsupported use of a series in {expr!r}")
    out = _RECORD.sub(RECORD_PREFIX, out)
    return relabel(out)


def relabel(text: str) -> str:
    """``node``/``uuid`` as label names (grouping, matchers, legends) -> dcgm's names."""
    text = re.sub(r"\{\{\s*(node|uuid)\s*\}\}", lambda m: "{{" + LABELS[m[1]] + "}}", text)
    return _LABEL_TOKEN.sub(lambda m: LABELS[m[1]], text)


def record_name(name: str) -> str:
    return _RECORD.sub(RECORD_PREFIX, name)


def with_node(expr: str) -> str:
    """An alert's expression with a ``node`` label copied from the host label, so the alert
    carries ``node`` as every gpuwarden alert does (remediation keys on it)."""
    return f'label_replace({expr.strip()}, "node", "$1", "{HOST_LABEL}", "(.*)")'
