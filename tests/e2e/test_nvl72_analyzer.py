"""``gpuwarden simulate --skus gb200-nvl72:2`` (two NVL72 racks of 18 trays x 4 GB200) served
over HTTP, scraped by a real Prometheus and read by the analyzer's Prometheus source: the
GPUs' fabric info gives each node its NVLink domain (``Window.nvlink_domain_of``) and their
fabric health reaches the fabric detector. A switch tray down in rack 0 (degraded bandwidth and
2 links down on every GPU) is ONE ``switch_degraded`` finding naming that rack's domain (no
per-GPU or per-link finding there); one GPU's route unhealthy in rack 1 is a finding for that
GPU only; rack 1's power brake is one facility finding (notify), no GPU's throttling."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.queries import QUERIES
from common.fabric import fabric_domain
from exporter import catalog as c
from simulator import nvl72
from simulator.cli import SimulateSettings, make_simulator
from simulator.simulator import Simulator
from tests.e2e.nodeserve import scrape_config, serve_simulator
from tests.realcomp import run_prometheus
from tests.simulator.test_server import Clock

pytestmark = pytest.mark.real
STEP = 2.0


@pytest.fixture
def sim() -> Simulator:
    clock = Clock()
    s = Simulator(make_simulator(SimulateSettings(skus="gb200-nvl72:2")).fleet, clock=clock,
                  wall=lambda: 1.8e9)  # fmt: skip
    nodes = s.fleet.nodes
    s.inject({"node": nodes[3], "kind": "nvlink_switch_tray_down"})  # rack 0
    s.inject({"node": nodes[20], "kind": "fabric_route_unhealthy", "target": "gpu2"})  # rack 1
    s.inject({"node": nodes[30], "kind": "rack_power_brake"})  # rack 1: 0x88 on every GPU
    clock.t += 5.0  # past the faults' onset
    return s


@pytest.fixture
def server(sim: Simulator) -> Iterator[str]:
    with serve_simulator(sim) as address:
        yield address


def _read(url: str) -> tuple:
    src = PrometheusSource(url, window=60.0, step=STEP)

    async def go():
        try:
            return await src.read(time.time())
        finally:
            await src.close()

    return asyncio.run(go()), src


def test_nvl72_fabric_through_prometheus_gives_one_domain_finding_and_one_gpu_finding(
    sim: Simulator, server: str
) -> None:
    nodes = list(sim.fleet.nodes)
    config = scrape_config(server, nodes)
    config = config.replace("scrape_interval: 2s, scrape_timeout: 2s", "scrape_interval: 1s")
    with run_prometheus(config) as prom:
        prom.wait_for("count(up == 1) == 36", timeout=120)
        prom.wait_for(f"count(count_over_time({c.GPU_FABRIC_HEALTH.name}[12s]) >= 10) > 0", 60)
        time.sleep(2 * STEP)
        w, src = _read(prom.url)
    assert w.nodes == tuple(sorted(nodes))
    rack0, rack1 = (fabric_domain(cl, str(cq)) for cl, cq in (nvl72.domain(0), nvl72.domain(1)))
    ix = {n: i for i, n in enumerate(w.nodes)}
    # every tray's domain from its GPUs' fabric info, the racks told apart
    assert {w.nvlink_domain_of[ix[n]] for n in nodes[:18]} == {rack0}
    assert {w.nvlink_domain_of[ix[n]] for n in nodes[18:]} == {rack1}
    found = Engine(default_detectors()).cycle(w)
    # the tray down takes 2 links of every GPU of rack 0 down too: the fabric and NVLink
    # detectors both see the domain, and it is still ONE finding naming it, no link finding
    fabric = sorted(
        (f.node, f.subject, f.kind)
        for f in found
        if f.detector in ("fabric", "nvlink") and f.kind != "nvlink_errors"
    )
    assert fabric == [
        (rack0, f"nvlink_domain={rack0}", "switch_degraded"),
        (nodes[20], "gpu=2", "fabric_degraded"),
    ]
    # the rack-wide brake (0x88: NVML sets HW slowdown with it) is one facility finding that
    # notifies, and no GPU of the rack is a throttling finding
    brake = [
        (f.node, f.kind, f.action) for f in found if f.detector in ("power_brake", "throttling")
    ]
    assert brake == [(rack1, "facility_power_brake", "notify")]
    # the fabric info is read as identity: one instant query, one series per node
    info = next(q for q in QUERIES if q.metric is c.GPU_FABRIC_INFO)
    assert src.stats.series[info.name] == 36.0
