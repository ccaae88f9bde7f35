"""Labelled series -> dense :class:`Window` arrays. Shared by the Prometheus and scrape sources.

Pure: takes series already on a time grid (index arrays + values) and places each in the
array shape of docs/contracts.md, decoding XID counter increases into events and the
allocation info into the job map. Unknown metrics and malformed labels are skipped and
counted, never fatal.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyzer.sources import instances
from analyzer.sources.counters import counter_events, node_presence
from analyzer.window import (
    ECC_COUNTER_TYPES,
    ECC_ERROR_TYPES,
    RAS_BLOCKS,
    RAS_ERROR_TYPES,
    REMAP_KINDS,
    THROTTLE_REASONS,
    AfidEvent,
    InstanceInfo,
    Window,
    XidEvent,
)
from common import fabric
from exporter import catalog, catalog_specs

NVLINKS = 18
_GPU_FAMILY_AXES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    catalog.GPU_ECC_ERRORS.name: (
        ("error_type", ECC_ERROR_TYPES),
        ("counter_type", ECC_COUNTER_TYPES),
    ),
    catalog.GPU_THROTTLE.name: (("reason", THROTTLE_REASONS),),
    catalog.GPU_REMAPPED_ROWS.name: (("kind", REMAP_KINDS),),
    catalog.NVLINK_ERRORS.name: (("error_type", catalog.NVLINK_ERROR_TYPES),),
    catalog.GPU_FABRIC_HEALTH.name: (("check", catalog.FABRIC_HEALTH_CHECKS),),
    catalog.GPU_RAS_ERRORS.name: (("block", RAS_BLOCKS), ("error_type", RAS_ERROR_TYPES)),
}
# node-level families with one fixed axis: (T, nodes, len(values))
NODE_FAMILY_AXES: dict[str, tuple[str, tuple[str, ...]]] = {
    catalog.FABRIC_SERVICE_UP.name: ("service", catalog.FABRIC_SERVICES),
}
# node-level families without an axis: (T, nodes); their other labels are merged by max
NODE_SCALARS = frozenset({catalog.FABRIC_IMEX_READY.name})
_IB_COUNTER_FAMILIES = (
    catalog.IB_COUNTER.name,
    catalog.IB_HW_COUNTER.name,
    catalog.ROCE_PFC_PAUSE_SECONDS.name,  # as "<direction>_prio<N>_pause_seconds"
    catalog.ROCE_PFC_STORM_EVENTS.name,  # as "tx_pause_storm_<level>_events"
)


def ib_counter_name(metric: str, labels: Mapping[str, str]) -> str:
    """The key of a per-port counter series in ``Window.ib_counters``: the sysfs file name of
    the InfiniBand families, a name of the ethtool statistic's shape for the RoCE PFC ones
    (seconds, not the driver's microseconds); "" when a label is missing."""
    if metric == catalog.ROCE_PFC_PAUSE_SECONDS.name:
        d, p = labels.get("direction", ""), labels.get("priority", "")
        return f"{d}_prio{p}_pause_seconds" if d and p else ""
    if metric == catalog.ROCE_PFC_STORM_EVENTS.name:
        level = labels.get("level", "")
        return f"tx_pause_storm_{level}_events" if level else ""
    return labels.get("counter", "")


@dataclass(frozen=True)
class RawSeries:
    name: str
    labels: Mapping[str, str]
    index: np.ndarray  # int positions on the grid
    values: np.ndarray  # float values


@dataclass
class BuildReport:
    series: int = 0
    skipped: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    def skip(self, why: str) -> None:
        self.skipped += 1
        self.reasons[why] = self.reasons.get(why, 0) + 1


def _int(v: str | None) -> int | None:
    try:
        return int(v) if v is not None else None
    except ValueError:
        return None


def build_window(
    series: Iterable[RawSeries],
    grid: np.ndarray,
    step: float,
    leaf_of_name: Mapping[str, str] | None = None,
    report: BuildReport | None = None,
) -> Window:
    rep = report if report is not None else BuildReport()
    items = [s for s in series if s.labels.get("node")]
    # the GPUs' fabric info (cluster UUID + clique id, now): the nodes' NVLink domains
    info = [s for s in items if s.name == catalog.GPU_FABRIC_INFO.name]
    items = [s for s in items if s.name != catalog.GPU_FABRIC_INFO.name]
    nodes = tuple(sorted({s.labels["node"] for s in items}))
    T = len(grid)
    if not nodes or T == 0:
        return Window(t=np.asarray(grid, dtype=float), nodes=(), metrics={}, step=step)
    node_ix = {n: i for i, n in enumerate(nodes)}
    ports = tuple(
        sorted(
            {
                f"{s.labels['device']}/{s.labels['port']}"
                for s in items
                if "device" in s.labels and "port" in s.labels
            }
        )
    )
    port_ix = {p: i for i, p in enumerate(ports)}
    mounts = tuple(sorted({s.labels["mount"] for s in items if s.labels.get("mount")}))
    mount_ix = {m: i for i, m in enumerate(mounts)}
    gpus = max([g + 1 for s in items if (g := _int(s.labels.get("gpu"))) is not None] + [8])
    links = max([k + 1 for s in items if (k := _int(s.labels.get("link"))) is not None] + [NVLINKS])
    arrays: dict[str, np.ndarray] = {}
    ib: dict[str, np.ndarray] = {}
    xid_series: list[tuple[int, int, int, RawSeries]] = []
    afid_series: list[tuple[int, int, int, RawSeries]] = []
    alloc: dict[str, set[int]] = defaultdict(set)
    models: dict[int, list[str]] = defaultdict(list)
    mig_rows: list[instances.Row] = []  # partitioned GPUs: per-instance activity
    pods: dict[tuple[int, int, str], str] = {}  # (node, gpu, gpu instance) -> its workload
    for s in items:
        rep.series += 1
        try:
            metric = catalog.by_name(s.name)
        except KeyError:
            rep.skip("unknown metric")
            continue
        n = node_ix[s.labels["node"]]
        if metric is catalog.GPU_XID_ERRORS:
            g, x = _int(s.labels.get("gpu")), _int(s.labels.get("xid"))
            if g is None or x is None:
                rep.skip("bad xid labels")
            else:
                xid_series.append((n, g, x, s))
            continue
        if metric is catalog.GPU_RAS_EVENTS:
            g, x = _int(s.labels.get("gpu")), _int(s.labels.get("afid"))
            if g is None or x is None:
                rep.skip("bad afid labels")
            else:
                afid_series.append((n, g, x, s))
            continue
        if metric is catalog.GPU_INFO:
            if s.labels.get("name") and not np.isnan(s.values).all():
                models[n].append(s.labels["name"])
            continue
        if metric in (catalog.GPU_MIG_GRAPHICS_ACTIVE, catalog.GPU_POD_INFO):
            _instance_series(metric, s, n, T, mig_rows, pods)
            continue
        if metric is catalog.GPU_ALLOCATION_INFO:
            ok = s.values[~np.isnan(s.values)]
            if len(ok) and s.index[~np.isnan(s.values)][-1] == T - 1 and s.labels.get("job_id"):
                alloc[s.labels["job_id"]].add(n)
            continue
        if metric.name in _IB_COUNTER_FAMILIES:
            p = port_ix.get(f"{s.labels.get('device')}/{s.labels.get('port')}")
            counter = ib_counter_name(metric.name, s.labels)
            if p is None or not counter:
                rep.skip("bad ib labels")
                continue
            a = ib.get(counter)
            if a is None:  # not setdefault: that would allocate a full array per series
                a = ib[counter] = np.full((T, len(nodes), len(ports)), np.nan)
            a[s.index, n, p] = s.values
            continue
        if "mount" in metric.labels:  # storage probes: (T, nodes, mounts), fsync durations
            if s.labels.get("op", "fsync") != "fsync" or s.labels.get("mount") not in mount_ix:
                continue
            a = arrays.get(metric.name)
            if a is None:
                a = arrays[metric.name] = np.full((T, len(nodes), len(mounts)), np.nan)
            a[s.index, n, mount_ix[s.labels["mount"]]] = s.values
            continue
        if metric.name in NODE_FAMILY_AXES:  # (T, nodes, values): fabric services
            label, values = NODE_FAMILY_AXES[metric.name]
            if s.labels.get(label) not in values:
                rep.skip("bad labels")
                continue
            a = arrays.get(metric.name)
            if a is None:
                a = arrays[metric.name] = np.full((T, len(nodes), len(values)), np.nan)
            a[s.index, n, values.index(s.labels[label])] = s.values
            continue
        if metric.name in NODE_SCALARS:  # (T, nodes): the IMEX daemon's readiness
            a = arrays.get(metric.name)
            if a is None:
                a = arrays[metric.name] = np.full((T, len(nodes)), np.nan)
            a[s.index, n] = np.fmax(a[s.index, n], s.values)
            continue
        pos = _position(metric, s.labels, n, port_ix)
        if pos is None:
            rep.skip("bad labels")
            continue
        shape = _shape(metric, T, len(nodes), gpus, links, len(ports))
        if shape is None:
            rep.skip("unsupported metric")
            continue
        a = arrays.get(metric.name)
        if a is None:  # allocated once per metric, not once per series
            a = arrays[metric.name] = np.full(shape, np.nan)
        if any(i >= d for i, d in zip(pos, shape[1:], strict=False)):
            rep.skip("index out of range")
            continue
        key: tuple[Any, ...] = (s.index, *pos)
        a[key] = s.values
    leaf_of = {node_ix[n]: leaf for n, leaf in (leaf_of_name or {}).items() if n in node_ix}
    infos: dict[tuple[int, int, int], InstanceInfo] = {}
    if mig_rows:
        arrays[catalog.GPU_MIG_GRAPHICS_ACTIVE.name], infos = instances.place(
            mig_rows, pods, T, len(nodes), gpus
        )
    return Window(
        t=np.asarray(grid, dtype=float),
        nodes=nodes,
        metrics=arrays,
        ib_counters=ib,
        ports=ports,
        xids=tuple(_xid_events(xid_series, grid, _presence(arrays, T, len(nodes)))),
        afids=tuple(_afid_events(afid_series, grid, _presence(arrays, T, len(nodes)))),
        jobs={j: tuple(sorted(v)) for j, v in alloc.items()},
        leaf_of=leaf_of,
        sku=node_models(models, len(nodes)),
        gpus=gpus,
        step=step,
        mounts=mounts,
        nvlink_domain_of=_nvlink_domains(info, node_ix, T),
        instances=infos,
    )


def _instance_series(metric: catalog.MetricDef, s: RawSeries, n: int, T: int,
                     rows: list[instances.Row],
                     pods: dict[tuple[int, int, str], str]) -> None:  # fmt: skip
    """One MIG instance's activity row, or the pod (live now) on an instance."""
    g, gi = _int(s.labels.get("gpu")), s.labels.get("gpu_instance", "")
    if g is None or not gi:
        return
    if metric is catalog.GPU_POD_INFO:
        if len(s.index) and s.index[-1] == T - 1:
            pods[(n, g, gi)] = instances.workload(s.labels.get("namespace", ""),
                                                  s.labels.get("pod", ""))  # fmt: skip
        return
    values = np.full(T, np.nan)
    values[s.index] = s.values
    rows.append((n, g, gi, s.labels.get("profile", ""), values))


def _nvlink_domains(info: Iterable[RawSeries], node_ix: Mapping[str, int], T: int
                    ) -> dict[int, str]:  # fmt: skip
    """Node index -> NVLink domain, from the fabric info series present in the last round
    (:func:`common.fabric.nvlink_domains`: the fabric's view; labels come after)."""
    gpus = [(s.labels["node"], s.labels.get("cluster_uuid", ""), s.labels.get("clique_id", ""))
            for s in info if len(s.index) and s.index[-1] == T - 1]  # fmt: skip
    got = fabric.nvlink_domains(fabric.domains_from_fabric(gpus), {})
    return {node_ix[n]: d for n, d in got.items() if n in node_ix}


def node_models(names: Mapping[int, list[str]], n: int) -> tuple[str, ...]:
    """Per node, the peer-group key of its GPUs' model (the most common one when a node
    reports several); "" for a node without ``gpu_info``."""
    out = []
    for i in range(n):
        keys = [catalog_specs.model_key(x) for x in names.get(i, ())]
        out.append(max(sorted(set(keys)), key=keys.count) if keys else "")
    return tuple(out)


def _shape(m: catalog.MetricDef, T: int, N: int, G: int, L: int, P: int) -> tuple[int, ...] | None:
    if "device" in m.labels and "port" in m.labels:
        return (T, N, P)
    if "gpu" not in m.labels:
        return None
    base = (T, N, G, L) if "link" in m.labels else (T, N, G)
    return base + tuple(len(v) for _, v in _GPU_FAMILY_AXES.get(m.name, ()))


def _position(
    m: catalog.MetricDef, labels: Mapping[str, str], n: int, port_ix: Mapping[str, int]
) -> tuple[int, ...] | None:
    if "device" in m.labels and "port" in m.labels:
        p = port_ix.get(f"{labels.get('device')}/{labels.get('port')}")
        return None if p is None else (n, p)
    g = _int(labels.get("gpu"))
    if g is None or g < 0:
        return None
    pos = [n, g]
    if "link" in m.labels:
        k = _int(labels.get("link"))
        if k is None or k < 0:
            return None
        pos.append(k)
    for label, values in _GPU_FAMILY_AXES.get(m.name, ()):
        v = labels.get(label)
        if v not in values:
            return None
        pos.append(values.index(v))
    return tuple(pos)


def _presence(arrays: Mapping[str, np.ndarray], T: int, N: int) -> np.ndarray:
    return node_presence(arrays.get(catalog.GPU_UP.name), (T, N))


def _xid_events(
    xs: list[tuple[int, int, int, RawSeries]], grid: np.ndarray, present: np.ndarray
) -> list[XidEvent]:
    """XID events from counter rows: a first sample is a baseline unless the series was born
    while its node was scraped (analyzer.sources.counters); a drop is a reset."""
    out: list[XidEvent] = []
    for n, g, x, s in xs:
        row = np.full(len(grid), np.nan)
        row[s.index] = s.values
        for i, k in counter_events(row, float("nan"), present[:, n]):
            out.append(XidEvent(float(grid[i]), n, g, x, k))
    return sorted(out, key=lambda e: e.t)


def _afid_events(
    xs: list[tuple[int, int, int, RawSeries]], grid: np.ndarray, present: np.ndarray
) -> list[AfidEvent]:
    """AFID events from the RAS-event counters, as XID events from theirs."""
    out = [AfidEvent(e.t, e.node, e.gpu, e.xid, str(s.labels.get("severity", "")), e.count)
           for n, g, x, s in xs for e in _xid_events([(n, g, x, s)], grid, present)]  # fmt: skip
    return sorted(out, key=lambda e: e.t)


# every metric some detector reads; sources fetch exactly these
QUERIED: tuple[catalog.MetricDef, ...] = (
    catalog.GPU_UP,
    catalog.GPU_INFO,
    catalog.GPU_UTILIZATION,
    catalog.GPU_TEMPERATURE,
    catalog.GPU_MEMORY_TEMPERATURE,
    catalog.GPU_POWER,
    catalog.GPU_POWER_LIMIT,
    catalog.GPU_SM_CLOCK,
    catalog.GPU_SM_ACTIVE,  # straggler signals that survive collective waits (when served)
    catalog.GPU_TENSOR_ACTIVE,
    catalog.JOB_STEP_SECONDS,
    catalog.GPU_THROTTLE,
    catalog.GPU_ECC_ERRORS,
    catalog.GPU_ROW_REMAP_PENDING,
    catalog.GPU_ROW_REMAP_FAILED,
    catalog.GPU_REMAPPED_ROWS,  # the marginal detector's correctable remaps
    catalog.GPU_PCIE_GENERATION,
    catalog.GPU_PCIE_GENERATION_MAX,
    catalog.GPU_PCIE_WIDTH,
    catalog.GPU_PCIE_WIDTH_MAX,
    catalog.GPU_XID_ERRORS,
    catalog.GPU_RAS_EVENTS,  # AMD RAS events per AFID (analyzer.detectors.afid)
    catalog.GPU_RAS_ERRORS,  # AMD RAS errors per block (analyzer.detectors.ras)
    catalog.GPU_XGMI_TRANSMIT,  # XGMI traffic per link (analyzer.detectors.xgmi)
    catalog.GPU_XGMI_RECEIVE,
    catalog.GPU_ALLOCATION_INFO,
    catalog.GPU_MIG_GRAPHICS_ACTIVE,  # partitioned GPUs: per instance (analyzer.detectors.instances)
    catalog.GPU_POD_INFO,  # ... and the pod (workload) on each instance
    catalog.NVLINK_UP,
    catalog.NVLINK_ERRORS,
    catalog.IB_PORT_STATE,
    catalog.IB_PORT_RATE,
    catalog.IB_COUNTER,
    catalog.IB_HW_COUNTER,
    catalog.ROCE_PFC_PAUSE_SECONDS,  # RoCE: PFC pause share per port (analyzer.detectors.roce)
    catalog.ROCE_PFC_STORM_EVENTS,
    catalog.STORAGE_PROBE_UP,
    catalog.STORAGE_PROBE_DURATION,
    catalog.GPU_FABRIC_HEALTH,
    catalog.GPU_FABRIC_INFO,
    catalog.FABRIC_SERVICE_UP,  # Fabric Manager / IMEX down, per node and NVLink domain
    catalog.FABRIC_IMEX_READY,  # an active IMEX unit whose daemon is not ready is down too
)
QUERIED_NAMES = frozenset(m.name for m in QUERIED)
