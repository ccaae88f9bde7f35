"""The analyzer on the deployed path: reading a real Prometheus at 128, 1,024 and 4,096 nodes.

The TSDB is filled by ``promtool tsdb create-blocks-from openmetrics`` from the fleet
simulator (:mod:`benchmarks.fleet_openmetrics`: every series the analyzer reads, with the
exporter's labels, 15 s steps, a few faults starting inside the span); then a real Prometheus
serves it and the analyzer runs a cold start followed by steady-state cycles at the scrape
interval (virtual time, back to back). Per size: cold start, steady-state cycle wall and
analyzer CPU, MB read, bytes and CPU per node per cycle, the process's peak RSS, and the
engine-only cycle on the same window with the read/engine ratio. The generated TSDB is cached
under ``.bench-cache/`` (``BENCH_FRESH=1`` rebuilds it). ``BENCH_NODES=128,1024,4096`` picks
sizes (default 128 and 1,024; ``make bench-prometheus`` runs all three). promtool holds a
block's series in memory (about 10 GB per 1,024 nodes), so the history is backfilled in
ranges of ``BENCH_PART`` nodes (512) and Prometheus merges the overlapping blocks once.
``BENCH_TELEMETRY=dcgm-exporter`` records the same fleet as dcgm-exporter + node_exporter serve
it (rows ``prom_dcgm_<n>_*``): the analyzer reads it through its dialect readers.
"""

from __future__ import annotations

import asyncio
import hashlib
import multiprocessing
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
from analyzer.sources.queries import QUERIES
from benchmarks.fleet_openmetrics import write
from tests.realcomp import require_binary, run_prometheus

STEP, WINDOW, CYCLES = 15.0, 600.0, 8
TELEMETRY = os.environ.get("BENCH_TELEMETRY", "gpuwarden")
# a cached TSDB holds the families the recorder wrote: a change to them starts a new cache
_FAMILIES = ",".join(sorted(q.name + (f"+{q.gate.metric.name}" if q.gate else "") for q in QUERIES))
CACHE = (
    Path(__file__).resolve().parents[1] / ".bench-cache" / "analyzer-prometheus"
    / (hashlib.sha256(_FAMILIES.encode()).hexdigest()[:10]
       + ("" if TELEMETRY == "gpuwarden" else f"-{TELEMETRY}"))
)  # fmt: skip


def _cached(nodes: int) -> tuple[Path, float] | None:
    """A TSDB built earlier for this size (any start time within Prometheus's retention)."""
    if os.environ.get("BENCH_FRESH"):
        return None
    for d in sorted(CACHE.glob(f"{nodes}-nodes-*"), reverse=True):
        if (
            not d.name.endswith(".partial")
            and time.time() - float(d.name.rsplit("-", 1)[1]) < 7 * 86400
        ):
            return d, float(d.name.rsplit("-", 1)[1])
    return None


def _tsdb(nodes: int, t0: float, steps: int) -> Path:
    """Backfill the simulator's history in node ranges of ``BENCH_PART`` nodes (promtool holds a
    whole block's series in memory: ~10 GB per 1,024 nodes), then let Prometheus merge the
    overlapping blocks once, so the benchmark queries one block as a long-running server would."""
    out = CACHE / f"{nodes}-nodes-{int(t0)}"
    part = out.with_name(out.name + ".partial")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    promtool = require_binary("promtool")
    size = int(os.environ.get("BENCH_PART", "512"))
    for lo in range(0, nodes, size):
        om = out.parent / f"{nodes}-{int(t0)}-{lo}.om"
        write(om, nodes, t0, steps, STEP, part=(lo, min(lo + size, nodes)), telemetry=TELEMETRY)
        argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(part)]
        r = subprocess.run(argv, capture_output=True, timeout=3 * 3600, check=False)
        om.unlink()
        if r.returncode != 0:
            raise RuntimeError(f"promtool: {r.stderr.decode()[-400:]}")
    part.chmod(0o777)
    if nodes > size:
        _compact(part)
    part.rename(out)
    return out


def _blocks(data: Path) -> list[Path]:
    return [d for d in data.iterdir() if d.is_dir() and (d / "meta.json").exists()]


def _compact(data: Path) -> None:
    """Run Prometheus on ``data`` until its compactor has merged the overlapping blocks."""
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data):
        deadline = time.monotonic() + 3600
        while len(_blocks(data)) > 1 and time.monotonic() < deadline:
            time.sleep(5)
    if len(_blocks(data)) > 1:
        raise RuntimeError(f"{data}: Prometheus left {len(_blocks(data))} overlapping blocks")


