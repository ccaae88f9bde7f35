"""Query histories -> one :class:`Window`, vectorised (no per-series Python work per cycle).

Pure. Takes the :class:`~analyzer.sources.matrix.SeriesMatrix` of each
:class:`~analyzer.sources.queries.Query` and places its rows in the window arrays of
docs/contracts.md; decodes XID counters into events (analyzer.sources.counters: anchors from
before the window, births, resets) and the allocation series into the job map; fills sparse
gauges only where the GPU reported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from analyzer.sources import instances
from analyzer.sources.build import (
    _GPU_FAMILY_AXES,
    _IB_COUNTER_FAMILIES,
    NODE_FAMILY_AXES,
    NODE_SCALARS,
    NVLINKS,
    ib_counter_name,
    node_models,
)
from analyzer.sources.counters import counter_events, node_presence
from analyzer.sources.dialects import AMD, DCGM, NATIVE
from analyzer.sources.dialects.amd import last_afid_events
from analyzer.sources.dialects.dcgm import generation_of_query, last_xid_events, vanished_as_lost
from analyzer.sources.dialects.generations import GENERATIONS
from analyzer.sources.matrix import SeriesMatrix
from analyzer.sources.queries import Query
from analyzer.window import AfidEvent, InstanceInfo, Window, XidEvent
from common import fabric as fabric_mod
from exporter import catalog


def _col(m: SeriesMatrix, q: Query, label: str) -> np.ndarray:
    """The label's value per row (cached until the matrix's rows change)."""
    if m.cache_version != m.version:
        m.cache, m.cache_version = {}, m.version
    got = m.cache.get(label)
    if got is None:
        i = q.labels.index(label)
        got = np.array([k[i] for k in m.keys]) if len(m) else np.zeros(0, dtype=str)
        m.cache[label] = got
    return got


def _ints_of(m: SeriesMatrix, q: Query, label: str) -> np.ndarray:
    col = _col(m, q, label)
    got = m.cache.get("int:" + label)
    if got is None:
        got = m.cache["int:" + label] = _ints(col)
    return got


def _ints(a: np.ndarray) -> np.ndarray:
    out = np.full(len(a), -1)
    for i, s in enumerate(a):  # labels are small ints; a bad one is skipped, not fatal
        if s.isdigit():
            out[i] = int(s)
    return out


def assemble(
    items: Sequence[tuple[Query, SeriesMatrix]],
    grid: np.ndarray,
    step: float,
    leaf_of_name: Mapping[str, str] | None = None,
    missing: tuple[str, ...] = (),
) -> Window:
    T = len(grid)
    # identity reads (q.every: the NVLink domains) name nodes but do not make them
    node_cols = {q.name: _col(m, q, "node") for q, m in items if "node" in q.labels and not q.every}
    nodes = tuple(sorted(set().union(*[set(c.tolist()) for c in node_cols.values()])))
    port_cols = {
        q.name: np.char.add(np.char.add(_col(m, q, "device"), "/"), _col(m, q, "port"))
        for q, m in items
        if "device" in q.labels and len(m)
    }
    ports = tuple(sorted(set().union(*[set(c.tolist()) for c in port_cols.values()])))
    mount_cols = {q.name: _col(m, q, "mount") for q, m in items if "mount" in q.labels and len(m)}
    mounts = tuple(sorted(set().union(*[set(c.tolist()) for c in mount_cols.values()])))
    gpu_cols = {q.name: _ints_of(m, q, "gpu") for q, m in items if "gpu" in q.labels}
    gpus = max([8] + [int(c.max()) + 1 for c in gpu_cols.values() if len(c)])
    N, P = len(nodes), len(ports)
    if not N or not T:
        return Window(t=np.asarray(grid, float), nodes=(), metrics={}, step=step, missing=missing)
    nodes_a, ports_a = np.array(nodes), np.array(ports)
    arrays: dict[str, np.ndarray] = {}
    ib: dict[str, np.ndarray] = {}
    xid_qs: list[tuple[Query, SeriesMatrix]] = []
    last_xid: list[tuple[Query, SeriesMatrix]] = []
    ras_events: list[tuple[Query, SeriesMatrix]] = []  # AFIDs: counters, or DME's last-event gauge
    alloc_qs: list[tuple[Query, SeriesMatrix]] = []
    inst_qs: list[tuple[Query, SeriesMatrix, np.ndarray]] = []  # MIG instances and their pods
    models: dict[int, list[str]] = {}
    native = _native_nodes(items, node_cols)
    dialect_of: dict[int, str] = {}
    generation_of: dict[int, str] = {}  # dcgm nodes: the naming generation they answered in
    read_in_dialect: dict[str, np.ndarray] = {}  # per family: the nodes a dialect served it on
    fabric: list[tuple[str, str, str]] = []  # (node, cluster UUID, clique id) per GPU
    for q, m in items:
        if not len(m):
            continue
        if q.metric is catalog.GPU_FABRIC_INFO:
            fabric += _fabric_votes(q, m)
            continue
        node_col, gpu_col, port_col = node_cols[q.name], gpu_cols.get(q.name), port_cols.get(q.name)
        if q.dialect:  # a node gpuwarden's exporter serves is read in gpuwarden's names only
            own = native["ib" if _is_ib(q) else "gpu"]
            keep = ~np.isin(node_col, list(own)) if own else np.ones(len(m), bool)
            if not keep.any():
                continue
            if not keep.all():
                m = m.subset(keep)
                node_col = node_col[keep]
                gpu_col = None if gpu_col is None else gpu_col[keep]
                port_col = None if port_col is None else port_col[keep]
        n_ix = np.searchsorted(nodes_a, node_col)
        if q.dialect:
            read_in_dialect.setdefault(q.metric.name, np.zeros(N, bool))[n_ix] = True
        if q.dialect and q.metric in (catalog.GPU_UP, catalog.IB_PORT_STATE):
            for i in np.unique(n_ix):
                dialect_of[int(i)] = _join(dialect_of.get(int(i), ""), q.dialect)
                if q.dialect == DCGM:
                    # a node upgraded within the window: its newest names
                    gens = (generation_of.get(int(i), ""), generation_of_query(q))
                    generation_of[int(i)] = max(
                        gens, key=lambda g: GENERATIONS.index(g) if g else -1
                    )
        if q.metric is catalog.GPU_INFO:
            seen = ~np.isnan(m.vals).all(axis=1)
            for i, name in zip(n_ix[seen], _col(m, q, "name")[seen], strict=True):
                models.setdefault(int(i), []).append(str(name))
        elif q.metric is catalog.GPU_XID_ERRORS:
            xid_qs.append((q, m))
        elif q.metric is catalog.DCGM_LAST_XID:
            last_xid.append((q, m))
        elif q.metric is catalog.GPU_RAS_EVENTS:
            ras_events.append((q, m))
        elif q.metric is catalog.GPU_ALLOCATION_INFO:
            alloc_qs.append((q, m))
        elif q.metric in (catalog.GPU_MIG_GRAPHICS_ACTIVE, catalog.GPU_POD_INFO):
            inst_qs.append((q, m, n_ix))
        elif q.metric.name in _IB_COUNTER_FAMILIES:
            assert port_col is not None
            _place_ib(ib, q, m, n_ix, np.searchsorted(ports_a, port_col), T, N, P)
        elif "device" in q.labels:
            a = _array(arrays, q.metric.name, (T, N, P))
            assert port_col is not None
            a[:, n_ix, np.searchsorted(ports_a, port_col)] = m.vals.T
        elif "mount" in q.labels:  # (T, nodes, mounts)
            a = _array(arrays, q.metric.name, (T, N, len(mounts)))
            a[:, n_ix, np.searchsorted(np.array(mounts), mount_cols[q.name])] = m.vals.T
        elif q.metric.name in NODE_FAMILY_AXES:  # (T, nodes, values): fabric services
            label, values = NODE_FAMILY_AXES[q.metric.name]
            v_ix = np.array([values.index(x) if x in values else -1 for x in _col(m, q, label)])
            ok = v_ix >= 0
            a = _array(arrays, q.metric.name, (T, N, len(values)))
            a[:, n_ix[ok], v_ix[ok]] = m.vals[ok].T
        elif q.metric.name in NODE_SCALARS:  # (T, nodes)
            a = _array(arrays, q.metric.name, (T, N))
            a[:, n_ix] = m.vals.T
        else:
            assert gpu_col is not None
            _place_gpu(arrays, q, m, n_ix, gpu_col, T, N, gpus)
    # GPUs of exporters without a gpu_up whose series vanish beside their siblings' are lost
    foreign = np.array(sorted(i for i, d in dialect_of.items()
                              if {DCGM, AMD} & set(d.split("+"))), int)  # fmt: skip
    if catalog.GPU_UP.name in arrays:
        vanished_as_lost(arrays[catalog.GPU_UP.name], foreign)
    present = node_presence(arrays.get(catalog.GPU_UP.name), (T, N))
    natively = np.isin(nodes_a, list(native["gpu"]))
    none = np.zeros(N, bool)
    _fill_sparse(arrays, items, lambda name: natively | read_in_dialect.get(name, none))
    xids = [e for qm in xid_qs for e in _xids(qm, nodes_a, grid, present)]
    for q, m in last_xid:
        n_ix = np.searchsorted(nodes_a, _col(m, q, "node"))
        xids += last_xid_events(m.vals, m.anchor, n_ix, _ints_of(m, q, "gpu"), grid, present)
    afids = [e for qm in ras_events for e in _afids(qm, nodes_a, grid, present)]
    infos: dict[tuple[int, int, int], InstanceInfo] = {}
    rows, pods = _instance_rows(inst_qs)
    if rows:
        arrays[catalog.GPU_MIG_GRAPHICS_ACTIVE.name], infos = instances.place(rows, pods, T, N,
                                                                             gpus)  # fmt: skip
    jobs: dict[str, set[int]] = {}
    for qm in alloc_qs:
        for j, ns in _jobs(qm, nodes_a).items():
            jobs.setdefault(j, set()).update(ns)
    return Window(
        t=np.asarray(grid, dtype=float),
        nodes=nodes,
        metrics=arrays,
        ib_counters=ib,
        ports=ports,
        xids=tuple(sorted(xids, key=lambda e: e.t)),
        afids=tuple(sorted(afids, key=lambda e: e.t)),
        jobs={j: tuple(sorted(v)) for j, v in jobs.items()},
        leaf_of={i: leaf[n] for i, n in enumerate(nodes) if n in (leaf := leaf_of_name or {})},
        sku=node_models(models, N),
        gpus=gpus,
        step=step,
        missing=missing,
        mounts=mounts,
        dialect_of=_dialects(dialect_of, native["gpu"], nodes),
        dcgm_generation_of=generation_of,
        nvlink_domain_of=_domains_of(fabric, nodes),
        instances=infos,
    )


def _instance_rows(qs: Sequence[tuple[Query, SeriesMatrix, np.ndarray]]
                   ) -> tuple[list[instances.Row], dict[tuple[int, int, str], str]]:  # fmt: skip
    """Each MIG instance's activity row, and the workload of the pod live on each instance."""
    rows: list[instances.Row] = []
    pods: dict[tuple[int, int, str], str] = {}
    for q, m, n_ix in qs:
        g, gi = _ints_of(m, q, "gpu"), _col(m, q, "gpu_instance")
        if q.metric is catalog.GPU_POD_INFO:
            live = ~np.isnan(m.vals[:, -1])
            for r in np.flatnonzero(live & (g >= 0)):
                pods[(int(n_ix[r]), int(g[r]), str(gi[r]))] = instances.workload(
                    str(_col(m, q, "namespace")[r]), str(_col(m, q, "pod")[r]))  # fmt: skip
            continue
        profile = _col(m, q, "profile")
        rows += [(int(n_ix[r]), int(g[r]), str(gi[r]), str(profile[r]), m.vals[r])
                 for r in range(len(m)) if g[r] >= 0]  # fmt: skip
    return rows, pods


