"""PromQL over gpuwarden's series, rewritten for a fleet that runs a vendor's exporter instead.

One translator serves every exporter dialect; a :class:`Dialect` is the per-exporter table
(which vendor fields stand for each catalogue metric, the vendor's label names, its host label,
the prefix of the variant's recording rules). :mod:`dashboards.dcgm_translate` builds NVIDIA
dcgm-exporter's from the catalogue, :mod:`dashboards.amd_translate` AMD's Device Metrics
Exporter's from :mod:`exporter.catalog_amd`. The alert variants (``alerts/generate_*_rules.py``)
and the dashboard variants (``python -m dashboards``) are generated through :func:`translate`,
so the variants never drift from the native sources.

What cannot be said with a dialect's fields raises :class:`Untranslatable` with the reason (a
metric without a field, one field fed by two native metrics, a regex over a label a field pins),
and the caller leaves that rule or panel out and says so. Pure string functions; no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from exporter import catalog as c

LINEAR = ("rate", "irate", "increase", "delta", "idelta", "deriv", "avg_over_time",
          "max_over_time", "min_over_time", "sum_over_time", "last_over_time")  # fmt: skip
OTHER = ("changes", "resets", "count_over_time", "present_over_time", "absent_over_time")
_NAME = r"gpuwarden_[a-z0-9_]+"
_MATCHERS = r"(?:\{([^}]*)\})?"
_RANGE = re.compile(rf"\b({'|'.join(LINEAR + OTHER)})\(\s*({_NAME}){_MATCHERS}\[([^\]]+)\]\s*\)")
_INSTANT = re.compile(rf"\b({_NAME})(?![\w:\[(]){_MATCHERS}(?!\s*\[)")
_MATCHER = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*')
_RECORD = re.compile(r"\bgpuwarden:")
_PRINTF = re.compile(r'printf "([^"]*)"')
# series of gpuwarden's own services, not of the node agent: the same on any fleet
SERVICES = (
    c.FINDING.name,
    c.PREFIX + "analyzer_",
    c.PREFIX + "remediation_",
    c.PREFIX + "accounting_",  # failure accounting: from remediation's journal, any fleet
)


class Untranslatable(ValueError):
    """This expression needs series the dialect's exporter does not serve."""


class Field(Protocol):
    """One vendor series standing for (a part of) a catalogue metric (``DcgmField`` is one)."""

    @property
    def name(self) -> str: ...
    @property
    def scale(self) -> float: ...  # native value x scale = the vendor's unit
    @property
    def match(self) -> tuple[tuple[str, str], ...]: ...  # native labels this field pins
    @property
    def sum_over(self) -> tuple[str, ...]: ...  # native labels the vendor sums away


@dataclass(frozen=True)
class VendorField:
    """A :class:`Field` with what some exporters need beside it: ``select``, matchers on the
    vendor's own labels (``clock_type="system"``)."""

    name: str
    scale: float = 1.0
    match: tuple[tuple[str, str], ...] = ()
    sum_over: tuple[str, ...] = ()
    select: str = ""


@dataclass(frozen=True)
class Dialect:
    """One exporter's table. ``exporter``: its name in reasons ("dcgm-exporter"); ``short``:
    in "a label <short> splits into fields"; ``labels``: native label -> the vendor's;
    ``alert_labels``: (native, vendor) labels every alert gets copied from the vendor's, as
    every gpuwarden alert carries ``node`` (remediation keys on it)."""

    exporter: str
    short: str
    record_prefix: str
    host_label: str
    labels: Mapping[str, str]
    fields: Mapping[str, tuple[Field, ...]]
    alert_labels: tuple[tuple[str, str], ...]

    def shared(self) -> frozenset[str]:
        """Vendor fields several native metrics add into (dcgm's NVLink TX + RX)."""
        counts: dict[str, int] = {}
        for fields in self.fields.values():
            for f in fields:
                counts[f.name] = counts.get(f.name, 0) + 1
        return frozenset(n for n, k in counts.items() if k > 1)


def _fields(d: Dialect, name: str, matchers: str) -> tuple[list[Field], str]:
    """The vendor fields a native selector reads, and its matchers for them."""
    if not d.fields.get(name):
        raise Untranslatable(f"{name} has no {d.exporter} field")
    if any(f.name in d.shared() for f in d.fields[name]):
        raise Untranslatable(f"{name}: {d.exporter} sums it with another series")
    fields = list(d.fields[name])
    pinned = {f2[0] for f in fields for f2 in f.match}
    keep = []
    for label, op, value in _MATCHER.findall(matchers or ""):
        if label in pinned:
            if op != "=":
                raise Untranslatable(
                    f"{name}: {label}{op} over a label {d.short} splits into fields"
                )
            fields = [f for f in fields if (label, value) in f.match]
        elif any(label in f.sum_over for f in fields):
            raise Untranslatable(f"{name}: {d.exporter} sums {label} away")
        else:
            keep.append(f'{d.labels.get(label, label)}{op}"{value}"')
    if not fields:
        raise Untranslatable(f"{name}: no {d.exporter} field for {matchers}")
    return fields, ",".join(keep)


