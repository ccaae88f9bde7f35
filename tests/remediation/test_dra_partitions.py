"""A partitioned GPU taken out alone (Kubernetes fake, kmock), with DRA objects shaped like the
NVIDIA DRA driver's for MIG (k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go: a MIG
device ``gpu-<minor>-mig-<profile id>-<start>-<size>`` with ``type`` mig and ``parentUUID``):
a fault on GPU 2 taints GPU 2's device and every MIG device on it and evicts the pods of every
instance of GPU 2, and only those: the pods on GPU 3's instances and on the whole GPU 5 stay."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from remediation.backends import dra
from remediation.backends.base import BackendError
from remediation.backends.kubeapi import OfficialKubeApi
from tests.remediation.test_dra_isolation import claim, evictions
from tests.remediation.test_kubernetes import node, pod

N = "gpu-node-001"
# 1g.10gb (GPU instance profile id 19) placements 0..6 on GPU 2; 3g.40gb (id 9) at 0 and 4 on GPU 3
MIG = {"2": [f"gpu-2-mig-19-{s}-1" for s in range(7)], "3": ["gpu-3-mig-9-0-4", "gpu-3-mig-9-4-4"]}


def _device(name: str, attrs: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "attributes": {k: {"int" if isinstance(v, int) else "string": v}
                                         for k, v in attrs.items()}}  # fmt: skip


def mig_slice(with_parents: bool = True) -> dict[str, Any]:
    devices = []
    for g in range(8):
        if with_parents or str(g) not in MIG:
            devices.append(_device(f"gpu-{g}", {"type": "gpu", "index": g, "uuid": f"GPU-{g}"}))
        for m in MIG.get(str(g), []):
            devices.append(_device(m, {"type": "mig", "uuid": f"MIG-{m}", "parentUUID": f"GPU-{g}",
                                       "profile": "1g.10gb" if g == 2 else "3g.40gb"}))  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{N}-gpu.nvidia.com"},
            "spec": {"nodeName": N, "driver": "gpu.nvidia.com", "pool": {"name": N,
                     "generation": 1, "resourceSliceCount": 1}, "devices": devices}}  # fmt: skip


HOLDERS = {f"chat-{i}": MIG["2"][i] for i in range(3)} | {
    "llm-0": MIG["3"][0], "llm-1": MIG["3"][1], "train-5": "gpu-5"}  # fmt: skip


async def _emu(with_parents: bool) -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["resource.k8s.io/v1/resourceslices"] = kmock.ResourceInfo(namespaced=False)
        e.resources["resource.k8s.io/v1/resourceclaims"] = kmock.ResourceInfo(namespaced=True)
        e.resources["resource.k8s.io/v1/devicetaintrules"] = kmock.ResourceInfo(namespaced=False)
        e.objects[kmock.resource("v1/nodes"), None, N] = node(N)
        e.objects[kmock.resource("resource.k8s.io/v1/resourceslices"), None,
                  f"{N}-gpu.nvidia.com"] = mig_slice(with_parents)  # fmt: skip
        for p, dev in HOLDERS.items():
            e.objects[kmock.resource("v1/pods"), "ml", p] = pod("ml", p, N)
            e.objects[kmock.resource("resource.k8s.io/v1/resourceclaims"), "ml", f"{p}-gpu"] = (
                claim("ml", f"{p}-gpu", N, dev, p)
            )
        yield e


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async for e in _emu(True):
        yield e


@pytest.fixture
async def emu_static() -> AsyncIterator[kmock.KubernetesEmulator]:
    async for e in _emu(False):
        yield e


def _iso(e: kmock.KubernetesEmulator) -> dra.DraIsolation:
    return dra.DraIsolation(OfficialKubeApi.from_config(str(e.url).rstrip("/")))


async def test_a_partitioned_gpu_fault_evicts_the_pods_of_every_instance_of_that_gpu_only(
    emu: kmock.KubernetesEmulator,
) -> None:
    evicted = evictions(emu)
    iso = _iso(emu)
    out = await asyncio.to_thread(iso.isolate, N, "2", "gpuwarden: xid 95 on GPU-I 8 of gpu 2")
    assert out.startswith("GPU 2's 8 devices (gpu-2, gpu-2-mig-19-0-1,")
    assert out.endswith("evicted 3 pod(s) using it: ml/chat-0, ml/chat-1, ml/chat-2")
    assert sorted(evicted) == ["chat-0", "chat-1", "chat-2"]  # GPU 3's instances and GPU 5 stay
    rules = await asyncio.to_thread(iso.active)
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in rules) == ["gpu-2", *MIG["2"]]
    assert {r["spec"]["taint"]["effect"] for r in rules} == {"NoSchedule"}
    assert {dra.parse_name(r["metadata"]["name"]) for r in rules} == {(N, "2")}
    assert await asyncio.to_thread(iso.pods_on, N, "3") == {("ml", "llm-0"), ("ml", "llm-1")}
    assert await asyncio.to_thread(iso.release_node, N) == ["2"]  # one GPU back, all its rules
    assert await asyncio.to_thread(iso.active) == []


async def test_mig_devices_without_their_gpu_published_are_found_by_the_drivers_names(
    emu_static: kmock.KubernetesEmulator,
) -> None:
    evicted = evictions(emu_static)
    iso = _iso(emu_static)
    out = await asyncio.to_thread(iso.isolate, N, "3", "gpuwarden: ecc")
    assert out.startswith("GPU 3's 2 devices (gpu-3-mig-9-0-4, gpu-3-mig-9-4-4)")
    assert sorted(evicted) == ["llm-0", "llm-1"]
    assert await asyncio.to_thread(iso.release, N, "3") == (
        f"DeviceTaintRule gpuwarden-{N}-gpu3-mig-9-0-4 deleted; "
        f"DeviceTaintRule gpuwarden-{N}-gpu3-mig-9-4-4 deleted"
    )
    assert await asyncio.to_thread(iso.active) == []


async def test_a_gpu_with_no_device_and_no_instance_published_takes_the_node_path(
    emu_static: kmock.KubernetesEmulator,
) -> None:
    with pytest.raises(BackendError, match="node path"):
        await asyncio.to_thread(_iso(emu_static).isolate, N, "9", "x")


def test_mig_rule_names_read_back_to_their_node_and_parent_gpu() -> None:
    assert dra.rule_name("a-gpu1", "3", "mig-9-0-4") == "gpuwarden-a-gpu1-gpu3-mig-9-0-4"
    assert dra.parse_name("gpuwarden-a-gpu1-gpu3-mig-9-0-4") == ("a-gpu1", "3")
    assert dra.parse_name("gpuwarden-a-gpu1-gpu3") == ("a-gpu1", "3")
    assert dra.parse_name("gpuwarden-a-gpu3-mig") is None
    assert dra.parse_name("gpuwarden-a-gpu3-other") is None
    assert dra.mig_part("gpu-3-mig-9-0-4", "3") == "mig-9-0-4"
    assert dra.mig_part("gpu-13-mig-9-0-4", "3") == ""
