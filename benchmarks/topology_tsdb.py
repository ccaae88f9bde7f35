"""A TSDB of a whole fleet's topology families only (issue 33, item 3b at 12,500 nodes).

A raw history of 12,500 nodes (~13 million series) cannot be backfilled on a 2-core machine;
what a replica reads of the *whole* fleet each cycle can: the topology
(:mod:`analyzer.sources.topology`: the presence families, the allocation pairs, the NVLink
domains). This writes those families for ``nodes`` nodes of 8 GPUs and 8 IB ports over the
analyzer's window (``gpu_up``, ``gpu_allocation_info`` in 36-node jobs with one node in 36
idle, ``gpu_fabric_info`` in 18-node NVL72-like domains, two a job, ``infiniband_port_state``) as
OpenMetrics, backfills them with promtool in node ranges and caches the TSDB like
:mod:`benchmarks.bench_analyzer_prometheus`. A replica reading it does its whole read (topology,
then its own nodes' families), and the families absent here cost it what an empty answer costs.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

from benchmarks.fleet_openmetrics import backfill
from exporter import catalog as c
from tests.realcomp import require_binary

CACHE = Path(__file__).resolve().parents[1] / ".bench-cache" / "topology"
GPUS, PORTS, JOB, DOMAIN = 8, 8, 36, 18  # a job of two NVL72-like domains
PART = 4096  # nodes per promtool run (it holds a block's series in memory)


def _lines(lo: int, hi: int, t0: float, steps: int, step: float) -> Iterator[str]:
    for name, kind in ((c.GPU_UP, "gauge"), (c.GPU_ALLOCATION_INFO, "gauge"),
                       (c.GPU_FABRIC_INFO, "gauge"), (c.IB_PORT_STATE, "gauge")):  # fmt: skip
        yield f"# TYPE {name.name} {kind}\n"
        for i in range(lo, hi):
            node = f"gpu-node-{i:05d}"
            rows: list[tuple[str, float]] = []
            if name is c.IB_PORT_STATE:
                rows = [(f'node="{node}",device="mlx5_{p}",port="1"', 4.0) for p in range(PORTS)]
            elif name is c.GPU_ALLOCATION_INFO:
                if i % JOB != JOB - 1:  # one node a job's domains idle
                    rows = [(f'node="{node}",gpu="{g}",uuid="GPU-{i}-{g}",job_id="{i // JOB}",'
                             f'scheduler="slurm"', 1.0) for g in range(GPUS)]  # fmt: skip
            elif name is c.GPU_FABRIC_INFO:
                rows = [(f'node="{node}",gpu="{g}",uuid="GPU-{i}-{g}",state="completed",'
                         f'status="success",cluster_uuid="cl-{i // DOMAIN:05d}",clique_id="1"', 1.0)
                        for g in range(GPUS)]  # fmt: skip
            else:
                rows = [(f'node="{node}",gpu="{g}",uuid="GPU-{i}-{g}",reason=""', 1.0)
                        for g in range(GPUS)]  # fmt: skip
            for labels, value in rows:
                for k in range(steps):
                    yield f"{name.name}{{{labels}}} {value} {t0 + k * step:.3f}\n"
    yield "# EOF\n"


def tsdb(nodes: int, t0: float, steps: int, step: float, cache: Path = CACHE) -> Path:
    """The cached TSDB of ``nodes`` nodes' topology families from ``t0``, built if missing."""
    out = cache / f"{nodes}-nodes-{int(t0)}-{steps}"
    if out.exists() and not os.environ.get("BENCH_FRESH"):
        return out
    part = out.with_name(out.name + ".partial")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    promtool = require_binary("promtool")
    for lo in range(0, nodes, PART):
        om = cache / f"{out.name}-{lo}.om"
        with open(om, "w") as f:
            f.writelines(_lines(lo, min(lo + PART, nodes), t0, steps, step))
        backfill(promtool, om, part, timeout=3600)
    part.chmod(0o777)
    part.rename(out)
    return out


def cached_start(nodes: int, steps: int) -> float | None:
    """The start time of a TSDB built earlier for this size, within Prometheus' retention."""
    for d in sorted(CACHE.glob(f"{nodes}-nodes-*-{steps}"), reverse=True):
        t0 = float(d.name.split("-")[2])
        if time.time() - t0 < 7 * 86400 and not os.environ.get("BENCH_FRESH"):
            return t0
    return None
