"""``gpuwarden simulate --skus ... --power-caps ...``: a mixed fleet on the served path. Each
node's exporter output carries its GPUs' real model, power limit and NVLink count, so the
analyzer's own read path (the embedded scrape) and its inventory see the fleet as it is."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import numpy as np
import pytest
from aiohttp.test_utils import TestClient, TestServer

from analyzer.inventory_cli import rows
from analyzer.sources.scrape import ScrapeSource, load_targets
from exporter import catalog as c
from simulator.cli import SimulateSettings, file_sd, main, make_simulator
from simulator.server import make_app
from simulator.simulator import Simulator
from tests.simulator.test_server import Clock, samples

MIXED = SimulateSettings(skus="h100:1,a100:1,l40s:1", nodes_per_leaf=2, power_caps="leaf-02:300")


class ViaApp:
    """The analyzer's fetcher, answered by the simulator's HTTP app (by path)."""

    def __init__(self, client: TestClient[Any, Any]) -> None:
        self.client = client

    async def fetch(self, url: str) -> str:
        r = await self.client.get(urlsplit(url).path)
        assert r.status == 200
        return await r.text()


async def test_a_served_mixed_fleet_read_by_the_analyzer_shows_each_racks_model_and_cap(
    tmp_path: Path,
) -> None:
    sim = make_simulator(MIXED)
    (tmp_path / "sd.json").write_text(json.dumps(file_sd(sim, ["sim:9400"])))
    async with TestClient(TestServer(make_app(sim))) as client:
        body = await ViaApp(client).fetch("/nodes/gpu-node-005/metrics")
        assert len(samples(body, c.NVLINK_UP.name)) == 0  # L40S: PCIe, no NVLink
        src = ScrapeSource(load_targets(tmp_path / "sd.json"), fetcher=ViaApp(client))
        table = {r["node"]: r for r in rows(await src.read(sim.fleet.t))}
    assert [table[f"gpu-node-00{i}"]["model"] for i in range(1, 7)] == (
        ["h100-sxm"] * 2 + ["a100-sxm"] * 2 + ["l40s"] * 2
    )
    a100, l40s = table["gpu-node-003"], table["gpu-node-005"]
    assert (a100["power_limit_w"], a100["default_limit_w"]) == (300.0, 400.0)  # the rack's cap
    assert (a100["ib_rate_gbps"], a100["nvlinks"]) == (200.0, 12)  # HDR, NVLink 3
    assert (table["gpu-node-001"]["power_limit_w"], l40s["power_limit_w"]) == (700.0, 350.0)


def test_the_nodes_follow_from_the_racks_and_a_bad_spec_stops_the_start(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert make_simulator(MIXED).fleet.sku_of == ("h100",) * 2 + ("a100",) * 2 + ("l40s",) * 2
    assert main(["--skus", "h100:1,b300:2", "--nodes-per-leaf", "2"]) == 2
    assert "b300:2" in capsys.readouterr().err
    assert main(["--skus", "h100:2", "--nodes-per-leaf", "2", "--nodes", "5"]) == 2
    assert "--nodes 5" in capsys.readouterr().err
    assert main(["--skus", "h100:2", "--power-caps", "leaf-01"]) == 2
    assert "LEAF:WATTS" in capsys.readouterr().err


async def test_a_fleet_with_published_step_times_and_profiling_serves_them_per_rank(
    tmp_path: Path,
) -> None:
    fleet = make_simulator(
        SimulateSettings(nodes=8, nodes_per_leaf=4, signals="activity,steps")
    ).fleet
    clock = Clock()
    sim = Simulator(fleet, clock=clock, wall=lambda: 1.8e9)
    (tmp_path / "sd.json").write_text(json.dumps(file_sd(sim, ["sim:9400"])))
    async with TestClient(TestServer(make_app(sim))) as client:
        src = ScrapeSource(load_targets(tmp_path / "sd.json"), fetcher=ViaApp(client))
        await src.read(0.0)
        clock.t += 1.0  # one tick: GPM profiling needs a second sample
        w = await src.read(15.0)
    frame = sim.frame
    steps, sm = w.get(c.JOB_STEP_SECONDS), w.get(c.GPU_SM_ACTIVE)
    assert steps is not None and sm is not None
    want = frame[c.JOB_STEP_SECONDS.name]
    published = np.isfinite(want)
    assert published.any() and np.allclose(steps[-1][published], want[published])
    assert np.isnan(steps[-1][~published]).all()  # idle GPUs and single-node jobs publish none
    assert np.allclose(sm[-1], np.round(frame[c.GPU_SM_ACTIVE.name] * 100) / 100, atol=0.011)
    assert set(w.jobs) == {str(j) for j in sim.fleet.jobs.running}