def _fabric_votes(q: Query, m: SeriesMatrix) -> list[tuple[str, str, str]]:
    """Per GPU, the NVLink domain its fabric info names: each row (node, cluster UUID,
    clique id) as many times as GPUs named it (the identity read's ``count by``)."""
    out = []
    counts = np.nan_to_num(np.nanmax(np.where(np.isnan(m.vals), -1.0, m.vals), axis=1), nan=1.0)
    for node, cluster, clique, n in zip(_col(m, q, "node"), _col(m, q, "cluster_uuid"),
                                        _col(m, q, "clique_id"), counts, strict=True):  # fmt: skip
        out += [(str(node), str(cluster), str(clique))] * max(int(n), 1)
    return out


def _domains_of(fabric: Sequence[tuple[str, str, str]], nodes: Sequence[str]) -> dict[int, str]:
    """Window node index -> NVLink domain from the GPUs' fabric info (the majority per node;
    node labels or the inventory come after, only for nodes the fabric does not place)."""
    ix = {n: i for i, n in enumerate(nodes)}
    got = fabric_mod.nvlink_domains(fabric_mod.domains_from_fabric(fabric), {})
    return {ix[n]: d for n, d in got.items() if n in ix}


def _dialects(found: Mapping[int, str], native_gpu: set[str], nodes: Sequence[str]
              ) -> dict[int, str]:  # fmt: skip
    """Per node, the dialects its series came in: gpuwarden unless dcgm-exporter served its
    GPUs, with node_exporter beside it where node_exporter served its ports."""
    out = {}
    for i, n in enumerate(nodes):
        d = found.get(i, "")
        if DCGM not in d.split("+") and (n in native_gpu or not d):
            d = _join(d, NATIVE) if d else NATIVE
        out[i] = d
    return out


