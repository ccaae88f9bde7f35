"""NVIDIA dcgm-exporter's series, read as the catalogue's.

Edge of the analyzer (declarations, and pure decoding of what the queries return). For every
catalogue metric a detector reads and ``exporter.catalog`` maps to a dcgm-exporter field (its
``dcgm`` entries, the same table ``--compat dcgm`` renders from), one plain
:class:`~analyzer.sources.queries.Query` reads the field, divides by the field's ``scale``
into the catalogue's unit (MHz -> Hz, % -> ratio), and relabels it: ``gpu`` stays, the node
comes from :mod:`.identity`, a field that stands for one value of a native label (ECC
``error_type``/``counter_type``) carries that value, and a per-GPU total over NVLink links is
placed on link 0 and reported as a GPU-level signal (:data:`REDUCED`).

Semantics that differ from gpuwarden's own series:

- ``DCGM_FI_DEV_XID_ERRORS`` is a gauge holding the last XID code, not a counter: a change of
  value (or a series born non-zero while its node reported) is one event of that code
  (:func:`last_xid_events`); a repeat of the same code changes nothing and is invisible.
- there is no ``gpu_up``: a GPU reports while any of :data:`catalog.DCGM_PRESENCE_FIELDS`
  does, and one whose series vanish while its node's other GPUs still report is lost
  (:func:`vanished_as_lost`: ``gpu_up`` 0).
- counters dcgm-exporter types as gauges (ECC totals, remapped rows) are read raw, as the
  detectors read every counter: increases, resets absorbed.
- dcgm collects every 30 s by default while Prometheus may scrape every 15 s: samples repeat.
  No detector reads a repeat as "flat" evidence; increases of repeated values are 0.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from analyzer.sources.dialects import DCGM
from analyzer.sources.dialects.generations import (
    GENERATIONS,
    generation_of,
    names_of,
    names_of_field,
)
from analyzer.sources.dialects.identity import IDENTITY_LABELS, NodeMap, raw_identity
from analyzer.sources.queries import QUERIES, Query
from analyzer.window import XidEvent
from exporter import catalog, catalog_dcgm

# read from gpuwarden's exporter only: dcgm-exporter's per-instance series (GPU_I_ID,
# GPU_I_PROFILE on a MIG GPU's profiling fields) are not read yet (docs/partitions.md)
NATIVE_ONLY = frozenset({catalog.GPU_MIG_GRAPHICS_ACTIVE})
# families dcgm can only show per GPU, and what that costs a finding
REDUCED: Mapping[str, str] = {
    catalog.NVLINK_ERRORS.name: "dcgm-exporter sums NVLink errors over the GPU's links:"
    " localized to the GPU, not to a link",
    catalog.GPU_THROTTLE.name: "dcgm-exporter's clock-event reasons: the bitmask is sampled"
    " every collect (30 s); DCGM_EXP_CLOCK_EVENTS_COUNT holds a reason until it leaves its"
    " window (5 min by default); the violation counters say power or thermal, not hardware"
    " or software",
}
_BY = (*IDENTITY_LABELS, "gpu")
# dcgm-exporter names its host in every series (unless started with --no-hostname): then
# Prometheus's instance label is not read (a third of each answer's bytes)
_BY_HOSTNAME = tuple(x for x in _BY if x != "instance")


@dataclass(frozen=True, eq=False)
class DcgmRelabel:
    """One dcgm field's answer -> the catalogue's labels (hashable by identity)."""

    node_map: NodeMap = field(default_factory=NodeMap)
    fixed: tuple[tuple[str, str], ...] = ()  # native label values this field stands for
    renames: tuple[tuple[str, str], ...] = ()  # (dcgm label, catalogue label)

    def __call__(self, labels: dict[str, str]) -> dict[str, str]:
        out = {"node": self.node_map(raw_identity(labels)), "gpu": labels.get("gpu", "")}
        for src, dst in self.renames:
            v = labels.get(src, "")
            if src == "pod":
                v = _job(labels)
            elif src == catalog.DCGM_CLOCK_EVENT_LABEL:
                v = catalog.DCGM_CLOCK_EVENT_REASONS.get(v, "")
            out[dst] = v
        out.update(self.fixed)
        return out


# a ReplicaSet's pod: ``<deployment>-<pod-template-hash>-<5 random>``, both drawn from
# Kubernetes' safe alphabet (k8s.io/apimachinery/pkg/util/rand: no vowels, no 0 1 3)
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_REPLICA = re.compile(rf"-{_SAFE}{{6,10}}-{_SAFE}{{5}}$")


def _job(labels: Mapping[str, str]) -> str:
    """A Kubernetes pod's job: ``namespace/pod`` without the rank suffix a training operator
    adds (``-worker-3``, ``-launcher``, ``-7``) or the ReplicaSet hash and random suffix of a
    Deployment's pod (``cuda-75454ffb9f-8ljq7``: ``cuda``), so that a job's pods are one
    job's peers."""
    pod = labels.get("pod", "")
    if not pod:
        return ""
    base = _REPLICA.sub("", pod)
    base = re.sub(r"(-(worker|master|launcher|chief|ps|evaluator))?(-\d+)?$", "", base)
    return f"{labels.get('namespace', '')}/{base or pod}"


