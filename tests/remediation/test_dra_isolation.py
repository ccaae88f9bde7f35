"""One GPU out, not the node, on the Kubernetes fake (kmock) with DRA objects shaped like
the NVIDIA DRA driver's: a fault on GPU 3 becomes a DeviceTaintRule selecting only that
device; NoSchedule evicts only the pod whose ResourceClaim holds it (the pod on GPU 5 and
the node stay); the dry-run preview uses effect None and evicts nothing; release deletes
the rule; a node without DRA devices says the node path applies."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation.backends import dra
from remediation.backends.base import BackendError
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from tests.remediation.helpers import alert, live_policy
from tests.remediation.test_kubernetes import node, pod, writes


def slice_of(n: str) -> dict[str, Any]:
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i},
                "uuid": {"string": f"GPU-{n}-{i}"}}} for i in range(8)]  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{n}-gpu.nvidia.com"},
            "spec": {"nodeName": n, "driver": "gpu.nvidia.com", "pool": {"name": n,
                     "generation": 1, "resourceSliceCount": 1}, "devices": devices}}  # fmt: skip


def claim(ns: str, name: str, n: str, device: str, holder: str) -> dict[str, Any]:
    result = {"request": "gpu", "driver": "gpu.nvidia.com", "pool": n, "device": device}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns},
            "status": {"allocation": {"devices": {"results": [result]}},
                       "reservedFor": [{"resource": "pods", "name": holder, "uid": "u"}]}}  # fmt: skip


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["resource.k8s.io/v1/resourceslices"] = kmock.ResourceInfo(namespaced=False)
        e.resources["resource.k8s.io/v1/resourceclaims"] = kmock.ResourceInfo(namespaced=True)
        e.resources["resource.k8s.io/v1alpha3/devicetaintrules"] = kmock.ResourceInfo(
            namespaced=False
        )
        e.objects[kmock.resource("v1/nodes"), None, "gpu-node-001"] = node("gpu-node-001")
        e.objects[kmock.resource("resource.k8s.io/v1/resourceslices"), None,
                  "gpu-node-001-gpu.nvidia.com"] = slice_of("gpu-node-001")  # fmt: skip
        for p, dev in (("infer-3", "gpu-3"), ("infer-5", "gpu-5")):
            e.objects[kmock.resource("v1/pods"), "ml", p] = pod("ml", p, "gpu-node-001")
            e.objects[kmock.resource("resource.k8s.io/v1/resourceclaims"), "ml", f"{p}-gpu"] = (
                claim("ml", f"{p}-gpu", "gpu-node-001", dev, p)
            )
        yield e


def evictions(e: kmock.KubernetesEmulator) -> list[str]:
    calls: list[str] = []

    def evict(req: Any) -> Any:
        calls.append(req.name)
        return {"kind": "Status", "status": "Success"}

    e["post", kmock.subresource("eviction")] << evict
    return calls


async def test_a_gpu_fault_taints_that_device_and_evicts_only_its_pod(
    emu: kmock.KubernetesEmulator,
) -> None:
    evicted = evictions(emu)
    iso = dra.DraIsolation(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    out = await asyncio.to_thread(iso.isolate, "gpu-node-001", "3", "gpuwarden: xid 79 gpu 3")
    assert out == "gpu-3 tainted NoSchedule; evicted 1 pod(s) using it: ml/infer-3"
    assert evicted == ["infer-3"]  # infer-5 (GPU 5) keeps running
    [rule] = await asyncio.to_thread(iso.active)
    assert rule["spec"] == {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "gpu-node-001", "device": "gpu-3"},
        "taint": {"key": dra.TAINT_KEY, "value": "true", "effect": "NoSchedule"},
    }
    node_writes = [w for w in writes(emu) if "/nodes/" in w[1]]
    assert node_writes == []  # the node is neither cordoned nor tainted
    await asyncio.to_thread(iso.release, "gpu-node-001", "3")
    assert await asyncio.to_thread(iso.active) == []


async def test_the_dry_run_preview_uses_effect_none_and_evicts_nothing(
    emu: kmock.KubernetesEmulator,
) -> None:
    evicted = evictions(emu)
    iso = dra.DraIsolation(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    out = await asyncio.to_thread(iso.isolate, "gpu-node-001", "5", "x", "NoSchedule", True)
    assert out == "preview: gpu-5 tainted with effect None; would evict 1 pod(s)"
    assert evicted == []
    [rule] = await asyncio.to_thread(iso.active)
    assert rule["spec"]["taint"]["effect"] == "None"


async def test_noexecute_leaves_eviction_to_the_control_plane(
    emu: kmock.KubernetesEmulator,
) -> None:
    evicted = evictions(emu)
    iso = dra.DraIsolation(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    out = await asyncio.to_thread(iso.isolate, "gpu-node-001", "3", "x", "NoExecute")
    assert "NoExecute" in out and evicted == []


async def test_a_node_without_dra_devices_takes_the_node_path(
    emu: kmock.KubernetesEmulator,
) -> None:
    iso = dra.DraIsolation(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    with pytest.raises(BackendError, match="node path"):
        await asyncio.to_thread(iso.isolate, "gpu-node-002", "0", "x")


async def test_a_gpu_scoped_drain_under_dra_policy_takes_one_gpu_out_and_release_returns_it(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    evicted = evictions(emu)
    emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-002"] = node("gpu-node-002")
    b = KubernetesBackend(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    journal, clock = Journal(tmp_path / "s.db"), FakeClock()
    pol = dataclasses.replace(live_policy(), dra_isolation=True)
    engine = Engine(journal, b, pol, clock, Metrics())
    executor = Executor(journal, b, pol, clock.now)
    fault = alert("gpu-node-001", action="drain", gpu="3")
    journal.accept([fault], 0)
    aid = await asyncio.to_thread(engine.decide, fault)
    assert aid is not None, journal.rows("SELECT guard, reason FROM decisions")
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = await asyncio.to_thread(executor.run, row)
    assert state == "done" and outcome.startswith("GPU 3 only: gpu-3 tainted NoSchedule")
    assert evicted == ["infer-3"]
    assert not [w for w in writes(emu) if "/nodes/" in w[1]]  # no cordon: 7 GPUs serve on
    v = await asyncio.to_thread(engine.release, "gpu-node-001", True, "alice")
    assert v.allow and "GPU(s) 3 back in service" in v.reason
    assert await asyncio.to_thread(b.dra.active) == []


async def test_an_isolated_gpu_is_listed_by_the_placement_api(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    from aiohttp.test_utils import TestClient, TestServer

    from remediation.app import build_app
    from tests.remediation.helpers import AUTH, LIVE_POLICY, service

    b = KubernetesBackend(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    evictions(emu)
    await asyncio.to_thread(b.dra.isolate, "gpu-node-001", "3", "gpuwarden: xid 79 gpu 3")
    svc = service(tmp_path, LIVE_POLICY, clock=FakeClock())
    svc.backend = b
    async with TestClient(TestServer(build_app(svc))) as client:
        body = await (await client.get("/api/v1/placement", headers=AUTH)).json()
    [row] = body["nodes"]
    assert (row["node"], row["gpu"], row["tier"], row["until"]) == ("gpu-node-001", "3",
                                                                    "isolated", None)  # fmt: skip
    assert row["reason"] == "gpuwarden: xid 79 gpu 3"
    assert row["evidence"]["device"]["device"] == "gpu-3"