def _join(have: str, dialect: str) -> str:
    d = dialect.split("/")[0]
    return d if not have or have == d else "+".join(sorted({*have.split("+"), d}))


def _is_ib(q: Query) -> bool:
    return "port" in q.labels


def _native_nodes(items: Sequence[tuple[Query, SeriesMatrix]],
                  node_cols: Mapping[str, np.ndarray]) -> dict[str, set[str]]:  # fmt: skip
    """The nodes gpuwarden's own exporter serves: GPU families (``gpu_up``) and IB families
    (port state), each read in gpuwarden's names wherever they exist."""
    out: dict[str, set[str]] = {"gpu": set(), "ib": set()}
    for q, m in items:
        if q.dialect or not len(m):
            continue
        if q.metric is catalog.GPU_UP:
            out["gpu"] |= set(node_cols[q.name].tolist())
        elif q.metric is catalog.IB_PORT_STATE:
            out["ib"] |= set(node_cols[q.name].tolist())
    return out


def _array(arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...]) -> np.ndarray:
    """The window array of ``name``, allocated by the first query that places rows in it
    (a family read in several dialects fills one array: the rows are different nodes)."""
    a = arrays.get(name)
    if a is None or a.shape != shape:
        a = arrays[name] = np.full(shape, np.nan)
    return a