def _presence(name: str, extra: str = "") -> str:
    return f"{name}{{{extra}}} * 0 + 1" if extra else f"{name} * 0 + 1"


def queries(node_map: NodeMap | None = None, present: frozenset[str] | None = None,
            hostname: bool = False) -> tuple[Query, ...]:  # fmt: skip
    """The dcgm-exporter reading of every catalogue series the analyzer reads; ``present``:
    the dcgm names the Prometheus holds (None: every one), so absent fields cost nothing;
    ``hostname``: every dcgm series names its host (``instance`` is then not read).
    Counters the native reader reads moved-only (ECC, NVLink errors) are read moved-only
    here too: only the series that changed within the window."""
    nm = node_map or NodeMap()
    by = _BY_HOSTNAME if hostname else _BY
    plain = DcgmRelabel(nm)
    out: list[Query] = []
    # one field every GPU reports stands for its presence (each one more costs a series/GPU),
    # one per naming generation present: each node answers in the names it serves
    for seen in presence_names(present):
        out += [
            Query(catalog.GPU_UP, keep=("node", "gpu"), dialect=DCGM, source=_presence(seen),
                  by=by, relabel=plain),
            Query(catalog.GPU_INFO, keep=("node", "gpu", "name"), dialect=DCGM,
                  source=_presence(seen), by=(*by, "modelName"),
                  relabel=DcgmRelabel(nm, renames=(("modelName", "name"),))),
            Query(catalog.GPU_ALLOCATION_INFO, keep=("node", "gpu", "job_id"), dialect=DCGM,
                  source=_presence(seen, f'{catalog.DCGM_JOB_LABEL}!=""'),
                  by=(*by, catalog.DCGM_JOB_LABEL),
                  relabel=DcgmRelabel(nm, renames=((catalog.DCGM_JOB_LABEL, "job_id"),))),
            Query(catalog.GPU_ALLOCATION_INFO, keep=("node", "gpu", "job_id"),
                  dialect=DCGM + "/pod", source=_presence(seen, 'pod!=""'),
                  by=(*by, "pod", "namespace"),
                  relabel=DcgmRelabel(nm, renames=(("pod", "job_id"),))),
        ]  # fmt: skip
    for xid in names_of_field(catalog.DCGM_LAST_XID.name):
        if present is None or xid in present:
            out.append(Query(catalog.DCGM_LAST_XID, keep=("node", "gpu"), dialect=DCGM,
                             source=xid, by=by, relabel=plain, anchored=True))  # fmt: skip
    reasons = clock_reasons_source(present)
    if reasons:
        out.append(Query(catalog.GPU_THROTTLE, keep=("node", "gpu", "reason"), dialect=DCGM,
                         source=reasons, label="clock-event reasons",
                         by=(*by, catalog.DCGM_CLOCK_EVENT_LABEL),
                         relabel=DcgmRelabel(nm, renames=((catalog.DCGM_CLOCK_EVENT_LABEL,
                                                           "reason"),))))  # fmt: skip
    for q in QUERIES:
        if q.dialect or q.metric in NATIVE_ONLY:
            continue
        for f in q.metric.dcgm:
            if f.sum_over not in ((), ("link",)):
                continue
            fixed = f.match + ((("link", "0"),) if f.sum_over else ())
            keep = tuple(x for x in q.labels if x in ("node", "gpu") or x in dict(fixed))
            for name, divide in names_of(f):
                if present is not None and name not in present:
                    continue
                out.append(Query(q.metric, keep=keep, dialect=DCGM, source=name, by=by,
                                 divide=divide, relabel=DcgmRelabel(nm, fixed=fixed),
                                 moved_only=q.moved_only))  # fmt: skip
    return tuple(out)


