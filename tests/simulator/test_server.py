"""The simulator over HTTP: nodes rendered by the real collectors, truth, and injection."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from simulator.server import SIM, make_app
from simulator.simulator import Simulator
from tests.realcomp import promtool
from tests.simulator.helpers import busy_fleet


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
async def client(clock: Clock) -> AsyncIterator[TestClient[Any, Any]]:
    sim = Simulator(busy_fleet(4), clock=clock, wall=lambda: 1.8e9)
    async with TestClient(TestServer(make_app(sim))) as cl:
        yield cl


def samples(body: str, name: str, **labels: str) -> list[float]:
    fams = text_string_to_metric_families(body)
    return [
        s.value
        for f in fams
        for s in f.samples
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]


async def scrape(cl: TestClient[Any, Any], node: str) -> str:
    r = await cl.get(f"/nodes/{node}/metrics")
    assert r.status == 200, await r.text()
    return await r.text()


async def test_every_node_is_served_by_the_real_collectors(client: TestClient[Any, Any]) -> None:
    for node in ("gpu-node-001", "gpu-node-004"):
        body = await scrape(client, node)
        assert samples(body, c.GPU_UP.name, node=node) == [1.0] * 8
        assert len(samples(body, c.NVLINK_UP.name, node=node)) == 8 * 18
        assert len(samples(body, c.IB_PORT_STATE.name, node=node)) == 8
        assert samples(body, c.COLLECTOR_SUCCESS.name) == [1.0] * 4  # gpu, ib, xid, jobs


async def test_nodes_serve_the_allocation_series_of_the_jobs_the_simulator_runs(
    client: TestClient[Any, Any],
) -> None:
    truth_jobs = client.server.app[SIM].fleet.jobs
    seen = 0
    for i, node in enumerate(("gpu-node-001", "gpu-node-002", "gpu-node-003", "gpu-node-004")):
        body = await scrape(client, node)
        fams = text_string_to_metric_families(body)
        got = {(s.labels["gpu"], s.labels["job_id"], s.labels["scheduler"])
               for f in fams for s in f.samples if s.name == c.GPU_ALLOCATION_INFO.name}  # fmt: skip
        jid = int(truth_jobs.job_of[i])
        want = set() if jid < 0 else {
            (str(g), str(jid), "slurm") for g in range(truth_jobs.running[jid].gpus)
        }  # fmt: skip
        assert got == want
        seen += bool(got)
    assert seen >= 3  # the busy fleet runs jobs on (nearly) every node


async def test_simulated_exposition_is_promtool_clean(client: TestClient[Any, Any]) -> None:
    body = await scrape(client, "gpu-node-002")
    result = promtool("check", "metrics", stdin=body.encode())
    assert result.returncode == 0, result.stderr.decode()


async def test_unknown_node_is_404(client: TestClient[Any, Any]) -> None:
    r = await client.get("/nodes/gpu-node-099/metrics")
    assert r.status == 404 and "gpu-node-099" in await r.text()


async def test_nodes_and_healthz_describe_the_fleet(client: TestClient[Any, Any]) -> None:
    nodes = await (await client.get("/nodes")).json()
    assert [n["node"] for n in nodes] == [f"gpu-node-00{i}" for i in range(1, 5)]
    assert nodes[0] == {"node": "gpu-node-001", "leaf": "leaf-01",
                        "metrics_path": "/nodes/gpu-node-001/metrics"}  # fmt: skip
    assert (await client.get("/healthz")).status == 200


async def test_injected_xid_79_shows_at_the_next_tick_and_in_truth(
    client: TestClient[Any, Any], clock: Clock
) -> None:
    await scrape(client, "gpu-node-003")
    req = {"node": "gpu-node-003", "kind": "xid", "target": "gpu5", "parameters": {"xid": 79}}
    r = await client.post("/inject", json=req)
    assert r.status == 201, await r.text()
    assert (await r.json())["onset"] == 1.0  # the next grid point (tick 1 s)
    clock.t += 1
    body = await scrape(client, "gpu-node-003")
    assert samples(body, c.GPU_UP.name, gpu="5") == [0.0]
    assert samples(body, c.GPU_XID_ERRORS.name, gpu="5", xid="79") == [1.0]
    truth = await (await client.get("/truth")).json()
    (fault,) = truth["faults"]
    assert (fault["kind"], fault["node"], fault["target"]) == ("xid", "gpu-node-003", "gpu5")
    clock.t += 30
    body = await scrape(client, "gpu-node-003")
    assert samples(body, c.GPU_XID_ERRORS.name, gpu="5", xid="79") == [1.0]  # counted once


BAD = [
    (b"{not json", "not valid JSON"),
    (b"[1, 2]", "JSON object"),
    (b'{"kind": "xid", "target": "gpu0"}', "'node' is required"),
    (b'{"node": "gpu-node-001", "target": "gpu0"}', "'kind' is required"),
    (b'{"node": "gpu-node-001", "kind": "meteor"}', "unknown fault kind 'meteor'"),
    (b'{"node": "gpu-node-042", "kind": "xid", "target": "gpu0"}', "unknown node"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": "gpu12"}', "bad target"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": 3}', "'target' must be a string"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": "gpu0", "parameters": {"xid": 13}}',
     "must be one of"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": "gpu0", "parameters": {"bad": 1}}',
     "unknown parameter"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": "gpu0", "parameters": [79]}',
     "parameters must be an object"),
    (b'{"node": "gpu-node-001", "kind": "straggler", "target": "gpu0",'
     b' "parameters": {"slowdown": 5}}', "must be in"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": "gpu0", "duration": -1}', "duration"),
    (b'{"node": "gpu-node-001", "kind": "xid", "target": "gpu0", "when": 5}', "unknown field"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "message"), BAD, ids=[m for _, m in BAD])
async def test_bad_injection_is_answered_400_with_a_message_and_changes_nothing(
    client: TestClient[Any, Any], body: bytes, message: str
) -> None:
    before = await scrape(client, "gpu-node-001")
    r = await client.post("/inject", data=body, headers={"Content-Type": "application/json"})
    assert r.status == 400
    assert message in (await r.json())["error"]
    assert (await (await client.get("/truth")).json())["faults"] == []
    assert await scrape(client, "gpu-node-001") == before  # same step, same bytes


async def test_rebooting_node_answers_503_then_comes_back_with_monotonic_counters(
    client: TestClient[Any, Any], clock: Clock
) -> None:
    before = await scrape(client, "gpu-node-002")
    tx = samples(before, c.IB_TRANSMIT.name, device="mlx5_0")[0]
    req = {"node": "gpu-node-002", "kind": "reboot", "parameters": {"down_s": 60}}
    assert (await client.post("/inject", json=req)).status == 201
    clock.t += 1
    r = await client.get("/nodes/gpu-node-002/metrics")
    assert r.status == 503 and "rebooting" in await r.text()
    clock.t += 120
    after = await scrape(client, "gpu-node-002")
    assert samples(after, c.IB_TRANSMIT.name, device="mlx5_0")[0] >= tx  # absorbed
    assert samples(before, c.IB_COUNTER_RESETS.name, device="mlx5_0") == [0.0]
    assert samples(after, c.IB_COUNTER_RESETS.name, device="mlx5_0")[0] > 0  # one per file


async def test_dcgm_compat_adds_dcgm_names(clock: Clock) -> None:
    sim = Simulator(busy_fleet(2), dcgm=True, clock=clock)
    async with TestClient(TestServer(make_app(sim))) as cl:
        body = await scrape(cl, "gpu-node-001")
    dcgm_temp = c.GPU_TEMPERATURE.dcgm[0].name
    assert len(samples(body, dcgm_temp, Hostname="gpu-node-001")) == 8
    assert len(samples(body, c.GPU_TEMPERATURE.name)) == 8


async def test_truth_is_json_with_time_and_seed(client: TestClient[Any, Any]) -> None:
    r = await client.get("/truth")
    data = json.loads(await r.text())
    assert data["seed"] == 3 and data["faults"] == [] and data["time"] >= 0


async def test_max_staleness_serves_the_last_body_until_a_fault_touches_the_node(
    clock: Clock,
) -> None:
    sim = Simulator(busy_fleet(2), clock=clock, max_stale_s=60)
    async with TestClient(TestServer(make_app(sim))) as cl:
        first = await scrape(cl, "gpu-node-001")
        clock.t += 10
        assert await scrape(cl, "gpu-node-001") == first  # ten ticks later, still the same
        req = {"node": "gpu-node-001", "kind": "straggler", "target": "gpu2"}
        assert (await cl.post("/inject", json=req)).status == 201
        clock.t += 1
        touched = await scrape(cl, "gpu-node-001")
        assert touched != first
        assert samples(touched, c.GPU_SM_CLOCK.name, gpu="2") == [round(1980 * 0.9) * 1e6]
        clock.t += 61
        assert await scrape(cl, "gpu-node-001") != touched  # too old: rendered again
