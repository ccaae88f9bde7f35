"""Render samples as Prometheus text exposition (format 0.0.4), native and dcgm-compatible.

Sits between the collection loop and the HTTP server: a cycle's samples are rendered once
into bytes, and every scrape serves those bytes (collection is decoupled from scraping).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from exporter.catalog import (
    DCGM_DRIVER_LABEL,
    DCGM_LABELS,
    DCGM_LAST_XID,
    DCGM_LAST_XID_HELP,
    DCGM_MIG_LABELS,
    GPU_INFO,
    HOSTNAME_LABELS,
    DcgmField,
    MetricDef,
    Sample,
)
from exporter.catalog_dcgm import DEFAULT as DCGM_DEFAULT_GENERATION
from exporter.catalog_dcgm import DRIVER_LABEL, RENAMES, name_in
from exporter.dcgm_pods import dcgm_pods
from exporter.xid_messages import message as xid_message

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def escape_label(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def escape_help(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(v: float) -> str:
    v = float(v)
    if v != v:
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    if v.is_integer() and abs(v) < 1e15:
        return str(int(v))
    return repr(v)


def _prefix(name: str, labels: Iterable[tuple[str, str]]) -> str:
    """``name{labels} `` (the value follows); empty label values are omitted."""
    inner = ",".join(f'{k}="{escape_label(v)}"' for k, v in labels if v != "")
    return f"{name}{{{inner}}} " if inner else f"{name} "


def _series(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    return _prefix(name, labels) + format_value(value)


class Prefixes:
    """Rendered ``name{labels} `` per series, kept between cycles.

    A node's series are the same from cycle to cycle, and escaping labels was half the cost
    of a render. The cache is dropped whenever it outgrows twice the series of the last
    render, so label churn (job ids, a reset GPU) cannot grow it without bound.
    """

    def __init__(self) -> None:
        self._map: dict[tuple[str, tuple[str, ...]], str] = {}

    def get(self, metric: MetricDef, values: tuple[str, ...]) -> str:
        key = (metric.name, values)
        p = self._map.get(key)
        if p is None:
            p = self._map[key] = _prefix(metric.name, zip(metric.labels, values, strict=True))
        return p

    def trim(self, series: int) -> None:
        if len(self._map) > 2 * series + 64:
            self._map.clear()


def _header(name: str, help_: str, type_: str) -> list[str]:
    return [f"# HELP {name} {escape_help(help_)}", f"# TYPE {name} {type_}"]


def group(samples: Iterable[Sample]) -> dict[MetricDef, list[Sample]]:
    out: dict[MetricDef, list[Sample]] = {}
    for s in samples:
        out.setdefault(s.metric, []).append(s)
    return out


def render_native(
    grouped: dict[MetricDef, list[Sample]], prefixes: Prefixes | None = None
) -> list[str]:
    cache = prefixes or Prefixes()
    lines: list[str] = []
    for metric, samples in grouped.items():
        if metric.name.startswith("DCGM_"):
            continue
        lines += _header(metric.name, metric.help, metric.type)
        seen: set[tuple[str, ...]] = set()
        for s in samples:
            if s.label_values in seen:  # one series once, even if a source repeated it
                continue
            seen.add(s.label_values)
            lines.append(cache.get(metric, s.label_values) + format_value(s.value))
    return lines


def format_integer(v: float) -> str:
    """dcgm-exporter's int64 fields: no fraction (a scaled 1.98e9 Hz is ``1980``, not 1980.0)."""
    v = float(v)
    if v != v or math.isinf(v):
        return format_value(v)
    return str(math.floor(v + 1e-6))  # floor like DCGM's integer MiB; epsilon for 1e-6 scaling


def _identities(
    grouped: dict[MetricDef, list[Sample]], hostname_label: str,
    driver_label: str = DCGM_DRIVER_LABEL,
) -> dict[str, tuple[tuple[str, str], ...]]:  # fmt: skip
    """GPU index -> dcgm-exporter's identity labels, from gpuwarden_gpu_info."""
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    names = (*DCGM_LABELS[:-1], hostname_label, driver_label)
    for s in grouped.get(GPU_INFO, []):
        lab = s.labels
        vals = (
            lab["gpu"],
            lab["uuid"],
            lab["pci_bus_id"],
            f"nvidia{lab['gpu']}",
            lab["name"],
            lab["node"],
            lab["driver_version"],
        )
        out[lab["gpu"]] = tuple(zip(names, vals, strict=True))
    return out


_Key = tuple[str, str, str]  # GPU index, MIG GPU instance, MIG profile ("" for a whole GPU)


def _dcgm_values(field: DcgmField, samples: list[Sample], into: dict[_Key, float]) -> None:
    """Add one dcgm field's values per GPU (or MIG instance) into ``into``."""
    for s in samples:
        lab = s.labels
        if any(lab.get(k) != v for k, v in field.match):
            continue
        key = (lab["gpu"], lab.get("gpu_instance", ""), lab.get("profile", ""))
        into[key] = into.get(key, 0.0) + s.value * field.scale


