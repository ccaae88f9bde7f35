"""Query histories -> one :class:`Window`, vectorised (no per-series Python work per cycle).

Pure. Takes the :class:`~analyzer.sources.matrix.SeriesMatrix` of each
:class:`~analyzer.sources.queries.Query` and places its rows in the window arrays of
docs/contracts.md; decodes XID counters into events (analyzer.sources.counters: anchors from
before the window, births, resets) and the allocation series into the job map; fills sparse
gauges only where the GPU reported.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from analyzer.sources.build import _GPU_FAMILY_AXES, _IB_COUNTER_FAMILIES, NVLINKS, node_models
from analyzer.sources.counters import counter_increases, node_presence
from analyzer.sources.matrix import SeriesMatrix
from analyzer.sources.queries import Query
from analyzer.window import Window, XidEvent
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
    node_cols = {q.name: _col(m, q, "node") for q, m in items if "node" in q.labels}
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
    xid_q: tuple[Query, SeriesMatrix] | None = None
    alloc_q: tuple[Query, SeriesMatrix] | None = None
    models: dict[int, list[str]] = {}
    for q, m in items:
        if not len(m):
            continue
        n_ix = np.searchsorted(nodes_a, node_cols[q.name])
        if q.metric is catalog.GPU_INFO:
            seen = ~np.isnan(m.vals).all(axis=1)
            for i, name in zip(n_ix[seen], _col(m, q, "name")[seen], strict=True):
                models.setdefault(int(i), []).append(str(name))
        elif q.metric is catalog.GPU_XID_ERRORS:
            xid_q = (q, m)
        elif q.metric is catalog.GPU_ALLOCATION_INFO:
            alloc_q = (q, m)
        elif q.name in _IB_COUNTER_FAMILIES:
            _place_ib(ib, q, m, n_ix, np.searchsorted(ports_a, port_cols[q.name]), T, N, P)
        elif "device" in q.labels:
            a = arrays[q.name] = np.full((T, N, P), np.nan)
            a[:, n_ix, np.searchsorted(ports_a, port_cols[q.name])] = m.vals.T
        elif "mount" in q.labels:  # (T, nodes, mounts)
            a = arrays[q.name] = np.full((T, N, len(mounts)), np.nan)
            a[:, n_ix, np.searchsorted(np.array(mounts), mount_cols[q.name])] = m.vals.T
        else:
            _place_gpu(arrays, q, m, n_ix, gpu_cols[q.name], T, N, gpus)
    present = node_presence(arrays.get(catalog.GPU_UP.name), (T, N))
    _fill_sparse(arrays, items)
    return Window(
        t=np.asarray(grid, dtype=float),
        nodes=nodes,
        metrics=arrays,
        ib_counters=ib,
        ports=ports,
        xids=tuple(_xids(xid_q, nodes_a, grid, present)) if xid_q else (),
        jobs=_jobs(alloc_q, nodes_a) if alloc_q else {},
        leaf_of={i: leaf[n] for i, n in enumerate(nodes) if n in (leaf := leaf_of_name or {})},
        sku=node_models(models, N),
        gpus=gpus,
        step=step,
        missing=missing,
        mounts=mounts,
    )


def _place_gpu(arrays: dict[str, np.ndarray], q: Query, m: SeriesMatrix, n_ix: np.ndarray,
               g_ix: np.ndarray, T: int, N: int, G: int) -> None:  # fmt: skip
    pos: list[np.ndarray] = [n_ix, g_ix]
    dims: list[int] = [N, G]
    if "link" in q.labels:
        k = _ints_of(m, q, "link")
        pos.append(k)
        dims.append(max(NVLINKS, int(k.max()) + 1))
    for label, values in _GPU_FAMILY_AXES.get(q.name, ()):
        lut = {v: i for i, v in enumerate(values)}
        pos.append(np.array([lut.get(x, -1) for x in _col(m, q, label)]))
        dims.append(len(values))
    ok = np.all([p >= 0 for p in pos], axis=0)
    a = arrays[q.name] = np.full((T, *dims), np.nan)
    idx: tuple[Any, ...] = (slice(None), *[p[ok] for p in pos])
    a[idx] = m.vals[ok].T


def _place_ib(ib: dict[str, np.ndarray], q: Query, m: SeriesMatrix, n_ix: np.ndarray,
              p_ix: np.ndarray, T: int, N: int, P: int) -> None:  # fmt: skip
    counters = _col(m, q, "counter")
    for name in np.unique(counters):
        rows = counters == name
        a = ib.get(str(name))
        if a is None:
            a = ib[str(name)] = np.full((T, N, P), np.nan)
        a[:, n_ix[rows], p_ix[rows]] = m.vals[rows].T


def _fill_sparse(
    arrays: dict[str, np.ndarray], items: Sequence[tuple[Query, SeriesMatrix]]
) -> None:
    up = arrays.get(catalog.GPU_UP.name)
    if up is None:
        return
    seen = ~np.isnan(up)
    for q, _ in items:
        a = arrays.get(q.name)
        if q.absent_means is None or a is None or a.shape[:3] != up.shape:
            continue
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
        first = int(np.argmax(~np.isnan(row)))
        born = np.isnan(m.anchor[r]) and first > 0 and bool(present[first - 1, n_ix[r]])
        inc = counter_increases(row, m.anchor[r], born)
        for i in np.flatnonzero(np.nan_to_num(inc, nan=0.0) > 0):
            out.append(
                XidEvent(float(grid[i]), int(n_ix[r]), int(g[r]), int(x[r]), int(inc[i] + 0.5))
            )
    return sorted(out, key=lambda e: e.t)


def _jobs(qm: tuple[Query, SeriesMatrix], nodes: np.ndarray) -> dict[str, tuple[int, ...]]:
    q, m = qm
    live = ~np.isnan(m.vals[:, -1])
    n_ix = np.searchsorted(nodes, _col(m, q, "node"))
    jobs: dict[str, set[int]] = {}
    for j, n, ok in zip(_col(m, q, "job_id"), n_ix, live, strict=True):
        if ok and j:
            jobs.setdefault(str(j), set()).add(int(n))
    return {j: tuple(sorted(v)) for j, v in jobs.items()}
