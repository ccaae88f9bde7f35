"""Analyzer benchmark: one analysis cycle (all detectors, 10-minute window at 15 s) at 128,
1,024 and 4,096 nodes of 8 GPUs: wall time and peak memory, beside the floor (one vectorised
numpy pass over the same window). ``run(quick)`` returns rows for ``python -m benchmarks``.
"""

from __future__ import annotations

import gc
import time
import tracemalloc
from typing import Any

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.window import Window, XidEvent
from exporter import catalog as c
from tests.analyzer.synth import PORTS, healthy

T, P = 41, 8


def synthetic_window(nodes: int, seed: int = 0) -> Window:
    """A busy fleet in 16-node jobs with noise (the detector tests' healthy fleet), plus a
    handful of faults to find."""
    d = healthy(nodes=nodes, T=T, seed=seed)
    m = d["metrics"]
    rng = np.random.default_rng(seed + 1)
    ib = {k: np.cumsum(rng.poisson(0.01, (T, nodes, P)), axis=0).astype(float)
          for k in ("symbol_error", "port_rcv_errors")}  # fmt: skip
    ib["link_downed"] = np.zeros((T, nodes, P))
    m[c.GPU_SM_CLOCK.name][:, 3, 2] = 1500e6
    m[c.NVLINK_UP.name][-2:, 5, 1, 4] = 0
    m[c.IB_PORT_STATE.name][-3:, 7, 0] = 1
    jobs = {str(j): tuple(range(s, min(s + 16, nodes))) for j, s in enumerate(range(0, nodes, 16))}
    return Window(
        t=d["t"], nodes=d["nodes"], metrics=m, ib_counters=ib, ports=PORTS,
        xids=(XidEvent(float(d["t"][0]) + 500.0, 9, 0, 79),), jobs=jobs,
        leaf_of={i: f"leaf-{i // 32:03d}" for i in range(nodes)}, step=15.0,
    )  # fmt: skip


def floor_pass(w: Window) -> float:
    """One vectorised numpy reduction over every array of the window (the floor)."""
    return float(sum(float(np.nanmean(a, axis=0).sum()) for a in w.metrics.values()))


def _measure(fn: Any) -> tuple[float, float]:
    gc.collect()
    tracemalloc.start()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return wall, peak / 2**20


def run(quick: bool) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for nodes in (128, 1024) if quick else (128, 1024, 4096):
        w = synthetic_window(nodes)
        size = sum(a.nbytes for a in w.metrics.values()) / 2**20
        engine = Engine(default_detectors())
        engine.cycle(w)  # warm-up: imports, first-call costs
        engine = Engine(default_detectors())
        wall, peak = _measure(lambda e=engine, w=w: e.cycle(w))  # type: ignore[misc]
        floor, _ = _measure(lambda w=w: floor_pass(w))  # type: ignore[misc]
        durations = dict(engine.stats.durations)
        slowest = max(durations, key=lambda k: durations[k])
        note = f"{len(engine.findings)} findings; window {size:.0f} MiB; slowest {slowest}"
        rows += [
            {"name": f"analyzer_cycle_{nodes}_nodes", "value": round(wall, 4), "unit": "s", "note": note},
            {"name": f"analyzer_cycle_{nodes}_nodes_peak_memory", "value": round(peak, 1), "unit": "MiB",
             "note": "tracemalloc peak during the cycle, window excluded"},
            {"name": f"numpy_floor_{nodes}_nodes", "value": round(floor, 4), "unit": "s",
             "note": f"one nanmean pass over the same window; cycle/floor = {wall / max(floor, 1e-9):.1f}x"},
        ]  # fmt: skip
    return rows


if __name__ == "__main__":
    for r in run(quick=False):
        print(f"{r['name']:<42} {r['value']:>10} {r['unit']:<4} {r['note']}")
