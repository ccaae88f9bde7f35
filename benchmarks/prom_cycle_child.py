"""One analyzer's cycles against a running Prometheus, in a process of its own.

Run by :mod:`benchmarks.bench_analyzer_prometheus` as ``python prom_cycle_child.py URL T_COLD``
with ``PYTHONPATH`` naming the source tree to measure: this checkout, or a baseline commit
unpacked beside it (``BENCH_BASELINE``), so both are measured in the same run against the same
server. Prints one JSON object: cold start, per steady-state cycle the wall and CPU
(``time.process_time``) of read + engine, bytes read, the engine alone, the findings of every
cycle (their verdict fields, to compare the two trees), and the process's peak RSS. Uses only
the analyzer's long-standing API (``PrometheusSource``, ``Engine``, ``default_detectors``).
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import time
from typing import Any

STEP, WINDOW, CYCLES = 15.0, 600.0, 8


async def _cycles(url: str, t_cold: float) -> dict[str, Any]:
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.sources.prometheus import PrometheusSource

    src = PrometheusSource(url, window=WINDOW, step=STEP, timeout=120.0, discover=True)
    engine = Engine(default_detectors())
    try:
        w0, c0 = time.perf_counter(), time.process_time()
        w = await src.read(t_cold + 5)
        cold_wall, cold_cpu = time.perf_counter() - w0, time.process_time() - c0
        cold_bytes = src.stats.cycle_bytes
        engine.cycle(w)
        walls, cpus, reads, engines, engine_cpus, verdicts = [], [], [], [], [], []
        before = dict(src.stats.seconds)
        for k in range(1, CYCLES + 1):
            w0, c0 = time.perf_counter(), time.process_time()
            w = await src.read(t_cold + k * STEP + 5)
            e0, ec0 = time.perf_counter(), time.process_time()
            findings = engine.cycle(w)
            engines.append(time.perf_counter() - e0)
            engine_cpus.append(time.process_time() - ec0)
            walls.append(time.perf_counter() - w0)
            cpus.append(time.process_time() - c0)
            reads.append(src.stats.cycle_bytes)
            verdicts.append(sorted(
                [f.node, f.subject, f.kind, f.severity, f.action, f.detector, f.since]
                for f in findings
            ))  # fmt: skip
        slowest = sorted(
            ((v - before.get(k, 0.0)) / CYCLES, k) for k, v in src.stats.seconds.items()
        )[-3:]
        return {
            "cold_wall": cold_wall, "cold_cpu": cold_cpu, "cold_mb": cold_bytes / 1e6,
            "walls": walls, "cpus": cpus, "engines": engines, "engine_cpus": engine_cpus,
            "reads": reads, "verdicts": verdicts,
            "findings": len(findings), "kinds": sorted({f.kind for f in findings}),
            "missing": list(w.missing), "series": sum(src.stats.series.values()),
            "slowest": slowest,
        }  # fmt: skip
    finally:
        await src.close()


def main(argv: list[str]) -> int:
    r = asyncio.run(_cycles(argv[1], float(argv[2])))
    r["rss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    json.dump(r, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