def _labels(ids: dict[str, tuple[tuple[str, str], ...]], key: _Key) -> tuple[tuple[str, str], ...]:
    """dcgm-exporter's labels for a GPU, or for a MIG instance (GPU_I_PROFILE, GPU_I_ID after
    modelName, as its template puts them)."""
    base = ids[key[0]]
    if not key[1]:
        return base
    return (*base[:5], (DCGM_MIG_LABELS[0], key[2]), (DCGM_MIG_LABELS[1], key[1]), *base[5:])


def render_dcgm(
    grouped: dict[MetricDef, list[Sample]],
    last_xid: dict[str, int],
    hostname_label: str = "Hostname",
    pod_labels: bool = False,
    generation: str = DCGM_DEFAULT_GENERATION,
    virtual_gpus: bool = False,
) -> list[str]:
    """dcgm-exporter's names and labels, so community dashboards and alerts work unchanged.

    ``last_xid`` (GPU index -> last XID number) feeds DCGM_FI_DEV_XID_ERRORS, which
    dcgm-exporter defines as a latched "last value" gauge with ``err_code``/``err_msg``
    labels; the native counter stays the truth. ``hostname_label``: ``Hostname`` (dcgm-exporter
    3.x) or ``hostname`` (4.x). ``pod_labels``: pod/namespace/container of the allocation
    (gpuwarden_gpu_kubernetes_pod_info) on each allocated GPU's or MIG device's series.
    ``generation``: dcgm-exporter's naming generation (:mod:`exporter.catalog_dcgm`): the
    catalogue's 4.8 names, or 4.9's / 4.10's names and units. ``virtual_gpus``: with pod
    labels, one copy per pod of a shared GPU's series (:mod:`exporter.dcgm_pods`).
    """
    if hostname_label not in HOSTNAME_LABELS:
        raise ValueError(f"hostname label {hostname_label!r} is not one of {HOSTNAME_LABELS}")
    ids = _identities(grouped, hostname_label, DRIVER_LABEL[generation])
    pods = dcgm_pods(grouped if pod_labels else {}, virtual_gpus)
    fields: dict[str, tuple[DcgmField, str, dict[_Key, float]]] = {}
    for metric, samples in grouped.items():
        for field in metric.dcgm:
            help_ = field.help or f"{metric.help} (dcgm-exporter compatible)"
            entry = fields.setdefault(field.name, (field, help_, {}))
            _dcgm_values(field, samples, entry[2])
    lines: list[str] = []
    renames = RENAMES[generation]
    for legacy, (field, help_, values) in fields.items():
        name, r = name_in(generation, legacy), renames.get(legacy)
        rows = [
            (_labels(ids, k) + pod, own * (r.factor if r else 1.0))
            for k, v in values.items()
            if k[0] in ids
            for pod, own in pods.rows(legacy, k[:2], v)
        ]
        if not rows or name is None:
            continue
        integer = field.integer if r is None or r.integer is None else r.integer
        fmt = format_integer if integer else format_value
        lines += _header(name, help_ if r is None else _help(help_, r.unit), field.type)
        lines += [_prefix(name, labels) + fmt(v) for labels, v in rows]
    xids = [
        (ids[g] + pod, int(last_xid.get(g, 0)))
        for g in sorted(ids, key=_int_or_str)
        for pod, _ in pods.rows(DCGM_LAST_XID.name, (g, ""), 0.0)
    ]
    if xids:  # like dcgm-exporter: every GPU, 0 ("No Error") until its first XID
        name = name_in(generation, DCGM_LAST_XID.name) or DCGM_LAST_XID.name
        lines += _header(name, DCGM_LAST_XID_HELP, "gauge")
        lines += [
            _series(name, (*labels, ("err_code", str(x)), ("err_msg", xid_message(x))), x)
            for labels, x in xids
        ]
    return lines


def _help(help_: str, unit: str) -> str:
    """4.8's help text with its unit in parentheses replaced by the generation's."""
    if not unit:
        return help_
    base = help_.split(" (in ")[0].rstrip(".")
    return f"{base} (in {unit.replace('_', ' ')})."


def _int_or_str(v: str) -> tuple[int, str]:
    return (int(v), v) if v.isdigit() else (1 << 30, v)


def render(
    samples: Iterable[Sample],
    *,
    dcgm: bool = False,
    last_xid: dict[str, int] | None = None,
    prefixes: Prefixes | None = None,
    hostname_label: str = "Hostname",
    pod_labels: bool = False,
    dcgm_generation: str = DCGM_DEFAULT_GENERATION,
    virtual_gpus: bool = False,
) -> bytes:
    """The exposition of ``samples``; pass the same ``prefixes`` every cycle to reuse work."""
    grouped = group(samples)
    lines = render_native(grouped, prefixes)
    if prefixes is not None:
        prefixes.trim(sum(len(v) for v in grouped.values()))
    if dcgm:
        lines += render_dcgm(
            grouped, last_xid or {}, hostname_label, pod_labels, dcgm_generation, virtual_gpus
        )
    return ("\n".join(lines) + "\n").encode()