def _restore(expr: str, field: Field) -> str:
    """Put back the native labels the field pins (``error_type="uncorrected"``)."""
    for label, value in field.match:
        expr = f'label_replace({expr}, "{label}", "{value}", "", "")'
    return expr


def _union(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else "(" + " or ".join(parts) + ")"


def _number(x: float) -> str:
    """Shortest exact form (``1e-06``; ``0.0009765625``, which ``:g`` would round)."""
    return f"{x:g}" if float(f"{x:g}") == x else repr(x)


def _scaled(expr: str, field: Field, linear: bool = True) -> str:
    return f"({expr} / {_number(field.scale)})" if linear and field.scale != 1.0 else expr


def _selector(field: Field, sel: str) -> str:
    both = ",".join(s for s in (getattr(field, "select", ""), sel) if s)
    return f"{field.name}{{{both}}}" if both else field.name


def translate(expr: str, d: Dialect, produced: frozenset[str] | set[str] | None = None) -> str:
    """``expr`` over the dialect's series. ``produced``: the recording rules the variant has
    (a reference to any other ``gpuwarden:`` record is untranslatable). An expression over
    gpuwarden's own services only (findings, analyzer, remediation) is the same on any fleet
    and comes back unchanged."""
    names = set(re.findall(_NAME, expr))
    if names and all(n.startswith(SERVICES) for n in names) and "gpuwarden:" not in expr:
        return expr
    if names & {n for n in names if n.startswith(SERVICES)}:
        raise Untranslatable("it joins gpuwarden's services' series with the exporter's")
    for rec in re.findall(r"\bgpuwarden:[a-z0-9_:]+", expr):
        if produced is not None and rec not in produced:
            raise Untranslatable(f"{rec} is not recorded from {d.exporter}'s series")

    def _range(m: re.Match[str]) -> str:
        fn, name, matchers, rng = m[1], m[2], m[3], m[4]
        fields, sel = _fields(d, name, matchers)
        return _union([_restore(_scaled(f"{fn}({_selector(f, sel)}[{rng}])", f, fn in LINEAR), f)
                       for f in fields])  # fmt: skip

    def _instant(m: re.Match[str]) -> str:
        fields, sel = _fields(d, m[1], m[2])
        return _union([_restore(_scaled(_selector(f, sel), f), f) for f in fields])

    out = _RANGE.sub(_range, expr)
    out = _INSTANT.sub(_instant, out)
    if re.search(_NAME, out.replace(d.record_prefix, "")):
        raise Untranslatable(f"unsupported use of a series in {expr!r}")
    out = _RECORD.sub(d.record_prefix, out)
    return relabel(out, d)


def legend(text: str, d: Dialect) -> str:
    """A legend's ``{{label}}`` templates -> the dialect's names (its prose stays)."""
    keys = "|".join(sorted(d.labels, key=len, reverse=True))
    return re.sub(rf"\{{\{{\s*({keys})\s*\}}\}}", lambda m: "{{" + d.labels[m[1]] + "}}", text)


def relabel(text: str, d: Dialect) -> str:
    """Native label names (grouping, matchers, legends) -> the dialect's."""
    keys = "|".join(sorted(d.labels, key=len, reverse=True))
    text = legend(text, d)
    token = re.compile(rf"(?<![$\w.\"])({keys})\b(?!\s*\()")
    return token.sub(lambda m: d.labels[m[1]], text)


def record_name(name: str, d: Dialect) -> str:
    return _RECORD.sub(d.record_prefix, name)


def with_node(expr: str, d: Dialect) -> str:
    """An alert's expression with ``node`` (and the dialect's other alert labels) copied from
    the vendor's labels, so the alert carries them as every gpuwarden alert does."""
    out = expr.strip()
    for native, vendor in d.alert_labels:
        out = f'label_replace({out}, "{native}", "$1", "{vendor}", "(.*)")'
    return out


def annotation_queries(text: str, d: Dialect, produced: set[str]) -> str:
    """An annotation whose ``printf "<query>"`` reads gpuwarden's recordings, over the
    variant's recordings (their labels renamed); Untranslatable where the variant lacks one
    or the query reads a native series."""

    def _query(m: re.Match[str]) -> str:
        query = m[1]
        if re.search(_NAME, query):
            raise Untranslatable("its annotations query gpuwarden series")
        for rec in re.findall(r"\bgpuwarden:[a-z0-9_:]+", query):
            if rec not in produced:
                raise Untranslatable("its annotations query gpuwarden series")
        return f'printf "{relabel(record_name(query, d), d)}"'

    return _PRINTF.sub(_query, text)
