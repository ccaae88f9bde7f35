"""Slow and hung checkpoint storage in the simulator: every node's probe of the mount shows
it through the exporter's real StorageCollector, served like every other series."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog as c
from simulator.faults import FaultError
from simulator.server import make_app
from simulator.simulator import Simulator
from tests.simulator.helpers import busy_fleet
from tests.simulator.test_server import Clock, samples, scrape

NODES = ("gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-004")


@pytest.fixture
async def sim_client() -> AsyncIterator[tuple[Simulator, Clock, TestClient[Any, Any]]]:
    clock = Clock()
    sim = Simulator(busy_fleet(4, nodes_per_leaf=2), clock=clock, wall=lambda: 1.8e9,
                    tick_s=15.0)  # fmt: skip
    async with TestClient(TestServer(make_app(sim))) as cl:
        yield sim, clock, cl


async def inject(cl: TestClient[Any, Any], **body: Any) -> int:
    r = await cl.post("/inject", json=body)
    return r.status


async def test_without_storage_faults_or_mounts_nodes_serve_no_storage_series(
    sim_client: tuple[Simulator, Clock, TestClient[Any, Any]],
) -> None:
    _, _, cl = sim_client
    assert samples(await scrape(cl, "gpu-node-001"), c.STORAGE_PROBE_UP.name) == []


async def test_a_cluster_hung_mount_makes_every_nodes_probe_hang(
    sim_client: tuple[Simulator, Clock, TestClient[Any, Any]],
) -> None:
    _, clock, cl = sim_client
    body = {"kind": "storage_hung", "node": "cluster", "target": "/mnt/ckpt", "duration": 600}
    assert await inject(cl, **body) == 201
    clock.t += 60  # four model steps, two probe intervals
    for node in NODES:
        m = await scrape(cl, node)
        assert samples(m, c.STORAGE_PROBE_UP.name, node=node, mount="/mnt/ckpt") == [0.0]
        assert samples(m, c.STORAGE_PROBES.name, mount="/mnt/ckpt", outcome="hung")[0] >= 1
        assert samples(m, c.STORAGE_PROBE_DURATION.name, mount="/mnt/ckpt") == []  # no answer
    clock.t += 700  # the fault ended: the mount answers again in milliseconds
    m = await scrape(cl, "gpu-node-002")
    assert samples(m, c.STORAGE_PROBE_UP.name, mount="/mnt/ckpt") == [1.0]
    assert samples(m, c.STORAGE_PROBE_DURATION.name, mount="/mnt/ckpt", op="fsync")[0] < 0.05


async def test_a_slow_mount_behind_one_leaf_raises_fsync_latency_only_under_that_leaf(
    sim_client: tuple[Simulator, Clock, TestClient[Any, Any]],
) -> None:
    sim, clock, cl = sim_client
    leaf = sim.fleet.leaf_of[0]
    body = {"kind": "storage_slow", "node": leaf, "target": "/lustre",
            "parameters": {"latency_s": 3.0}}  # fmt: skip
    assert await inject(cl, **body) == 201
    clock.t += 60
    fsync = {}
    for node in NODES:
        m = await scrape(cl, node)
        assert samples(m, c.STORAGE_PROBE_UP.name, mount="/lustre") == [1.0]  # slow, not hung
        fsync[node] = samples(m, c.STORAGE_PROBE_DURATION.name, mount="/lustre", op="fsync")[0]
    under = [n for i, n in enumerate(NODES) if sim.fleet.leaf_of[i] == leaf]
    assert all(fsync[n] >= 3.0 for n in under)
    assert all(fsync[n] < 0.05 for n in NODES if n not in under)


async def test_slower_than_the_probe_timeout_is_hung(
    sim_client: tuple[Simulator, Clock, TestClient[Any, Any]],
) -> None:
    _, clock, cl = sim_client
    body = {"kind": "storage_slow", "node": "gpu-node-003", "target": "/mnt/ckpt",
            "parameters": {"latency_s": 60.0}}  # fmt: skip
    assert await inject(cl, **body) == 201
    clock.t += 60
    m = await scrape(cl, "gpu-node-003")
    assert samples(m, c.STORAGE_PROBE_UP.name, mount="/mnt/ckpt") == [0.0]
    assert samples(await scrape(cl, "gpu-node-004"), c.STORAGE_PROBE_UP.name) == [1.0]


def test_configured_mounts_are_probed_healthy_from_the_start() -> None:
    sim = Simulator(busy_fleet(2, storage_mounts=["/mnt/ckpt"]), clock=lambda: 0.0)
    m = sim.metrics("gpu-node-001").decode()
    assert samples(m, c.STORAGE_PROBE_UP.name, node="gpu-node-001", mount="/mnt/ckpt") == [1.0]


@pytest.mark.parametrize(
    ("node", "target", "why"),
    [
        ("cluster", "mnt/ckpt", "absolute path"),
        ("cluster", "", "absolute path"),
        ("gpu-node-999", "/mnt/ckpt", "want cluster, a leaf or a node"),
    ],
)
def test_bad_storage_fault_requests_are_refused_with_a_reason(
    node: str, target: str, why: str
) -> None:
    fleet = busy_fleet(2)
    with pytest.raises(FaultError, match=why):
        fleet.inject("storage_hung", node, target)
    assert fleet.faults() == []
