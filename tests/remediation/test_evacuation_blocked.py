"""A node whose evacuation is blocked says so where an operator looks: the node API (which
pods, since when, the HTTP status and the server's own reason and message), a catalogue
gauge by node and Status reason, and a log line naming the real cause (kmock emulator
answering as kube-apiserver's eviction subresource does: pkg/registry/core/pod/storage/
eviction.go). Issue 32: the node read ``quarantined``, "drain allowed by every guard", and
every refusal was logged as a PodDisruptionBudget's."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest
from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog
from remediation.app import build_app
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.service import Service, build
from remediation.settings import Settings
from tests.remediation.helpers import AUTH, LIVE_POLICY, TOKEN, alert
from tests.remediation.logcapture import captured
from tests.remediation.test_kubernetes import node, pod

BLOCKED = catalog.REMEDIATION_EVICTIONS_BLOCKED.name
BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."
STILL = "The disruption budget train is still being processed by the server."


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        for n in ("gpu-node-001", "gpu-node-002"):
            e.objects[kmock.resource("v1/nodes"), None, n] = node(n)
        e.objects[kmock.resource("v1/pods"), "ml", "train-0"] = pod("ml", "train-0", "gpu-node-001")
        waiting = pod("ml", "queued", "gpu-node-001")
        waiting["status"]["phase"] = "Pending"
        e.objects[kmock.resource("v1/pods"), "ml", "queued"] = waiting
        yield e


def refusing(e: kmock.KubernetesEmulator, status: int, reason: str, message: str,
             cause: str = "") -> dict[str, int]:  # fmt: skip
    """Evictions answered as the real server does: a Pending pod is deleted whatever its
    budget (canIgnorePDB); any other is refused with this Status until ``allow`` is set."""
    state = {"allow": 0}
    pods = kmock.resource("v1/pods")

    def evict(req: Any) -> Any:
        phase = dict(e.objects[pods, req.namespace, req.name].raw)["status"]["phase"]
        if phase == "Pending" or state["allow"]:
            del e.objects[pods, req.namespace, req.name]
            return {"kind": "Status", "status": "Success"}
        causes = [{"type": "DisruptionBudget", "message": cause}] if cause else []
        raise kmock.KubernetesError(status=status, reason=reason, message=message,
                                    details={"causes": causes})  # fmt: skip

    e["post", kmock.subresource("eviction")] << evict
    return state


def service_on(e: kmock.KubernetesEmulator, tmp: Path, clock: FakeClock) -> Service:
    pol = tmp / "policy.yaml"
    pol.write_text(LIVE_POLICY)
    s = Settings(policy=pol, state_db=tmp / "state.db", webhook_token=TOKEN, backend="kubernetes")
    backend = KubernetesBackend(OfficialKubeApi.from_config(str(e.url).rstrip("/")))
    return build(s, clock=clock, backend=backend)


async def drain_once(svc: Service) -> tuple[int, str, str]:
    fault = alert("gpu-node-001", action="drain")
    svc.journal.accept([fault], 0)
    aid = await asyncio.to_thread(svc.engine.decide, fault)
    assert aid is not None
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = await asyncio.to_thread(svc.executor.run, row)
    return aid, state, outcome


async def node_api(svc: Service) -> dict[str, Any]:
    async with TestClient(TestServer(build_app(svc))) as client:
        one = await (await client.get("/api/v1/nodes/gpu-node-001", headers=AUTH)).json()
        every = await (await client.get("/api/v1/nodes", headers=AUTH)).json()
        metrics = await (await client.get("/metrics")).text()
    [row] = [r for r in every["nodes"] if r["node"] == "gpu-node-001"]
    assert row["evacuation"] == one["evacuation"] == one["node"]["evacuation"]
    return {**one, "metrics": metrics}


async def test_a_budget_not_yet_computed_shows_the_node_evacuation_blocked_with_the_servers_words(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    clock = FakeClock()
    refusing(emu, 429, "TooManyRequests", BUDGET, STILL)
    svc = service_on(emu, tmp_path, clock)
    with captured("gpuwarden.remediation") as records:
        aid, state, outcome = await drain_once(svc)
    assert state == "retry" and STILL in outcome and "PodDisruptionBudget" not in outcome
    got = await node_api(svc)
    ev = got["evacuation"]
    assert (ev["state"], ev["scope"], ev["action_id"], ev["since"]) == ("blocked", "node", aid,
                                                                         clock.now())  # fmt: skip
    assert ev["pods"] == [{"pod": "ml/train-0", "status": 429, "reason": "TooManyRequests",
                           "message": f"{BUDGET} {STILL}", "since": clock.now()}]  # fmt: skip
    assert got["node"]["state"] == "quarantined"  # held, and now says it is not evacuated
    line = f'{BLOCKED}{{node="gpu-node-001",reason="TooManyRequests"}} 1.0'
    assert line in got["metrics"]
    [msg] = [
        m for r in records if "evacuation of node gpu-node-001 blocked" in (m := r.getMessage())
    ]
    assert "pod ml/train-0 not evicted: HTTP 429 TooManyRequests" in msg
    assert STILL in msg


async def test_a_pending_pod_is_evicted_despite_its_budget_and_only_the_running_one_is_blocked(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    refusing(emu, 429, "TooManyRequests", BUDGET, "The disruption budget train needs 1 "
             "healthy pods and has 1 currently")  # fmt: skip
    svc = service_on(emu, tmp_path, FakeClock())
    await drain_once(svc)
    assert (kmock.resource("v1/pods"), "ml", "queued") not in emu.objects
    ev = (await node_api(svc))["evacuation"]
    assert [p["pod"] for p in ev["pods"]] == ["ml/train-0"]


async def test_the_block_keeps_its_first_time_and_clears_once_the_evacuation_completes(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    clock = FakeClock()
    gate = refusing(emu, 429, "TooManyRequests", BUDGET)
    svc = service_on(emu, tmp_path, clock)
    aid, _, _ = await drain_once(svc)
    first = clock.now()
    clock.advance(3600)
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    assert (await asyncio.to_thread(svc.executor.run, row))[0] == "retry"
    ev = svc.evacuation("gpu-node-001")
    assert ev is not None and ev["since"] == ev["pods"][0]["since"] == first
    assert ev["last"] == clock.now()
    gate["allow"] = 1
    clock.advance(3600)
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    assert (await asyncio.to_thread(svc.executor.run, row))[0] == "done"
    got = await node_api(svc)
    assert got["evacuation"] is None
    assert BLOCKED + "{" not in got["metrics"]


@pytest.mark.parametrize(
    ("status", "reason", "message"),
    [
        (400, "BadRequest", "the server could not find the requested resource"),  # no policy/v1
        (403, "Forbidden", 'pods "train-0" is forbidden: User cannot create resource '
         '"pods/eviction"'),
        (500, "InternalError", "This pod has more than one PodDisruptionBudget, which the "
         "eviction subresource does not support."),
    ],
)  # fmt: skip
async def test_an_eviction_api_error_blocks_the_evacuation_under_its_own_reason(
    emu: kmock.KubernetesEmulator, tmp_path: Path, status: int, reason: str, message: str
) -> None:
    refusing(emu, status, reason, message)
    svc = service_on(emu, tmp_path, FakeClock())
    _, state, outcome = await drain_once(svc)
    assert state == "retry" and message in outcome
    got = await node_api(svc)
    [blocked] = got["evacuation"]["pods"]
    assert (blocked["status"], blocked["reason"], blocked["message"]) == (status, reason, message)
    assert f'{BLOCKED}{{node="gpu-node-001",reason="{reason}"}} 1.0' in got["metrics"]
