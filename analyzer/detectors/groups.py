"""Peer groups: who a node is compared with. Like with like: the nodes of the same job and the
same GPU model (a job spanning two generations is two groups); idle nodes fall back to
same-model fleet peers. A group too small for statistics falls back to the model's
specification (:mod:`exporter.catalog_specs`), never to the whole fleet. Pure functions of the
window's job map and models (``Window.sku``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np

from analyzer.pools import Pool, medians, pool_of
from analyzer.window import Window
from exporter import catalog, catalog_specs
from exporter.catalog_specs import GpuSpec


def models(window: Window) -> tuple[str, ...]:
    """Per node, its model's peer-group key ("" where no source or inventory said)."""
    n = len(window.nodes)
    return window.sku if len(window.sku) == n else ("",) * n


def configurations(window: Window) -> tuple[str, ...]:
    """Per node, its model and enforced power limit (``h100-sxm@500W``): GPUs capped lower
    draw less power and run slower at the same work, so they are peers only of each other.
    Computed once per window (every job's split asks; at 1,024 nodes that was most of a cycle)."""
    memo: tuple[str, ...] | None = window.__dict__.get("_configurations")
    if memo is not None:
        return memo
    skus = models(window)
    lim = window.get(catalog.GPU_POWER_LIMIT)
    if lim is None or lim.ndim != 3 or lim.shape[1] != len(skus):
        out = skus
    else:
        with warnings.catch_warnings():  # a node without the series: no limit to group by
            warnings.simplefilter("ignore", RuntimeWarning)
            per_node = np.nanmedian(lim[-3:], axis=(0, 2))
        out = tuple(
            f"{k}@{10 * round(w / 10):.0f}W" if np.isfinite(w) else k
            for k, w in zip(skus, per_node, strict=True)
        )
    object.__setattr__(window, "_configurations", out)  # a frozen window: a memo, not a field
    return out


def split_by_model(window: Window, idx: np.ndarray, config: bool = False
                   ) -> list[tuple[str, np.ndarray]]:  # fmt: skip
    """``[(model, node indices)]``: ``idx`` split by GPU model (and, with ``config``, by
    power limit too), in key order."""
    skus = configurations(window) if config else models(window)
    out: dict[str, list[int]] = {}
    for i in idx:
        out.setdefault(skus[int(i)], []).append(int(i))
    return [(k, np.array(v, dtype=int)) for k, v in sorted(out.items())]


def peer_groups(window: Window, min_size: int = 3, idle_min: int | None = None
                ) -> list[tuple[str, np.ndarray]]:  # fmt: skip
    """``[(group name, node indices)]``: each job with >= ``min_size`` nodes of one
    configuration (``job/<id>``, or ``job/<id>/<model>@<limit>`` when the job spans several),
    then the remaining nodes per configuration (``idle/<model>@<limit>``; with at least
    ``idle_min`` nodes, default ``min_size``: a replica's part keeps its few idle nodes of a
    configuration, whose peers are mostly on other replicas)."""
    n = len(window.nodes)
    taken = np.zeros(n, dtype=bool)
    out: list[tuple[str, np.ndarray]] = []
    for job, members in sorted(window.jobs.items()):
        idx = np.array(sorted({m for m in members if 0 <= m < n}), dtype=int)
        parts = split_by_model(window, idx, config=True)
        for sku, part in parts:
            if len(part) >= min_size:
                out.append((f"job/{job}/{sku}" if len(parts) > 1 else f"job/{job}", part))
        taken[idx] = True
    for sku, idx in split_by_model(window, np.flatnonzero(~taken), config=True):
        if len(idx) >= (min_size if idle_min is None else idle_min):
            out.append((f"idle/{sku}" if sku else "idle", idx))
    return out


def like_reference(window: Window, values: np.ndarray, from_spec: Callable[[GpuSpec], float | None],
                   min_nodes: int = 3, pooled: str = "") -> np.ndarray:  # fmt: skip
    """Per node, the reference ``values`` (N, ...) are judged against: the median over the
    nodes of the same model when at least ``min_nodes`` of them have a value, else the
    model's specification (``from_spec``), else NaN: no judgement, never the fleet's.
    ``pooled``: the quantity's name in :attr:`Window.elsewhere` (a replica's part: the other
    replicas' nodes of the model count too, :mod:`analyzer.pools`)."""
    n = len(window.nodes)
    ref = np.full(n, np.nan)
    groups = split_by_model(window, np.arange(n))
    med = medians(pool_of(values, groups), window.elsewhere.get(pooled), min_nodes)
    for sku, idx in groups:
        if sku in med:
            ref[idx] = med[sku]
            continue
        spec = catalog_specs.spec(sku) if sku else None
        value = from_spec(spec) if spec is not None else None
        if value is not None:
            ref[idx] = value
    return ref


def model_pool(window: Window, values: np.ndarray) -> Pool:
    """The pool of ``values`` (N, ...) by model, which :func:`like_reference` takes its medians
    over: what a replica leaves for the others."""
    return pool_of(values, split_by_model(window, np.arange(len(window.nodes))))
