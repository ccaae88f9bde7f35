"""A partitioned GPU taken out alone on the real control plane: a ResourceSlice with a GPU's
MIG devices as NVIDIA's DRA driver publishes them (``gpu-<minor>-mig-<profile id>-<start>-<size>``
with ``type`` mig and ``parentUUID``; k8s-dra-driver-gpu cmd/gpu-kubelet-plugin/deviceinfo.go),
validated by the real API server, ResourceClaims holding single instances, and gpuwarden's
DeviceTaintRules (one per device of the GPU) and evictions through the real Eviction API: the
pods of GPU 1's instances go, the pods of GPU 0's instances stay."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.processes import wait_until
from remediation.backends.dra import DraIsolation, parse_name
from tests.kube.test_rbac import _claim_holding
from tests.kubelab import KubeLab

pytestmark = pytest.mark.real

MIG = {0: ["gpu-0-mig-9-0-4", "gpu-0-mig-9-4-4"], 1: [f"gpu-1-mig-19-{s}-1" for s in range(3)]}


def _slice(node: str) -> dict[str, Any]:
    devices = []
    for g, migs in MIG.items():
        uuid = f"GPU-0000000{g}-aaaa-bbbb-cccc-{node[-8:]:0>12}"
        devices.append({"name": f"gpu-{g}", "attributes": {
            "type": {"string": "gpu"}, "index": {"int": g}, "uuid": {"string": uuid}}})  # fmt: skip
        devices += [{"name": m, "attributes": {
            "type": {"string": "mig"}, "uuid": {"string": f"MIG-{m}-{node[-8:]}"},
            "parentUUID": {"string": uuid},
            "profile": {"string": "3g.40gb" if g == 0 else "1g.10gb"}}} for m in migs]  # fmt: skip
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpu.nvidia.com"},
            "spec": {"driver": "gpu.nvidia.com", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": devices}}  # fmt: skip


def test_a_partitioned_gpus_instances_are_tainted_and_only_their_pods_evicted(
    kube_lab: KubeLab,
) -> None:
    lab = kube_lab
    ns, node = lab.namespace("serve"), lab.add_node()
    lab.http.post("/apis/resource.k8s.io/v1/resourceslices", _slice(node))
    pods = {}
    for migs in MIG.values():
        for m in migs[:2]:
            pod = lab.run_pod(ns, node, name=f"replica-{m}")
            _claim_holding(lab, ns, node, m, pod)
            pods[m] = pod["metadata"]["name"]
    dra = DraIsolation(lab.kube_api())
    out = dra.isolate(node, "1", "gpuwarden: xid 95 on GPU-I 7 of gpu 1")
    assert out.startswith("GPU 1's 4 devices (gpu-1, gpu-1-mig-19-0-1, gpu-1-mig-19-1-1,")
    assert "evicted 2 pod(s)" in out
    rules = [r for r in dra.active() if parse_name(r["metadata"]["name"]) == (node, "1")]
    assert sorted(r["spec"]["deviceSelector"]["device"] for r in rules) == ["gpu-1", *MIG[1]]
    assert {r["spec"]["taint"]["effect"] for r in rules} == {"NoSchedule"}

    def gone(name: str) -> bool:
        p = lab.http.get_or_none(f"/api/v1/namespaces/{ns}/pods/{name}")
        return p is None or bool(p["metadata"].get("deletionTimestamp"))

    wait_until(lambda: all(gone(pods[m]) for m in MIG[1][:2]), 30, 0.2, "GPU 1's replicas")
    assert not any(gone(pods[m]) for m in MIG[0])  # GPU 0's instances keep serving
    assert dra.release_node(node) == ["1"]
    assert [
        r for r in dra.active() if (parse_name(r["metadata"]["name"]) or ("",))[0] == node
    ] == []
