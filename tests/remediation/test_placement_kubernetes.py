"""Placement tiers on the Kubernetes fake (kmock): marginal is a PreferNoSchedule taint and
a health-tier label, suspect a NoSchedule taint; foreign taints are never touched, no pod is
evicted, and neutral removes only what is ours."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import TAINT_KEY, KubernetesBackend
from remediation.placement.kubernetes import TIER_LABEL, KubePlacement
from tests.remediation.test_kubernetes import node, pod, writes

FOREIGN = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        n1 = node("gpu-node-001", taints=[FOREIGN])
        n1["metadata"]["labels"]["karpenter.sh/nodepool"] = "h100"
        e.objects[kmock.resource("v1/nodes"), None, "gpu-node-001"] = n1
        e.objects[kmock.resource("v1/nodes"), None, "gpu-node-002"] = node("gpu-node-002")
        e.objects[kmock.resource("v1/pods"), "ml", "train-0"] = pod("ml", "train-0", "gpu-node-001")
        yield e


def read(e: kmock.KubernetesEmulator, name: str) -> dict[str, Any]:
    return dict(e.objects[kmock.resource("v1/nodes"), None, name])


async def test_tiers_project_to_taints_and_a_label_and_foreign_taints_stay(
    emu: kmock.KubernetesEmulator,
) -> None:
    p = KubePlacement(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    groups = await asyncio.to_thread(p.groups)
    assert groups == {"karpenter.sh/nodepool=h100": {"gpu-node-001"}, "cluster": {"gpu-node-002"}}
    done = await asyncio.to_thread(p.reconcile, {"gpu-node-001": "marginal"})
    assert [(c.node, c.kind) for c in done.changes] == [("gpu-node-001", "apply")]
    n = read(emu, "gpu-node-001")
    assert n["spec"]["taints"] == [
        FOREIGN,
        {"key": "gpuwarden.io/marginal", "value": "true", "effect": "PreferNoSchedule"},
    ]
    assert n["metadata"]["labels"][TIER_LABEL] == "marginal"
    assert not n["spec"].get("unschedulable")  # de-preferred, not cordoned
    assert (await asyncio.to_thread(p.reconcile, {"gpu-node-001": "marginal"})).changes == ()
    await asyncio.to_thread(p.reconcile, {"gpu-node-001": "suspect"})
    assert read(emu, "gpu-node-001")["spec"]["taints"] == [
        FOREIGN,
        {"key": "gpuwarden.io/suspect", "value": "true", "effect": "NoSchedule"},
    ]
    done = await asyncio.to_thread(p.reconcile, {})
    assert [(c.node, c.kind) for c in done.changes] == [("gpu-node-001", "restore")]
    n = read(emu, "gpu-node-001")
    assert n["spec"]["taints"] == [FOREIGN] and TIER_LABEL not in n["metadata"]["labels"]
    assert not [w for w in writes(emu) if "eviction" in w[1] or "pods" in w[1]]
    assert "gpu-node-002" not in {w[1].rsplit("/", 1)[-1] for w in writes(emu)}


async def test_a_removed_taint_is_drift_and_put_back(emu: kmock.KubernetesEmulator) -> None:
    api = OfficialKubeApi.from_config(str(emu.url).rstrip("/"))
    p = KubePlacement(api)
    await asyncio.to_thread(p.reconcile, {"gpu-node-002": "marginal"})
    # an operator (or a node re-registration) dropped the taint
    await asyncio.to_thread(api.patch_node, "gpu-node-002", {"spec": {"taints": []}})
    done = await asyncio.to_thread(p.reconcile, {"gpu-node-002": "marginal"})
    assert [(c.node, c.kind) for c in done.changes] == [("gpu-node-002", "repair")]
    assert read(emu, "gpu-node-002")["spec"]["taints"][0]["key"] == "gpuwarden.io/marginal"


class CordonBetween:
    """The real API client, with a cordon (the quarantine taint gpuwarden's own Kubernetes
    backend adds) landing between the placement reconcile's read of the nodes and its write."""

    def __init__(self, api: OfficialKubeApi, node: str) -> None:
        self.api, self.node, self.done = api, node, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.api, name)

    def list_nodes(self) -> list[dict[str, Any]]:
        nodes = self.api.list_nodes()
        if not self.done:
            self.done = True
            KubernetesBackend(self.api).take_out(self.node, "gpuwarden: drain xid_fatal", False)
        return nodes


@pytest.mark.parametrize(
    ("node", "before", "wanted"),
    [
        ("gpu-node-002", {}, {"gpu-node-002": "marginal"}),  # no taints at the read
        ("gpu-node-001", {}, {"gpu-node-001": "marginal"}),  # a foreign taint at the read
        ("gpu-node-001", {"gpu-node-001": "marginal"}, {}),  # restore: ours removed
        ("gpu-node-001", {"gpu-node-001": "marginal"}, {"gpu-node-001": "suspect"}),
    ],
)
async def test_a_quarantine_taint_added_between_the_reconciles_read_and_write_survives(
    emu: kmock.KubernetesEmulator, node: str, before: dict[str, str], wanted: dict[str, str]
) -> None:
    api = OfficialKubeApi.from_config(str(emu.url).rstrip("/"))
    await asyncio.to_thread(KubePlacement(api).reconcile, before)
    racing = KubePlacement(CordonBetween(api, node))  # type: ignore[arg-type]
    await asyncio.to_thread(racing.reconcile, wanted)
    taints = read(emu, node)["spec"]["taints"]
    keys = [t["key"] for t in taints]
    assert TAINT_KEY in keys, f"the cordon's taint was lost: {taints}"
    want = wanted.get(node)
    ours = [k for k in keys if k.startswith("gpuwarden.io/") and k != TAINT_KEY]
    assert ours == ([f"gpuwarden.io/{want}"] if want else [])
    assert (FOREIGN in taints) == (node == "gpu-node-001")
    assert read(emu, node)["spec"]["unschedulable"] is True
    assert read(emu, node)["metadata"]["labels"].get(TIER_LABEL) == want


async def test_a_taint_patch_rejected_by_a_moved_list_is_planned_again_from_a_fresh_read(
    emu: kmock.KubernetesEmulator,
) -> None:
    api = OfficialKubeApi.from_config(str(emu.url).rstrip("/"))
    racing = KubePlacement(CordonBetween(api, "gpu-node-002"))  # type: ignore[arg-type]
    await asyncio.to_thread(racing.reconcile, {"gpu-node-002": "marginal"})
    patches = [w for w in writes(emu) if w[0] == "PATCH" and w[1].endswith("/gpu-node-002")]
    ours = [w[2] for w in patches if isinstance(w[2], list)]
    assert len(ours) == 2  # the first tested a spec the cordon had changed: rejected
    assert ours[0][0] == {"op": "test", "path": "/spec", "value": {}}
    assert ours[1] == [{"op": "add", "path": "/spec/taints/-", "value": {
        "key": "gpuwarden.io/marginal", "value": "true", "effect": "PreferNoSchedule"}}]  # fmt: skip
