"""Synthetic windows for detector tests: a healthy fleet, then one thing changed per test."""

from __future__ import annotations

from typing import Any

import numpy as np

from analyzer.window import THROTTLE_REASONS, Window, XidEvent
from exporter import catalog as c

G, L, P = 8, 18, 8
PORTS = tuple(f"mlx5_{p}/1" for p in range(P))


def healthy(
    nodes: int = 8, T: int = 41, step: float = 15.0, t0: float = 10_000.0, seed: int = 0,
    busy: bool = True, job: bool = True,
) -> dict[str, Any]:  # fmt: skip
    """Arrays (T, nodes, ...) of a healthy, busy fleet running one job on every node."""
    rng = np.random.default_rng(seed)
    shape = (T, nodes, G)
    util = np.clip(0.8 + rng.normal(0, 0.01, shape), 0, 1) if busy else np.zeros(shape)
    power = 70 + 600 * util + rng.normal(0, 3, shape)
    m: dict[str, np.ndarray] = {
        c.GPU_UP.name: np.ones(shape),
        c.GPU_UTILIZATION.name: util,
        c.GPU_POWER.name: power,
        c.GPU_POWER_LIMIT.name: np.full(shape, 700.0),
        c.GPU_TEMPERATURE.name: np.round(27 + 0.075 * power),
        c.GPU_MEMORY_TEMPERATURE.name: np.round(33 + 0.075 * power),
        c.GPU_SM_CLOCK.name: np.full(shape, 1980e6 if busy else 345e6),
        c.GPU_THROTTLE.name: np.zeros((*shape, len(THROTTLE_REASONS))),
        c.GPU_ECC_ERRORS.name: np.zeros((*shape, 2, 2)),
        c.GPU_ROW_REMAP_PENDING.name: np.zeros(shape),
        c.GPU_ROW_REMAP_FAILED.name: np.zeros(shape),
        c.GPU_PCIE_GENERATION.name: np.full(shape, 5.0),
        c.GPU_PCIE_GENERATION_MAX.name: np.full(shape, 5.0),
        c.GPU_PCIE_WIDTH.name: np.full(shape, 16.0),
        c.GPU_PCIE_WIDTH_MAX.name: np.full(shape, 16.0),
        c.NVLINK_UP.name: np.ones((T, nodes, G, L)),
        c.NVLINK_ERRORS.name: np.zeros((T, nodes, G, L, 4)),
        c.IB_PORT_STATE.name: np.full((T, nodes, P), 4.0),
        c.IB_PORT_RATE.name: np.full((T, nodes, P), 50e9),
    }
    ib = {
        name: np.zeros((T, nodes, P)) for name in ("symbol_error", "link_downed", "port_rcv_errors")
    }
    return {
        "t": t0 + step * np.arange(T),
        "nodes": tuple(f"node-{i:02d}" for i in range(nodes)),
        "metrics": m,
        "ib": ib,
        "jobs": {"42": tuple(range(nodes))} if job else {},
        "step": step,
    }


def window(d: dict[str, Any], xids: tuple[XidEvent, ...] = (), leaf_of: dict[int, str] | None = None,
           jobs: dict[str, tuple[int, ...]] | None = None) -> Window:  # fmt: skip
    return Window(
        t=d["t"], nodes=d["nodes"], metrics=d["metrics"], ib_counters=d["ib"], ports=PORTS,
        xids=xids, jobs=d["jobs"] if jobs is None else jobs, leaf_of=leaf_of or {}, step=d["step"],
    )  # fmt: skip


def keys(findings: list[Any]) -> set[tuple[str, str, str]]:
    return {(f.node, f.subject, f.kind) for f in findings}


def mixed(h100: int = 8, a100: int = 4, seed: int = 0, a100_busy: bool = True,
          a100_job: bool = True) -> tuple[dict[str, Any], tuple[str, ...]]:  # fmt: skip
    """A two-generation fleet: ``h100`` H100 SXM nodes (700 W, 1980 MHz, 18 NVLinks, NDR)
    then ``a100`` A100 SXM nodes (400 W, 1410 MHz, 12 NVLinks padded with NaN, HDR), each
    generation in a job of its own (or the A100s idle). Returns the arrays and the per-node
    model keys (``Window.sku``)."""
    d = healthy(h100 + a100, seed=seed)
    m, a = d["metrics"], slice(h100, None)
    rng = np.random.default_rng(seed + 1)
    shape = m[c.GPU_UTILIZATION.name][:, a].shape
    util = np.clip(0.8 + rng.normal(0, 0.01, shape), 0, 1) if a100_busy else np.zeros(shape)
    power = 50 + 320 * util + rng.normal(0, 2, shape)
    m[c.GPU_UTILIZATION.name][:, a] = util
    m[c.GPU_POWER.name][:, a] = power
    m[c.GPU_POWER_LIMIT.name][:, a] = 400.0
    m[c.GPU_TEMPERATURE.name][:, a] = np.round(30 + 0.09 * power)
    m[c.GPU_SM_CLOCK.name][:, a] = 1410e6 if a100_busy else 210e6
    m[c.NVLINK_UP.name][:, a, :, 12:] = np.nan
    m[c.NVLINK_ERRORS.name][:, a, :, 12:] = np.nan
    m[c.IB_PORT_RATE.name][:, a] = 25e9
    n = h100 + a100
    jobs = {"h": tuple(range(h100))}
    if a100_job and a100_busy:
        jobs["a"] = tuple(range(h100, n))
    d["jobs"] = jobs
    return d, ("h100-sxm",) * h100 + ("a100-sxm",) * a100