def _child(url: str, t_cold: float) -> dict[str, Any]:
    """The analyzer's cycles in a process of its own (spawned: its peak RSS is the analyzer's
    alone, not the simulator's that filled the TSDB)."""
    r = asyncio.run(_cycles(url, t_cold))
    r["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return r


def _hwm_mib(pid: int) -> float:
    """Peak RSS of a running process (Prometheus)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def _cycles(url: str, t_cold: float) -> dict[str, Any]:
    src = PrometheusSource(url, window=WINDOW, step=STEP, timeout=120.0, discover=True)
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
    base = (time.time() // 7200) * 7200 - 6 * 3600  # well inside the TSDB's head-free past
    rows: list[dict[str, Any]] = []
    for nodes in [int(x) for x in sizes.split(",")]:
        g0 = time.perf_counter()
        hit = _cached(nodes)
        data, t0 = hit if hit else (_tsdb(nodes, base, steps), base)
        fill = time.perf_counter() - g0
        t_cold = t0 + STEP * (steps - 1 - CYCLES)
        with run_prometheus(
            "global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data
        ) as p:
            with multiprocessing.get_context("spawn").Pool(1) as pool:
                r = pool.apply(_child, (p.url, t_cold))
            prom_rss = _hwm_mib(p.proc.pid)
        n, tag = nodes, (nodes if TELEMETRY == "gpuwarden" else f"dcgm_{nodes}")
        note = f"median of {CYCLES}; max {r['wall_max']:.2f} s; engine-only {r['engine']:.3f} s"
        rows += [
            {"name": f"prom_{tag}_cold_start", "value": round(r["cold_wall"], 2), "unit": "s",
             "note": f"first read, full window: {r['cold_mb']:.1f} MB, CPU {r['cold_cpu']:.2f} s"},
            {"name": f"prom_{tag}_cycle_wall", "value": round(r["wall"], 3), "unit": "s",
             "note": f"{note} (read/engine {r['wall'] / max(r['engine'], 1e-9):.1f}x)"},
            {"name": f"prom_{tag}_cycle_cpu", "value": round(r["cpu"], 3), "unit": "s",
             "note": "analyzer process CPU per steady-state cycle (read + engine)"},
            {"name": f"prom_{tag}_cycle_read", "value": round(r["mb"], 3), "unit": "MB",
             "note": f"response bytes per steady-state cycle; window holds {r['series']:.0f} series"},
            {"name": f"prom_{tag}_bytes_per_node", "value": round(r["mb"] * 1e6 / n), "unit": "B",
             "note": "per node per cycle"},
            {"name": f"prom_{tag}_cpu_per_node", "value": round(r["cpu"] * 1e6 / n), "unit": "us",
             "note": "analyzer CPU per node per cycle"},
            {"name": f"prom_{tag}_peak_rss", "value": round(r["rss"]), "unit": "MiB",
             "note": f"analyzer process peak RSS; findings: {', '.join(r['kinds'])}"},
            {"name": f"prom_{tag}_prometheus_rss", "value": round(prom_rss), "unit": "MiB",
             "note": "Prometheus peak RSS (serving the window's history)"},
            {"name": f"prom_{tag}_slowest_queries", "value": round(r["slowest"][-1][0], 3), "unit": "s",
             "note": "; ".join(f"{k.removeprefix('gpuwarden_')} {v:.2f}" for v, k in reversed(r["slowest"]))},
            {"name": f"prom_{tag}_tsdb_fill", "value": round(fill, 1), "unit": "s",
             "note": "simulate + promtool backfill (0 when cached)"
             + (f"; MISSING {r['missing']}" if r["missing"] else "")},
        ]  # fmt: skip
    per_node = {r["name"]: r["value"] for r in rows if r["name"].endswith("_per_node")}
    ns: list[int | str] = [int(x) if TELEMETRY == "gpuwarden" else f"dcgm_{x}"
                           for x in sizes.split(",")]  # fmt: skip
    if len(ns) > 1:
        lo, hi = ns[0], ns[-1]
        for what, unit in (("bytes", "B"), ("cpu", "us")):
            a, b = per_node[f"prom_{lo}_{what}_per_node"], per_node[f"prom_{hi}_{what}_per_node"]
            rows.append({"name": f"prom_{what}_per_node_growth", "value": round(b / max(a, 1e-9), 2),
                         "unit": "x", "note": f"{lo} -> {hi} nodes: {a:g} -> {b:g} {unit} per node per cycle"})  # fmt: skip
    return rows
