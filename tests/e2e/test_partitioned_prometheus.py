"""Partitioned GPUs through a real Prometheus: a MIG H100 node served by the exporter's own
collectors and a CPX MI300X node served as DME serves it (64 ``gpu_id``s, the physical sensors
and ECC on partition 0), scraped by Prometheus and read by the analyzer's Prometheus source
with dialect discovery. An XID on GPU instance 9 and an HBM error under a partition are each
found on their node's physical GPU; the CPX node reads as its 8 GPUs, not 64; a stalled MIG
instance is read per instance and found against its same-profile peers."""

from __future__ import annotations

import asyncio
import time

import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import Window
from exporter import catalog as c
from simulator.fleet import Fleet
from simulator.simulator import Simulator
from tests.e2e.nodeserve import scrape_config, serve_simulator
from tests.realcomp import run_prometheus

pytestmark = pytest.mark.real
STEP = 2.0


def test_faults_on_an_instance_and_under_a_partition_are_found_on_the_physical_gpu() -> None:
    f = Fleet(2, 5, skus=["h100", "mi300x"], partitions={0: "1g.10gb*7", 1: "cpx"})
    sim = Simulator(f, clock=time.time, wall=time.time, tick_s=1.0, time_scale=5.0)
    nodes = list(f.nodes)
    f.inject("instance_stall", nodes[0], "gpu2", {"instance": 12, "slowdown": 0.8})
    with (
        serve_simulator(sim) as address,
        run_prometheus(
            scrape_config(address, nodes).replace(
                "scrape_interval: 2s, scrape_timeout: 2s", "scrape_interval: 1s"
            )
        ) as prom,
    ):
        prom.wait_for("count(up == 1) == 2", timeout=120)
        prom.wait_for("count(count_over_time(gpu_health[10s]) >= 5) > 0", 60)
        sim.inject({"node": nodes[0], "kind": "mig_xid", "target": "gpu3",
                    "parameters": {"xid": 95, "instance": 9}})  # fmt: skip
        sim.inject({"node": nodes[1], "kind": "amd_hbm_uncorrectable", "target": "gpu5"})
        prom.wait_for(f"count({c.GPU_XID_ERRORS.name} > 0) > 0", 60)
        prom.wait_for("count(gpu_ecc_uncorrect_umc > 0) > 0", 60)
        src = PrometheusSource(prom.url, window=60.0, step=STEP, discover=True)
        # the instance detector over this short window (20 s, not 5 min)
        engine = Engine(default_detectors({"instances": {"span_s": 20.0}}))

        async def cycles() -> tuple[Window, list[Finding]]:
            """The analyzer as it runs: a read and a cycle every step, for 8 steps."""
            try:
                for _ in range(8):
                    await asyncio.sleep(STEP)
                    w = await src.read(time.time())
                    found = engine.cycle(w)
                return w, found
            finally:
                await src.close()

        w, found = asyncio.run(cycles())
    assert w.nodes == tuple(sorted(nodes))
    up = w.get(c.GPU_UP)
    assert up is not None and up.shape[2] == 8  # the CPX node's 64 partitions are 8 GPUs
    on_gpu = {(x.node, x.subject) for x in found
              if x.kind in ("xid_fatal", "afid_fatal", "ecc_uncorrectable")}  # fmt: skip
    assert on_gpu == {(nodes[0], "gpu=3"), (nodes[1], "gpu=5")}, found
    # the stalled instance, read through Prometheus per instance, against its 55 peers only
    stalled = [(x.node, x.subject, x.evidence["peers"]) for x in found
               if x.kind == "instance_straggler"]  # fmt: skip
    assert stalled == [(nodes[0], "instance=gpu2/12", 55.0)]
    assert len(w.instances) == 8 * 7  # the MIG node's; DME serves no per-partition activity