# The clock-event reasons bitmask (DCGM field 112): DCGM's header names it
# DCGM_FI_DEV_CLOCKS_EVENT_REASONS, older releases DCGM_FI_DEV_CLOCK_THROTTLE_REASONS
# (fixtures/dcgm/dcgm-4.6.1-field-names.tsv); its bits are NVML's nvmlClocksEventReason*
# (catalog.THROTTLE_REASONS: 0x04 SW power cap, 0x08 HW slowdown, 0x20 SW thermal, 0x40 HW
# thermal, 0x80 HW power brake, ...), sampled at each collect.
BITMASKS = tuple(f.name for f in catalog.DCGM_CLOCK_REASON_BITMASKS)
# DCGM's violation counters: cumulative time the GPU was held below its application clocks by
# power / by thermal limits (NVML nvmlPerfPolicyType_t, violationTime; DCGM's header says ns,
# older headers and dcgm-exporter 3.x's CSVs say us). A counter that moved within
# VIOLATION_RANGE reads as that reason held: whatever the unit, never a fraction of it. They
# say power or thermal only, not hardware or software: read as the software reasons
# (sw_power_cap: a cap, normal; sw_thermal_slowdown: the throttling detector notifies), so a
# violation alone never cordons; the bitmask, where served, names the hardware reasons.
VIOLATIONS: Mapping[str, str] = {  # dcgm field -> dcgm-exporter's clock_event name
    catalog.dcgm_violation("power"): "power_cap",
    catalog.dcgm_violation("thermal"): "sw_thermal",
}
VIOLATION_RANGE = "90s"  # three dcgm collect intervals of 30 s


def clock_reason_names() -> frozenset[str]:
    """Every dcgm name the clock-reasons reading knows (for discovery)."""
    return frozenset({*BITMASKS, *VIOLATIONS, catalog.DCGM_CLOCK_EVENTS_COUNT.name})


def clock_reasons_source(present: frozenset[str] | None = None) -> str:
    """One PromQL expression of every clock-event reason the present fields say is held, one
    series per (GPU, ``clock_event``) with value 1 (only reasons held: a healthy GPU costs one
    presence series per field, ``clock_event`` empty, which tells that the GPU serves reasons,
    so its absent ones read 0). Each field's part carries its own ``dcgm_field`` label so the
    reader's ``max by`` merges them (a reason any field says is held is held), where ``or``
    alone would keep only the first. "" when no such field is present."""
    have = [x for x in sorted(clock_reason_names()) if present is None or x in present]
    parts = []
    for name in have:
        if name == catalog.DCGM_CLOCK_EVENTS_COUNT.name:
            # dcgm-exporter's per-reason count within its window (5 min by default): held
            # while reported within it; 0 rows stand for the GPU's presence
            parts.append(_tag(f"{name} > bool 0", name))
            continue
        parts.append(_tag(f"{name} * 0", name))  # presence, clock_event ""
        if name in VIOLATIONS:
            held = f"(increase({name}[{VIOLATION_RANGE}]) > 0) * 0 + 1"
            parts.append(_tag(_event(held, VIOLATIONS[name]), name))
            continue
        for reason, bit in catalog.THROTTLE_REASONS.items():
            held = f"({name} % {2 * bit} >= bool {bit}) == 1"
            parts.append(_tag(_event(held, _EVENT_NAME[reason]), name))
    return " or ".join(parts)