def _place_gpu(arrays: dict[str, np.ndarray], q: Query, m: SeriesMatrix, n_ix: np.ndarray,
               g_ix: np.ndarray, T: int, N: int, G: int) -> None:  # fmt: skip
    pos: list[np.ndarray] = [n_ix, g_ix]
    dims: list[int] = [N, G]
    if "link" in q.labels:
        k = _ints_of(m, q, "link")
        pos.append(k)
        dims.append(max(NVLINKS, int(k.max()) + 1))
    for label, values in _GPU_FAMILY_AXES.get(q.metric.name, ()):
        lut = {v: i for i, v in enumerate(values)}
        pos.append(np.array([lut.get(x, -1) for x in _col(m, q, label)]))
        dims.append(len(values))
    ok = np.all([p >= 0 for p in pos], axis=0)
    a = _array(arrays, q.metric.name, (T, *dims))
    idx: tuple[Any, ...] = (slice(None), *[p[ok] for p in pos])
    a[idx] = m.vals[ok].T


def _place_ib(ib: dict[str, np.ndarray], q: Query, m: SeriesMatrix, n_ix: np.ndarray,
              p_ix: np.ndarray, T: int, N: int, P: int) -> None:  # fmt: skip
    if "counter" in q.labels:
        counters = _col(m, q, "counter")
    else:  # the RoCE PFC families: a key made of their labels
        counters = np.array([ib_counter_name(q.metric.name, dict(zip(q.labels, row, strict=True)))
                             for row in zip(*(_col(m, q, x) for x in q.labels), strict=True)])  # fmt: skip
    for name in np.unique(counters):
        rows = counters == name
        a = ib.get(str(name))
        if a is None:
            a = ib[str(name)] = np.full((T, N, P), np.nan)
        a[:, n_ix[rows], p_ix[rows]] = m.vals[rows].T


