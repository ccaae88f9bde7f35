"""The fleet pass split across analyzer replicas (issue 33, item 3b), by simulation: one
fleet's window (:func:`benchmarks.bench_analyzer.synthetic_window`: 16-node jobs, 32-node
leaves), judged whole by the single-process analyzer and then by 1, 2, 4 and 8 replicas that
own its units by rendezvous hash (:mod:`analyzer.replicas`). Each judgement runs in its own
fresh process (spawned, imports warmed on a small window first), so the CPU seconds and the
peak RSS are that replica's own: per replica count, the slowest replica's cycle wall time and
CPU, its peak RSS, and the bytes of the window part it holds (what a node-restricted read
would fetch), with ratios against the single process measured in the same run.

``BENCH_SCALE_NODES`` picks the fleet size (default 2048; quick: 512; 12500 for the
issue's fleet, about 10 minutes on 2 cores). The window is the analyzer's dense arrays, not a
Prometheus read: the replicas' reads through a TSDB are not measured here.
"""

from __future__ import annotations

import multiprocessing
import os
import resource
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
    return rows
