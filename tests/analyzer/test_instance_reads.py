"""Per-instance series of partitioned GPUs read by the analyzer's sources (embedded scraper and
Prometheus): each GPU's instances in slots by GPU instance id, the workload from the pod the
exporter attributes to each instance, and a stalled instance found from served scrapes."""

from __future__ import annotations

import asyncio

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources import instances
from analyzer.sources.scrape import ScrapeSource, Target
from exporter import catalog as c
from simulator.fleet import Fleet
from simulator.simulator import Simulator


def test_a_pod_serves_its_deployments_or_statefulsets_workload() -> None:
    assert instances.workload("serve", "chat-7d9c5b6f8d-x2k4q") == "serve/chat"
    assert instances.workload("serve", "llm-70b-3") == "serve/llm-70b"
    assert instances.workload("serve", "batch-job") == "serve/batch-job"  # no controller suffix
    assert instances.workload("serve", "") == ""


def test_instances_take_slots_by_gpu_instance_id_and_a_duplicate_counts_once() -> None:
    v = np.arange(3.0)
    rows = [(0, 2, "13", "1g.10gb", v + 2), (0, 2, "7", "1g.10gb", v), (0, 2, "7", "1g.10gb", v),
            (0, 2, "9", "1g.10gb", v + 1), (1, 0, "x", "1g.10gb", v), (5, 0, "7", "7g", v)]  # fmt: skip
    a, infos = instances.place(rows, {(0, 2, "9"): "serve/chat"}, 3, 2, 8)
    assert a.shape == (3, 2, 8, 8)
    assert [infos[(0, 2, s)].instance for s in range(3)] == ["7", "9", "13"]
    assert infos[(0, 2, 1)].job == "serve/chat" and infos[(0, 2, 0)].job == ""
    assert np.array_equal(a[:, 0, 2, 2], v + 2) and np.isnan(a[:, 0, 2, 3:]).all()
    assert len(infos) == 3  # a bad instance id and an unknown node are skipped


def test_the_embedded_scraper_reads_each_instance_and_a_stalled_one_is_found() -> None:
    f = Fleet(2, 9, skus=["h100", "h100"], partitions={0: "1g.10gb*7", 1: "1g.10gb*7"})
    f.inject("instance_stall", f.nodes[1], "gpu4", {"instance": 11, "slowdown": 0.8})
    t = [0.0]
    sim = Simulator(f, clock=lambda: t[0], wall=lambda: t[0], tick_s=15)

    class Fetch:
        async def fetch(self, url: str) -> str:
            return sim.metrics(url.split("/")[-2]).decode()

    src = ScrapeSource([Target(f"http://sim/{n}/metrics", {}) for n in f.nodes], 600.0, 15.0,
                       Fetch())  # fmt: skip
    engine = Engine(default_detectors())
    for _ in range(25):
        t[0] += 15
        w = asyncio.run(src.read(t[0]))
        found = engine.cycle(w)
    assert len(w.instances) == 2 * 8 * 7
    assert {i.profile for i in w.instances.values()} == {"1g.10gb"}
    act = w.get(c.GPU_MIG_GRAPHICS_ACTIVE)
    assert act is not None and act.shape[1:] == (2, 8, 8)
    stalled = [(x.node, x.subject) for x in found if x.kind == "instance_straggler"]
    assert stalled == [(f.nodes[1], "instance=gpu4/11")]
