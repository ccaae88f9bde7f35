"""The fleet pass split across analyzer replicas (issue 33, item 3b), by simulation: one
fleet's window (:func:`benchmarks.bench_analyzer.synthetic_window`: 16-node jobs, 32-node
leaves), judged whole by the single-process analyzer and then by 1, 2, 4 and 8 replicas that
own its units by rendezvous hash (:mod:`analyzer.replicas`). Each judgement runs in its own
fresh process (spawned, imports warmed on a small window first), so the CPU seconds and the
peak RSS are that replica's own: per replica count, the slowest replica's cycle wall time and
CPU, its peak RSS, and the bytes of the window part it holds (what a node-restricted read
would fetch), with ratios against the single process measured in the same run.

``BENCH_SCALE_NODES`` picks the fleet size (default 2048; quick: 512; 12500 for the
issue's fleet, about 10 minutes on 2 cores). The window is the analyzer's dense arrays.

Then the reads (rows ``scale_read_*``): a simulated fleet of ``BENCH_SCALE_READ_NODES`` nodes
(default 256; quick: 128) backfilled into a real Prometheus (the TSDB of
:mod:`benchmarks.bench_analyzer_prometheus`, cached alike), read by one analyzer and by each
replica of 1, 2, 4 and 8 reading only the nodes it owns (the topology, then its nodes' series):
a cold start and steady-state cycles at the scrape interval. Per replica count: the bytes the
largest reader fetched a steady cycle and at its cold start, the bytes of all replicas
together, the read's CPU, and whether the replicas' findings together equal the single
analyzer's on every cycle (``marginal`` included: the replicas exchange their scores).
``BENCH_TELEMETRY=dcgm-exporter`` reads the fleet as dcgm-exporter + node_exporter serve it
(rows ``scale_read_dcgm_<n>_*``): each replica narrows the foreign families to its hosts.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.replicas.slicing import subwindow, window_bytes
from analyzer.window import Window
from benchmarks.bench_analyzer import synthetic_window

REPLICAS = (1, 2, 4, 8)


def _peak_rss_mib() -> float:
    """This process's peak RSS: ``VmHWM`` (``ru_maxrss`` would carry the parent's peak over
    the spawn's exec on Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _judge(window: Window, whole: bool) -> dict[str, float]:
    """In the child: warm up on a small window, then one measured cycle."""
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.replicas.judge import judge

    Engine(default_detectors()).cycle(synthetic_window(32))
    engine = Engine(default_detectors())
    wall0, cpu0 = time.perf_counter(), time.process_time()
    everyone = range(len(window.nodes))
    found = engine.cycle(window) if whole else judge(engine, window, everyone)
    return {"wall": time.perf_counter() - wall0, "cpu": time.process_time() - cpu0,
            "rss": _peak_rss_mib(),
            "findings": float(len(found))}  # fmt: skip


def _in_child(window: Window, whole: bool) -> dict[str, float]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_judge, (window, whole))


def run(quick: bool) -> list[dict[str, Any]]:
    nodes = int(os.environ.get("BENCH_SCALE_NODES", "512" if quick else "2048"))
    window = synthetic_window(nodes)
    parts = units(window)
    single = _in_child(window, whole=True)
    full_bytes = window_bytes(window)
    rows: list[dict[str, Any]] = [
        {"name": f"scale_{nodes}_single_cycle_cpu", "value": round(single["cpu"], 3),
         "unit": "s", "note": f"one process, whole fleet; wall {single['wall']:.2f} s, "
                              f"{single['findings']:.0f} findings"},
        {"name": f"scale_{nodes}_single_peak_rss", "value": round(single["rss"], 1),
         "unit": "MiB", "note": f"window {full_bytes / 2**20:.0f} MiB; {len(parts)} units"},
    ]  # fmt: skip
    for r in REPLICAS:
        names = [f"analyzer-{i}" for i in range(r)]
        per = []
        for mine in assign(parts, names).values():
            part = subwindow(window, owned_nodes(parts, mine))
            got = _in_child(part, whole=False)
            per.append({**got, "bytes": window_bytes(part), "nodes": len(part.nodes)})
        worst = max(per, key=lambda p: p["cpu"])
        found = sum(p["findings"] for p in per)
        nodes_max = max(p["nodes"] for p in per)
        rows += [
            {"name": f"scale_{nodes}_{r}_replicas_cycle_cpu", "value": round(worst["cpu"], 3),
             "unit": "s", "note": f"slowest replica ({nodes_max} nodes max); "
                                  f"{worst['cpu'] / single['cpu']:.2f}x single; "
                                  f"wall {worst['wall']:.2f} s; {found:.0f} findings in all"},
            {"name": f"scale_{nodes}_{r}_replicas_peak_rss",
             "value": round(max(p["rss"] for p in per), 1), "unit": "MiB",
             "note": f"{max(p['rss'] for p in per) / single['rss']:.2f}x single "
                     "(its window part, received pickled, and the loaded detectors included)"},
            {"name": f"scale_{nodes}_{r}_replicas_window_bytes",
             "value": round(max(p["bytes"] for p in per) / 2**20, 1), "unit": "MiB",
             "note": f"largest part; {max(p['bytes'] for p in per) / full_bytes:.2f}x the fleet's"},
        ]  # fmt: skip
    return rows + _reads(quick)


READ_CYCLES = 4  # steady-state cycles after the cold start


