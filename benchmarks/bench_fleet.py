"""Fleet simulator cost: virtual-time stepping, and serving a fleet to a real Prometheus.

- virtual time: steps/s and samples/s of ``Fleet.step`` at 1,024 nodes, against a bare numpy
  pass over arrays of the same shapes (one allocation + one add per array, the floor of
  building a frame), and the projected wall time of 256 nodes x 24 h at 15 s resolution;
- serving: Prometheus scrapes every node of ``gpuwarden simulate`` every interval; scrape
  latency (Prometheus's own ``scrape_duration_seconds``), targets up, and the simulator
  process's CPU share and RSS, against the in-process cost of one node's collectors + render
  (what one real exporter spends per scrape).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.procstat import cpu_seconds, stat_fields
from exporter.assemble import collectors_for
from exporter.exposition import render
from gpuwarden.processes import free_port_block
from simulator.fleet import Fleet
from simulator.node_view import NodeView
from tests.realcomp import http_get, run_prometheus, wait_until, world_readable_tmpdir

Row = dict[str, Any]


def _row(name: str, value: float, unit: str, note: str = "") -> Row:
    return {"name": name, "value": value, "unit": unit, "note": note}


def _step_rate(nodes: int, steps: int) -> tuple[float, int, list[np.ndarray]]:
    fleet = Fleet(nodes, seed=1)
    frame = fleet.step(15.0)
    t0 = time.perf_counter()
    for i in range(steps):
        frame = fleet.step(30.0 + 15.0 * i)
    dt = time.perf_counter() - t0
    arrays = [*frame.metrics.values(), *frame.ib_counters.values()]
    return steps / dt, sum(a.size for a in arrays), arrays


def _numpy_floor(arrays: list[np.ndarray], steps: int) -> float:
    t0 = time.perf_counter()
    for _ in range(steps):
        for a in arrays:
            np.add(a, 1.0)
    return steps / (time.perf_counter() - t0)


def virtual_time(quick: bool) -> list[Row]:
    steps = 20 if quick else 120
    rate, samples, arrays = _step_rate(1024, steps)
    floor = _numpy_floor(arrays, steps)
    rate256, _, _ = _step_rate(256, steps)
    day = 86400 / 15
    return [
        _row("virtual steps/s, 1,024 nodes", rate, "steps/s", f"{samples:,} samples per step"),
        _row("virtual samples/s, 1,024 nodes", rate * samples, "samples/s"),
        _row(
            "baseline: bare numpy pass, same arrays",
            floor * samples,
            "samples/s",
            f"Fleet.step costs {floor / rate:.1f}x the floor",
        ),
        _row(
            "256 nodes x 24 h at 15 s (projected)",
            day / rate256,
            "s",
            f"{rate256:.0f} steps/s at 256 nodes; goal: a few minutes",
        ),
    ]


def _node_render_ms(reps: int = 5) -> float:
    fleet = Fleet(4, seed=1)
    frame = fleet.step(15)
    view = NodeView("gpu-node-001", 0)
    cols = collectors_for(view.name, view.nvml, view.sysfs, view.kmsg)
    times = []
    for i in range(reps):
        frame = fleet.step(30 + 15 * i)
        t0 = time.perf_counter()
        view.refresh(frame, [])
        render([s for col in cols for s in col.collect()])
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def _family(pid: int) -> list[int]:
    """``pid`` and its direct children (the --workers processes)."""
    kids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if int(stat_fields(int(d.name))[1]) == pid:
                    kids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                continue
    return [pid, *kids]


def _cpu_s(pids: list[int]) -> float:
    return sum(cpu_seconds(pid) for pid in pids)


def _rss_mib(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                total += int(line.split()[1]) / 1024
    return total


def _scalar(prom: Any, expr: str) -> float:
    res = prom.query(expr)
    return float(res[0]["value"][1]) if res else float("nan")


def serving(
    nodes: int, interval: float, measure_s: float, workers: int = 1, stale: float = 0.0
) -> list[Row]:
    d = world_readable_tmpdir("gpuwarden-bench-fleet-")
    sd, port = d / "targets.json", free_port_block(workers)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwarden", "simulate", "--nodes", str(nodes), "--seed", "1",
         "--listen", f"127.0.0.1:{port}", "--file-sd", str(sd), "--tick", str(interval / 3),
         "--workers", str(workers), "--max-staleness", str(stale), "--log-level", "warning"],
    )  # fmt: skip
    try:
        wait_until(lambda: http_get(f"http://127.0.0.1:{port}/healthz") and sd.exists(), 60)
        config = (
            f"global: {{scrape_interval: {interval:g}s, scrape_timeout: {interval:g}s}}\n"
            "scrape_configs:\n  - job_name: fleet\n    honor_labels: true\n"
            f"    file_sd_configs: [{{files: ['{sd}']}}]\n"
        )
        with run_prometheus(config) as prom:
            wait_until(lambda: _scalar(prom, "count(up)") == nodes, 60, 0.5, "targets")
            time.sleep(interval)  # one full round before measuring
            pids = _family(proc.pid)
            cpu0, t0 = _cpu_s(pids), time.monotonic()
            time.sleep(measure_s)
            cpu = (_cpu_s(pids) - cpu0) / (time.monotonic() - t0)
            rss = _rss_mib(pids)
            w = f"[{int(measure_s)}s]"
            sd_q = "scrape_duration_seconds{job='fleet'}"
            p50 = _scalar(prom, f"quantile(0.5, avg_over_time({sd_q}{w}))")
            p99 = _scalar(prom, f"quantile(0.99, max_over_time({sd_q}{w}))")
            up = _scalar(prom, f"avg(avg_over_time(up{{job='fleet'}}{w}))")
            series = _scalar(prom, "sum(scrape_samples_scraped{job='fleet'})")
        per_node = _node_render_ms()
        need = nodes * per_node / 1e3 / interval
        load = os.getloadavg()[0]
        return [
            _row(f"scrape latency p50, {nodes} nodes every {interval:g}s", p50 * 1e3, "ms",
                 f"scrape timeout {interval:g}s"),
            _row(f"scrape latency p99, {nodes} nodes", p99 * 1e3, "ms", "max per target, p99"),
            _row("targets up", up, "ratio", f"{series:,.0f} samples per round"),
            _row("simulator CPU share", cpu, "cores",
                 f"{workers} worker(s), max staleness {stale:g}s; load average {load:.1f}"),
            _row("simulator RSS", rss, "MiB", f"all {workers} worker(s)"),
            _row("baseline: one node's collectors + render", per_node, "ms",
                 f"x {nodes} nodes / {interval:g}s = {need:.2f} cores needed"),
            _row(f"nodes one core can serve every {interval:g}s", interval * 1e3 / per_node,
                 "nodes", "at the baseline cost per node"),
        ]  # fmt: skip
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:  # busy rendering a backlog of scrapes: stop it hard
            proc.kill()
            proc.wait(10)


def run(quick: bool) -> list[Row]:
    rows = virtual_time(quick)
    if quick:
        return rows + serving(64, 5.0, 20.0)
    workers = min(8, os.cpu_count() or 1)
    rows += serving(1024, 15.0, 90.0, workers)
    return rows + serving(1024, 15.0, 90.0, workers, stale=120.0)
    return rows
