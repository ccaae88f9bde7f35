"""AMD's ROCm Device Metrics Exporter (DME) series, read as the catalogue's.

Edge of the analyzer (declarations, and pure decoding of what the queries return), beside
:mod:`.dcgm`. DME names each series after the lower-cased field enum, behind an optional
prefix (``amd_`` in its example config; any prefix, several in one fleet mid-change: each name
discovery finds is read), types every field a gauge, and names the GPU ``hostname`` +
``gpu_id`` (``serial_number`` and ``gpu_uuid`` beside them). :mod:`exporter.catalog_amd`
says which field stands for which catalogue series and in what unit; here each becomes one
plain :class:`~analyzer.sources.queries.Query`:

- temperatures, power, activity (% -> ratio), the system clock (MHz -> Hz) one to one; the
  PCIe speed (GT/s; MT/s where a DME reports those) as the generation it trains at;
- the ECC totals as the catalogue's ECC counter, each block's uncorrectable and deferred
  errors as ``gpu_ras_errors_total{block,error_type}`` (``umc`` is HBM), both read moved-only;
- ``gpu_xgmi_link_{tx,rx}{link_index}`` (accumulated KB) as XGMI bytes per link;
- violation residency as throttle reasons (``catalog_amd.VIOLATIONS``: PPT is the power cap,
  socket/HBM thermal the firmware's thermal management, VR thermal and PROCHOT the platform's):
  a reason is held at a step where its residency is 50 % or more of DME's last interval, or,
  on a DME without the percentages, where its accumulated counter rose within 90 s;
- ``gpu_afid_errors{afid_index,severity}``, whose value is an AFID of the GPU's *last* RAS
  event, decoded into :class:`~analyzer.window.AfidEvent` by :func:`last_afid_events`.

Semantics that differ from gpuwarden's own series: every counter is a gauge (read raw, as
the detectors read every counter); a GPU whose series vanish while its node's other GPUs
report is lost (as dcgm's, :func:`~.dcgm.vanished_as_lost`); DME's values come from a 15 s
cache and its health from a 30 s poll, so samples repeat; the AFID gauge keeps only the last
event: two events between scrapes lose the first, a repeat of one AFID list is invisible.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from analyzer.sources.dialects import AMD
from analyzer.sources.dialects.dcgm import _job
from analyzer.sources.dialects.identity import IDENTITY_LABELS, NodeMap, raw_identity
from analyzer.sources.queries import Query
from analyzer.window import AfidEvent
from exporter import catalog
from exporter import catalog_amd as dme

# DME always names its host (hostname is mandatory): instance is never read; the partition
# labels tell a partition's physical GPU (physical_gpu)
_BY = (*(x for x in IDENTITY_LABELS if x != "instance"), dme.GPU_ID, dme.PARTITION_ID,
       dme.PARTITION_TYPE)  # fmt: skip
HELD_PERCENT = 50.0  # residency share of DME's interval that counts as "held at this step"
VIOLATION_RANGE = "90s"  # six DME cache refreshes of 15 s
_PREFIX = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*_")


@dataclass(frozen=True, eq=False)
class AmdRelabel:
    """One DME field's answer -> the catalogue's labels (hashable by identity)."""

    node_map: NodeMap = field(default_factory=NodeMap)
    fixed: tuple[tuple[str, str], ...] = ()  # native label values this field stands for
    renames: tuple[tuple[str, str], ...] = ()  # (DME label, catalogue label)

    def __call__(self, labels: dict[str, str]) -> dict[str, str]:
        out = {"node": self.node_map(raw_identity(labels)), "gpu": physical_gpu(labels)}
        for src, dst in self.renames:
            out[dst] = _job(labels) if src == dme.POD else labels.get(src, "")
        out.update(self.fixed)
        return out


def physical_gpu(labels: dict[str, str]) -> str:
    """The physical GPU a DME series is about: its ``gpu_id`` on an unpartitioned GPU; on a
    compute-partitioned one (CPX/DPX/QPX, where every partition is a ``gpu_id`` of its own),
    the physical GPU's index, ``gpu_id`` // partitions per GPU, read from partition 0 (which
    alone carries the physical sensors, ECC and RAS); "" (not placed) for the other partitions.
    Assumes amdgpu numbers a GPU's partitions consecutively, as ``amd-smi list`` shows them."""
    gpu = labels.get(dme.GPU_ID, "")
    per = dme.PARTITIONS_PER_GPU.get(labels.get(dme.PARTITION_TYPE, "").lower(), 1)
    if per == 1 or not gpu.isdigit():
        return gpu
    if labels.get(dme.PARTITION_ID, "0") not in ("0", "NA", ""):
        return ""
    return str(int(gpu) // per)


@functools.cache
def _by_length() -> tuple[str, ...]:
    return tuple(sorted(dme.read_fields(), key=len, reverse=True))


def split(name: str) -> tuple[str, str] | None:
    """``amd_gpu_health`` -> ``("amd_", "gpu_health")``; None for a name that is not a DME
    field the reader knows (gpuwarden's and dcgm's own names never are)."""
    if name.startswith((catalog.PREFIX, "DCGM_")):
        return None
    for f in _by_length():
        if name.endswith(f):
            prefix = name[: -len(f)]
            if not prefix or _PREFIX.fullmatch(prefix):
                return prefix, f
    return None


def discovery_regex() -> str:
    """Every field the reader reads, behind any prefix (for the discovery query)."""
    return f"({_PREFIX.pattern})?({'|'.join(sorted(dme.read_fields()))})"


def is_dme(names: Iterable[str]) -> bool:
    """Whether these names say DME serves here (one of its marker fields, any prefix)."""
    return any((s := split(n)) is not None and s[1] in dme.MARKERS for n in names)


def _names(present: frozenset[str] | None, f: str) -> list[str]:
    """The names field ``f`` is served under (``present`` None: unprefixed)."""
    if present is None:
        return [f]
    return sorted(n for n in present if (s := split(n)) is not None and s[1] == f)


def _born_late(present: frozenset[str] | None, f: str) -> list[str]:
    """The names field ``f`` is served under, and would be behind every prefix a DME here
    uses: DME serves ``gpu_afid_errors`` only from a GPU's first RAS event on, so a discovery
    made before it would otherwise never read it (an absent name costs an empty answer)."""
    names = _names(present, f)
    if present is None:
        return names
    prefixes = {s[0] for n in present if (s := split(n)) is not None}
    return sorted({*names, *(p + f for p in prefixes)})


def _presence(present: frozenset[str] | None, match: str = "") -> str:
    """One expression that is 1 for every GPU some presence field reports."""
    sel = f"{{{match}}}" if match else ""
    names = [n for f in dme.PRESENCE for n in _names(present, f)]
    return " or ".join(f"({n}{sel} * 0 + 1)" for n in names)


def queries(node_map: NodeMap | None = None, present: frozenset[str] | None = None
            ) -> tuple[Query, ...]:  # fmt: skip
    """The DME reading of every catalogue series the analyzer reads; ``present``: the names the
    Prometheus holds (None: every field, unprefixed), so absent fields cost nothing."""
    nm = node_map or NodeMap()
    plain = AmdRelabel(nm)
    out: list[Query] = []
    here = _presence(present)
    if here:
        out += [
            Query(catalog.GPU_UP, keep=("node", "gpu"), dialect=AMD, source=here, by=_BY,
                  relabel=plain, label="presence"),
            Query(catalog.GPU_INFO, keep=("node", "gpu", "name"), dialect=AMD, source=here,
                  by=(*_BY, dme.MODEL), relabel=AmdRelabel(nm, renames=((dme.MODEL, "name"),)),
                  label="presence"),
            Query(catalog.GPU_ALLOCATION_INFO, keep=("node", "gpu", "job_id"), dialect=AMD,
                  source=_presence(present, f'{dme.JOB_ID}!=""'), by=(*_BY, dme.JOB_ID),
                  relabel=AmdRelabel(nm, renames=((dme.JOB_ID, "job_id"),)), label="job_id"),
            Query(catalog.GPU_ALLOCATION_INFO, keep=("node", "gpu", "job_id"),
                  dialect=AMD + "/pod", source=_presence(present, f'{dme.POD}!=""'),
                  by=(*_BY, dme.POD, dme.NAMESPACE),
                  relabel=AmdRelabel(nm, renames=((dme.POD, "job_id"),)), label="pod"),
        ]  # fmt: skip
    out += _gauges(present, plain)
    out += _counters(present, nm)
    for metric_name, f in dme.XGMI.items():
        for n in _names(present, f):
            out.append(Query(catalog.by_name(metric_name), keep=("node", "gpu", "link"), dialect=AMD, source=n,
                             by=(*_BY, dme.LINK_INDEX), divide=1.0 / dme.XGMI_KB,
                             relabel=AmdRelabel(nm, renames=((dme.LINK_INDEX, "link"),))))  # fmt: skip
    for n in _born_late(present, dme.AFID_ERRORS):
        out.append(Query(catalog.GPU_RAS_EVENTS, keep=("node", "gpu", "afid", "severity"),
                         dialect=AMD, source=n,
                         by=(*_BY, dme.AFID_INDEX, dme.AFID_SEVERITY), anchored=True,
                         relabel=AmdRelabel(nm, renames=((dme.AFID_INDEX, "afid"),
                                                         (dme.AFID_SEVERITY, "severity")))))  # fmt: skip
    reasons = violation_source(present)
    if reasons:
        out.append(Query(catalog.GPU_THROTTLE, keep=("node", "gpu", "reason"), dialect=AMD,
                         source=reasons, label="violation residency", by=(*_BY, "reason"),
                         relabel=AmdRelabel(nm, renames=(("reason", "reason"),))))  # fmt: skip
    return tuple(out)


def _gauges(present: frozenset[str] | None, plain: AmdRelabel) -> list[Query]:
    out = []
    for metric_name, fields in dme.GAUGES.items():
        metric = catalog.by_name(metric_name)
        # the fields of one series in order of preference: a GPU serving several is read in
        # the first (``or`` keeps the left side's series)
        parts = [(f, n) for f in fields for n in _names(present, f.name)]
        if not parts:
            continue
        src = " or ".join(f"{n}{{{f.match}}}" if f.match else n for f, n in parts)
        out.append(Query(metric, keep=("node", "gpu"), dialect=AMD, source=src, by=_BY,
                         divide=parts[0][0].divide, relabel=plain,
                         label="+".join(n for _, n in parts)))  # fmt: skip
    for metric_name, f in dme.PCIE_SPEED.items():
        for n in _names(present, f):
            # GT/s (MT/s where a DME reports those: above 1000) -> the generation
            gen = f"round(log2({n} / (1000 ^ ({n} > bool 1000)))) > 0"
            out.append(Query(catalog.by_name(metric_name), keep=("node", "gpu"), dialect=AMD,
                             source=gen, by=_BY, relabel=plain, label=n))  # fmt: skip
    return out


def _counters(present: frozenset[str] | None, nm: NodeMap) -> list[Query]:
    """ECC totals and each block's errors, moved-only: only series that changed are read."""
    out = []
    for error_type, f in dme.ECC_TOTALS.items():
        fixed = (("error_type", error_type), ("counter_type", "volatile"))
        for n in _names(present, f):
            out.append(Query(catalog.GPU_ECC_ERRORS, keep=("node", "gpu", *dict(fixed)),
                             dialect=AMD, source=n, by=_BY, relabel=AmdRelabel(nm, fixed=fixed),
                             moved_only=True))  # fmt: skip
    for block in catalog.RAS_BLOCKS:
        for error_type in dme.RAS_READ:
            fixed = (("block", block), ("error_type", error_type))
            for n in _names(present, dme.ras_field(block, error_type)):
                out.append(Query(catalog.GPU_RAS_ERRORS, keep=("node", "gpu", "block",
                                                               "error_type"),
                                 dialect=AMD, source=n, by=_BY,
                                 relabel=AmdRelabel(nm, fixed=fixed), moved_only=True))  # fmt: skip
    return out


def violation_source(present: frozenset[str] | None = None) -> str:
    """One PromQL expression of the throttle reasons DME's violation residency says are held:
    per (GPU, ``reason``) a 1 where held, and per field a presence row without ``reason`` (so
    a GPU that serves residency reads its absent reasons as 0). Each part carries its own
    ``dme_field`` label, so the reader's ``max by`` merges causes that share a reason. "" when
    no residency field is present."""
    parts = []
    for cause, reason in dme.VIOLATIONS.items():
        acc, pct = dme.violation_fields(cause)
        pcts = _names(present, pct)
        for n in pcts:
            parts.append(_tag(f"{n} * 0", n))
            parts.append(_tag(_reason(f"({n} >= {HELD_PERCENT:g}) * 0 + 1", reason), n))
        if pcts:
            continue  # the share says more than "the counter moved"
        for n in _names(present, acc):
            parts.append(_tag(f"{n} * 0", n))
            held = f"(increase({n}[{VIOLATION_RANGE}]) > 0) * 0 + 1"
            parts.append(_tag(_reason(held, reason), n))
    return " or ".join(parts)


def _reason(expr: str, reason: str) -> str:
    return f'label_replace({expr}, "reason", "{reason}", "", "")'


def _tag(expr: str, name: str) -> str:
    return f'label_replace({expr}, "dme_field", "{name}", "", "")'


def last_afid_events(
    vals: np.ndarray,
    anchor: np.ndarray,
    node_ix: np.ndarray,
    gpu_ix: np.ndarray,
    severity: np.ndarray,
    grid: np.ndarray,
    present: np.ndarray,
) -> list[AfidEvent]:
    """AFID events from DME's last-event gauge: rows are (GPU, severity, afid_index), the
    value the AFID. Per GPU, the list at each step is its rows' (index, severity, AFID); a
    change of the list to a non-empty one is one RAS event, each AFID in it one
    :class:`AfidEvent` (``last_only``). The first sample compares with the value before the
    window (``anchor``) or, for rows born while the node reported, with no event."""
    out: list[AfidEvent] = []
    by_gpu: dict[tuple[int, int], list[int]] = {}
    for r in range(len(vals)):
        if gpu_ix[r] >= 0:
            by_gpu.setdefault((int(node_ix[r]), int(gpu_ix[r])), []).append(r)
    T = vals.shape[1] if vals.ndim == 2 else 0
    for (n, g), rows in by_gpu.items():
        sub = vals[rows]
        if np.isnan(sub).all():
            continue
        seen = ~np.isnan(sub).all(axis=0)
        first = int(np.argmax(seen))
        prev: frozenset[tuple[int, str, int]] | None = _list(anchor[rows], severity[rows], rows)
        if not prev and np.isnan(anchor[rows]).all() and not (first > 0 and present[first - 1, n]):
            prev = None  # nothing known before: the first list is a baseline
        for t in range(first, T):
            if not seen[t]:
                continue
            now = _list(sub[:, t], severity[rows], rows)
            if prev is not None and now and now != prev:
                out += [AfidEvent(float(grid[t]), n, g, afid, sev, last_only=True)
                        for _, sev, afid in sorted(now)]  # fmt: skip
            prev = now
    return sorted(out, key=lambda e: e.t)


def _list(col: np.ndarray, severity: np.ndarray, rows: list[int]
          ) -> frozenset[tuple[int, str, int]]:  # fmt: skip
    return frozenset((r, str(s), int(v)) for r, s, v in zip(rows, severity, col, strict=True)
                     if not np.isnan(v))  # fmt: skip