def _mine(topology: Window, me: str, names: list[str]) -> set[str]:
    parts = units(topology)
    return {topology.nodes[i] for i in owned_nodes(parts, assign(parts, names)[me])}


async def _read_cycles(url: str, t_cold: float, names: list[str]) -> list[dict[str, Any]]:
    """Readers (one, of the whole fleet, when ``names`` is empty) through a cold start and
    :data:`READ_CYCLES` steady cycles, each cycle all replicas' reads then their judgement
    with the marginal scores exchanged (as the service does): per reader its bytes, read CPU
    and node count; in the first, every cycle's findings of all readers together."""
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.replicas.judge import joined, judge, scores
    from analyzer.sources.prometheus import PrometheusSource
    from benchmarks.bench_analyzer_prometheus import STEP, WINDOW

    who = names or [""]
    srcs = {me: PrometheusSource(url, window=WINDOW, step=STEP, timeout=120.0, discover=True)
            for me in who}  # fmt: skip
    for me, src in srcs.items():
        if names:
            src.scope = lambda topo, me=me: _mine(topo, me, names)
    engines = {me: Engine(default_detectors()) for me in who}
    out: list[dict[str, Any]] = [{"bytes": [], "cpu": [], "found": [], "nodes": 0} for _ in who]
    try:
        for k in range(READ_CYCLES + 1):
            windows = {}
            for me, o in zip(who, out, strict=True):
                c0 = time.process_time()
                windows[me] = w = await srcs[me].read(t_cold + k * STEP + 5)
                o["cpu"].append(time.process_time() - c0)
                o["bytes"].append(srcs[me].stats.cycle_bytes)
                o["nodes"] = len(w.nodes)
            keep = {me: range(len(w.nodes)) for me, w in windows.items()}
            mine = {me: scores(engines[me], w, keep[me]) for me, w in windows.items() if names}
            found = set()
            for me, w in windows.items():
                others = joined(s for o, s in mine.items() if o != me) if names else None
                found |= {(f.node, f.subject, f.kind, f.severity, f.action)
                          for f in judge(engines[me], w, keep[me], others, me == min(who))}  # fmt: skip
            out[0]["found"].append(found)
    finally:
        for src in srcs.values():
            await src.close()
    return out


def _reads(quick: bool) -> list[dict[str, Any]]:
    from benchmarks.bench_analyzer_prometheus import (
        CYCLES,
        STEP,
        TELEMETRY,
        WINDOW,
        _cached,
        _tsdb,
    )
    from tests.realcomp import run_prometheus

    nodes = int(os.environ.get("BENCH_SCALE_READ_NODES", "128" if quick else "256"))
    tag = nodes if TELEMETRY == "gpuwarden" else f"dcgm_{nodes}"
    steps = round(WINDOW / STEP) + 1 + CYCLES
    base = (time.time() // 7200) * 7200 - 6 * 3600
    hit = _cached(nodes)
    data, t0 = hit if hit else (_tsdb(nodes, base, steps), base)
    t_cold = t0 + STEP * (steps - 1 - CYCLES)
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n",
                        data_dir=data) as p:  # fmt: skip
        (single,) = asyncio.run(_read_cycles(p.url, t_cold, []))
        per_count = {}
        for r in REPLICAS:
            names = [f"analyzer-{i}" for i in range(r)]
            per_count[r] = asyncio.run(_read_cycles(p.url, t_cold, names))
    steady = statistics.median(single["bytes"][1:])
    rows: list[dict[str, Any]] = [
        {"name": f"scale_read_{tag}_single_bytes", "value": round(steady / 1e6, 3),
         "unit": "MB", "note": f"one analyzer, whole fleet, steady cycle (median of "
                               f"{READ_CYCLES}); cold start {single['bytes'][0] / 1e6:.1f} MB; "
                               f"read CPU {statistics.median(single['cpu'][1:]):.3f} s; "
                               f"{len(single['found'][-1])} findings the last cycle, "
                               f"{sum(x[2] == 'marginal' for x in single['found'][-1])} "
                               "marginal"},
    ]  # fmt: skip
    for r, per in per_count.items():
        each = [statistics.median(x["bytes"][1:]) for x in per]
        cold = [x["bytes"][0] for x in per]
        cpu = max(statistics.median(x["cpu"][1:]) for x in per)
        same = sum(per[0]["found"][k] == single["found"][k] for k in range(READ_CYCLES + 1))
        rows += [
            {"name": f"scale_read_{tag}_{r}_replicas_bytes", "value": round(max(each) / 1e6, 3),
             "unit": "MB", "note": f"largest replica's steady cycle "
                                   f"({max(x['nodes'] for x in per)} nodes max); "
                                   f"{max(each) / steady:.2f}x single; all replicas "
                                   f"{sum(each) / steady:.2f}x; cold start "
                                   f"{max(cold) / 1e6:.1f} MB ({max(cold) / single['bytes'][0]:.2f}x)"},
            {"name": f"scale_read_{tag}_{r}_replicas_read_cpu", "value": round(cpu, 3),
             "unit": "s", "note": f"slowest replica's read, steady cycle; "
                                  f"{cpu / statistics.median(single['cpu'][1:]):.2f}x single"},
            {"name": f"scale_read_{tag}_{r}_replicas_same_findings", "value": same,
             "unit": f"/{READ_CYCLES + 1}",
             "note": "cycles whose findings, all replicas together, equal the single analyzer's"},
        ]  # fmt: skip
    return rows