_EVENT_NAME = {v: k for k, v in catalog.DCGM_CLOCK_EVENT_REASONS.items()}


def _event(expr: str, event: str) -> str:
    return f'label_replace({expr}, "{catalog.DCGM_CLOCK_EVENT_LABEL}", "{event}", "", "")'


def _tag(expr: str, name: str) -> str:
    return f'label_replace({expr}, "dcgm_field", "{name}", "", "")'


def presence_names(present: frozenset[str] | None = None) -> tuple[str, ...]:
    """Per naming generation present, the first of its presence fields the Prometheus holds
    (``present`` None: every generation's first); generations that name it alike share it."""
    out: list[str] = []
    for gen in GENERATIONS:
        names = [catalog_dcgm.name_in(gen, x) for x in catalog.DCGM_PRESENCE_FIELDS]
        at = [x for x in names if x and (present is None or x in present)]
        if at and at[0] not in out:
            out.append(at[0])
    return tuple(out) or (catalog.DCGM_PRESENCE_FIELDS[0],)


def generation_of_query(q: Query) -> str:
    """The naming generation of the dcgm name a dialect query reads."""
    return generation_of(re.split(r"[\s{]", q.source, maxsplit=1)[0])


def field_of(q: Query) -> catalog.DcgmField | None:
    """The catalogue's dcgm field a dialect query reads (None for the synthesized ones)."""
    for f in q.metric.dcgm:
        if q.source in dict(names_of(f)):
            return f
    return None


def last_xid_events(
    vals: np.ndarray,
    anchor: np.ndarray,
    node_ix: np.ndarray,
    gpu_ix: np.ndarray,
    grid: np.ndarray,
    present: np.ndarray,
) -> list[XidEvent]:
    """XID events from last-XID gauge rows (one per GPU): each change to a non-zero code is
    one event of that code; the first sample counts against the value before the window
    (``anchor``) or, for a series born while its node reported, against 0 ("No Error").
    A drop to 0 is an exporter restart, not an event."""
    out: list[XidEvent] = []
    for r in range(len(vals)):
        row = vals[r]
        ok = np.flatnonzero(~np.isnan(row))
        if not len(ok) or gpu_ix[r] < 0:
            continue
        prev = anchor[r]
        if np.isnan(prev) and ok[0] > 0 and present[ok[0] - 1, node_ix[r]]:
            prev = 0.0
        v = row[ok]
        before = np.concatenate([[prev], v[:-1]])
        with np.errstate(invalid="ignore"):
            hit = (v != before) & (v > 0) & ~np.isnan(before)
        for i in np.flatnonzero(hit):
            out.append(XidEvent(float(grid[ok[i]]), int(node_ix[r]), int(gpu_ix[r]), int(v[i])))
    return out


def vanished_as_lost(up: np.ndarray, nodes: np.ndarray, min_points: int = 2) -> None:
    """On the dcgm nodes ``nodes`` of ``up`` (T, nodes, gpus): a GPU that reported earlier in
    the window and is silent while another GPU of its node reports, for ``min_points`` grid
    points in a row or more, is lost from its first silent point (``gpu_up`` 0, in place).
    A whole node gone quiet stays a gap (the missing detector's node_missing)."""
    if not len(nodes):
        return
    sub = up[:, nodes]
    seen = ~np.isnan(sub)
    node_on = seen.any(axis=2, keepdims=True)
    was = np.maximum.accumulate(seen, axis=0)
    gone = ~seen & node_on & was
    run = counter_runs(gone)
    lost = gone & (run >= min_points)
    # a silent run counts from its first point once it is long enough
    for _ in range(min_points - 1):
        lost[:-1] |= lost[1:] & gone[:-1]
    sub[lost] = 0.0
    up[:, nodes] = sub


def counter_runs(a: np.ndarray) -> np.ndarray:
    """Along axis 0: the length of the run of True that each True element ends."""
    out = np.zeros(a.shape, dtype=np.int64)
    run = np.zeros(a.shape[1:], dtype=np.int64)
    for t in range(a.shape[0]):
        run = np.where(a[t], run + 1, 0)
        out[t] = run
    return out
