"""The analyzer on the deployed path: reading a real Prometheus at 128, 1,024 and 4,096 nodes.

The TSDB is filled by ``promtool tsdb create-blocks-from openmetrics`` from the fleet
simulator (:mod:`benchmarks.fleet_openmetrics`: every series the analyzer reads, with the
exporter's labels, 15 s steps, a few faults starting inside the span); then a real Prometheus
serves it and the analyzer runs a cold start followed by steady-state cycles at the scrape
interval (virtual time, back to back). Per size: cold start, steady-state cycle wall and
analyzer CPU, MB read, bytes and CPU per node per cycle, the process's peak RSS, and the
engine-only cycle on the same window with the read/engine ratio. The generated TSDB is cached
under ``.bench-cache/`` (``BENCH_FRESH=1`` rebuilds it). ``BENCH_NODES=128,1024,4096`` picks
sizes; the default is 128 and 1,024: at 4,096 nodes the one-piece promtool backfill needs
about 40 GB of memory (10.5 GB at 1,024), more than the development machine has.
"""

from __future__ import annotations

import asyncio
import os
import resource
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.prometheus import PrometheusSource
from benchmarks.fleet_openmetrics import write
from tests.realcomp import require_binary, run_prometheus

STEP, WINDOW, CYCLES = 15.0, 600.0, 8
CACHE = Path(__file__).resolve().parents[1] / ".bench-cache" / "analyzer-prometheus"


def _tsdb(nodes: int, t0: float, steps: int) -> Path:
    out = CACHE / f"{nodes}-nodes-{int(t0)}"
    if out.exists() and not os.environ.get("BENCH_FRESH"):
        return out
    part = out.with_name(out.name + ".partial")
    shutil.rmtree(part, ignore_errors=True)
    out.parent.mkdir(parents=True, exist_ok=True)
    om = out.parent / f"{nodes}-{int(t0)}.om"
    if not om.exists() or os.environ.get("BENCH_FRESH"):
        write(om, nodes, t0, steps, STEP)
    promtool = require_binary("promtool")
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(part)]
    r = subprocess.run(argv, capture_output=True, timeout=3 * 3600, check=False)
    if r.returncode != 0:
        raise RuntimeError(f"promtool: {r.stderr.decode()[-400:]}")
    om.unlink()
    part.chmod(0o777)
    part.rename(out)
    return out


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def _cycles(url: str, t_cold: float) -> dict[str, Any]:
    src = PrometheusSource(url, window=WINDOW, step=STEP, timeout=120.0)
    engine = Engine(default_detectors())
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        w = await src.read(t_cold + 5)
        cold_wall, cold_cpu = time.perf_counter() - w0, time.process_time() - c0
        cold_bytes = src.stats.cycle_bytes
        engine.cycle(w)
        walls, cpus, reads, engines = [], [], [], []
        before = dict(src.stats.seconds)
        for k in range(1, CYCLES + 1):
            w0, c0 = time.perf_counter(), time.process_time()
            w = await src.read(t_cold + k * STEP + 5)
            e0 = time.perf_counter()
            findings = engine.cycle(w)
            engines.append(time.perf_counter() - e0)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            reads.append(src.stats.cycle_bytes)
        return {
            "cold_wall": cold_wall, "cold_cpu": cold_cpu, "cold_mb": cold_bytes / 1e6,
            "wall": statistics.median(walls), "wall_max": max(walls),
            "cpu": statistics.median(cpus), "mb": statistics.median(reads) / 1e6,
            "engine": statistics.median(engines), "findings": len(findings),
            "kinds": sorted({f.kind for f in findings}), "missing": w.missing,
            "series": sum(src.stats.series.values()),
            "slowest": sorted(((v - before.get(k, 0.0)) / CYCLES, k) for k, v in src.stats.seconds.items())[-3:],
        }  # fmt: skip
    finally:
        await src.close()


def run(quick: bool) -> list[dict[str, Any]]:
    sizes = os.environ.get("BENCH_NODES", "128" if quick else "128,1024")
    steps = round(WINDOW / STEP) + 1 + CYCLES
    t0 = (time.time() // 7200) * 7200 - 6 * 3600  # well inside the TSDB's head-free past
    rows: list[dict[str, Any]] = []
    for nodes in [int(x) for x in sizes.split(",")]:
        g0 = time.perf_counter()
        data = _tsdb(nodes, t0, steps)
        fill = time.perf_counter() - g0
        t_cold = t0 + STEP * (steps - 1 - CYCLES)
        with run_prometheus(
            "global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data
        ) as p:
            r = asyncio.run(_cycles(p.url, t_cold))
        n = nodes
        note = f"median of {CYCLES}; max {r['wall_max']:.2f} s; engine-only {r['engine']:.3f} s"
        rows += [
            {"name": f"prom_{n}_cold_start", "value": round(r["cold_wall"], 2), "unit": "s",
             "note": f"first read, full window: {r['cold_mb']:.1f} MB, CPU {r['cold_cpu']:.2f} s"},
            {"name": f"prom_{n}_cycle_wall", "value": round(r["wall"], 3), "unit": "s",
             "note": f"{note} (read/engine {r['wall'] / max(r['engine'], 1e-9):.1f}x)"},
            {"name": f"prom_{n}_cycle_cpu", "value": round(r["cpu"], 3), "unit": "s",
             "note": "analyzer process CPU per steady-state cycle (read + engine)"},
            {"name": f"prom_{n}_cycle_read", "value": round(r["mb"], 3), "unit": "MB",
             "note": f"response bytes per steady-state cycle; window holds {r['series']:.0f} series"},
            {"name": f"prom_{n}_bytes_per_node", "value": round(r["mb"] * 1e6 / n), "unit": "B",
             "note": "per node per cycle"},
            {"name": f"prom_{n}_cpu_per_node", "value": round(r["cpu"] * 1e6 / n), "unit": "us",
             "note": "analyzer CPU per node per cycle"},
            {"name": f"prom_{n}_peak_rss", "value": round(_rss_mib()), "unit": "MiB",
             "note": f"analyzer process peak RSS so far; findings: {', '.join(r['kinds'])}"},
            {"name": f"prom_{n}_slowest_queries", "value": round(r["slowest"][-1][0], 3), "unit": "s",
             "note": "; ".join(f"{k.removeprefix('gpuwarden_')} {v:.2f}" for v, k in reversed(r["slowest"]))},
            {"name": f"prom_{n}_tsdb_fill", "value": round(fill, 1), "unit": "s",
             "note": "simulate + promtool backfill (0 when cached)"
             + (f"; MISSING {r['missing']}" if r["missing"] else "")},
        ]  # fmt: skip
    return rows