def _fill_sparse(
    arrays: dict[str, np.ndarray],
    items: Sequence[tuple[Query, SeriesMatrix]],
    served: Callable[[str], np.ndarray],
) -> None:
    """Sparse gauges' absent value where the GPU reported, on the nodes whose exporter serves
    the family (``served``: gpuwarden's, or a dialect that has it). A dialect without the
    family (dcgm has no per-link NVLink state) stays NaN there: unknown, not "all links up"."""
    up = arrays.get(catalog.GPU_UP.name)
    if up is None:
        return
    for q, _ in items:
        a = arrays.get(q.metric.name)
        if q.absent_means is None or a is None or a.shape[:3] != up.shape:
            continue
        seen = ~np.isnan(up) & served(q.metric.name)[None, :, None]
        where = seen.reshape(seen.shape + (1,) * (a.ndim - 3)) & np.isnan(a)
        a[where] = q.absent_means


def _xids(qm: tuple[Query, SeriesMatrix], nodes: np.ndarray, grid: np.ndarray,
          present: np.ndarray) -> list[XidEvent]:  # fmt: skip
    q, m = qm
    n_ix = np.searchsorted(nodes, _col(m, q, "node"))
    g, x = _ints_of(m, q, "gpu"), _ints_of(m, q, "xid")
    out = []
    for r in range(len(m)):
        row = m.vals[r]
        if g[r] < 0 or x[r] < 0 or np.isnan(row).all():
            continue
        for i, k in counter_events(row, m.anchor[r], present[:, n_ix[r]]):
            out.append(XidEvent(float(grid[i]), int(n_ix[r]), int(g[r]), int(x[r]), k))
    return sorted(out, key=lambda e: e.t)


def _afids(qm: tuple[Query, SeriesMatrix], nodes: np.ndarray, grid: np.ndarray,
           present: np.ndarray) -> list[AfidEvent]:  # fmt: skip
    """AFID events: from DME's last-event gauge (:func:`last_afid_events`), or from the
    catalogue's counter per (afid, severity) as XIDs are (every increase, nothing lost)."""
    q, m = qm
    n_ix = np.searchsorted(nodes, _col(m, q, "node"))
    g, sev = _ints_of(m, q, "gpu"), _col(m, q, "severity")
    if q.dialect == AMD:
        return last_afid_events(m.vals, m.anchor, n_ix, g, sev, grid, present)
    afid = _ints_of(m, q, "afid")
    out = []
    for r in range(len(m)):
        row = m.vals[r]
        if g[r] < 0 or afid[r] < 0 or np.isnan(row).all():
            continue
        for i, k in counter_events(row, m.anchor[r], present[:, n_ix[r]]):
            out.append(AfidEvent(float(grid[i]), int(n_ix[r]), int(g[r]), int(afid[r]),
                                 str(sev[r]), k))  # fmt: skip
    return out


def _jobs(qm: tuple[Query, SeriesMatrix], nodes: np.ndarray) -> dict[str, tuple[int, ...]]:
    q, m = qm
    live = ~np.isnan(m.vals[:, -1])
    n_ix = np.searchsorted(nodes, _col(m, q, "node"))
    jobs: dict[str, set[int]] = {}
    for j, n, ok in zip(_col(m, q, "job_id"), n_ix, live, strict=True):
        if ok and j:
            jobs.setdefault(str(j), set()).add(int(n))
    return {j: tuple(sorted(v)) for j, v in jobs.items()}
