"""Gang-scheduled jobs on Kubernetes move whole, over real HTTP against the kmock emulator."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import kmock
import pytest

from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.checkpoint import ANNOTATION
from tests.remediation.test_kubernetes import node, writes

PODS = kmock.resource("v1/pods")
NODES = [f"gpu-node-00{i}" for i in range(1, 7)]


def member(name: str, on: str, labels: dict[str, str], ann: dict[str, str],
           owner: dict[str, Any], uid: str) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "train", "uid": uid, "labels": labels,
                     "annotations": ann, "ownerReferences": [{**owner, "controller": True}]},
        "spec": {"nodeName": on, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }  # fmt: skip


def vc_member(i: int, on: str, gen: str = "a") -> dict[str, Any]:
    return member(
        f"llm-worker-{i}",
        on,
        {"volcano.sh/job-name": "llm", "volcano.sh/task-spec": "worker"},
        {"scheduling.k8s.io/group-name": "llm-pg"},
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "llm", "uid": "vc-1"},
        f"uid-{gen}-{i}",
    )


def js_member(i: int, on: str) -> dict[str, Any]:
    return member(
        f"pre-w-0-{i}",
        on,
        {"jobset.sigs.k8s.io/jobset-name": "pre", "jobset.sigs.k8s.io/replicatedjob-name": "w"},
        {},
        {"apiVersion": "batch/v1", "kind": "Job", "name": "pre-w-0", "uid": "job-1"},
        f"js-{i}",
    )


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["bus.volcano.sh/v1alpha1/commands"] = kmock.ResourceInfo(namespaced=True)
        for n in NODES:
            e.objects[kmock.resource("v1/nodes"), None, n] = node(n)
        for i in range(4):  # a 4-pod vcjob, one member per node; gpu-node-001 will fault
            e.objects[PODS, "train", f"llm-worker-{i}"] = vc_member(i, NODES[i])
        yield e


def backend(e: kmock.KubernetesEmulator) -> KubernetesBackend:
    api = OfficialKubeApi.from_config(str(e.url).rstrip("/"))
    return KubernetesBackend(api, taint_effect="NoExecute")


def evictions_and_deletes(e: kmock.KubernetesEmulator) -> list[tuple[str, str]]:
    return [(m, p) for m, p, _ in writes(e) if p.endswith("/eviction") or m == "DELETE"]


async def test_a_gang_is_one_job_with_every_members_node(emu: kmock.KubernetesEmulator) -> None:
    b = backend(emu)
    [job] = await asyncio.to_thread(b.jobs_on, "gpu-node-001")
    assert job.job_id == "train/volcano-job/llm"
    assert job.nodes == tuple(NODES[:4]) and job.state == "RUNNING"


async def test_draining_a_node_restarts_the_volcano_gang_whole_and_evicts_no_member(
    emu: kmock.KubernetesEmulator,
) -> None:
    b = backend(emu)
    out = await asyncio.to_thread(b.take_out, "gpu-node-001", "XID 79", True)
    assert "restarted 1 gang(s) whole: train/volcano-job/llm" in out
    assert evictions_and_deletes(emu) == []
    posts = [(p, d) for m, p, d in writes(emu) if m == "POST"]
    [(path, body)] = posts
    assert path == "/apis/bus.volcano.sh/v1alpha1/namespaces/train/commands"
    assert body["action"] == "RestartJob"
    target = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "llm",
              "uid": "vc-1", "controller": True}  # fmt: skip
    assert body["target"] == target
    assert body["metadata"]["ownerReferences"] == [target]  # as vcctl: gone with the vcjob


async def test_volcano_members_that_name_no_owner_are_deleted_together_not_sent_a_command(
    emu: kmock.KubernetesEmulator,
) -> None:
    """The Command CRD requires the target's uid (a real server answers 422 without it)."""
    for i in range(4):
        pod = vc_member(i, NODES[i])
        del pod["metadata"]["ownerReferences"]
        del emu.objects[PODS, "train", f"llm-worker-{i}"]
        emu.objects[PODS, "train", f"llm-worker-{i}"] = pod
    deleted: list[str] = []

    def delete(req: Any) -> Any:
        deleted.append(req.name)
        del emu.objects[PODS, req.namespace, req.name]
        return {"kind": "Status", "status": "Success"}

    emu["delete", PODS] << delete
    b = backend(emu)
    out = await asyncio.to_thread(b.take_out, "gpu-node-001", "XID 79", True)
    assert "restarted 1 gang(s) whole: train/volcano-job/llm" in out
    assert sorted(deleted) == [f"llm-worker-{i}" for i in range(4)]
    assert not [p for m, p, _ in writes(emu) if m == "POST" and "commands" in p]


async def test_checkpoint_asks_every_rank_then_the_restart_is_verified_by_new_members(
    emu: kmock.KubernetesEmulator,
) -> None:
    b = backend(emu)
    [job] = await asyncio.to_thread(b.jobs_on, "gpu-node-001")
    await asyncio.to_thread(b.request_checkpoint, job)
    patched = sorted(p for m, p, d in writes(emu) if m == "PATCH" and ANNOTATION in str(d))
    assert patched == [f"/api/v1/namespaces/train/pods/llm-worker-{i}" for i in range(4)]
    await asyncio.to_thread(b.requeue, job, "gpu-node-001")
    assert evictions_and_deletes(emu) == []
    # Volcano's job controller acts on the Command: all members replaced, away from node 001.
    for i in range(4):
        del emu.objects[PODS, "train", f"llm-worker-{i}"]
        emu.objects[PODS, "train", f"llm-worker-{i}"] = vc_member(i, NODES[i + 2], gen="b")
    again = await asyncio.to_thread(b.job, job.job_id)
    assert again is not None and again.restarts == 1 and again.state == "RUNNING"
    assert "gpu-node-001" not in again.nodes


async def test_a_jobset_gang_is_deleted_together_never_one_member_evicted(
    emu: kmock.KubernetesEmulator,
) -> None:
    for i in range(4):
        del emu.objects[PODS, "train", f"llm-worker-{i}"]
        emu.objects[PODS, "train", f"pre-w-0-{i}"] = js_member(i, NODES[i])
    deleted: list[str] = []

    def delete(req: Any) -> Any:
        deleted.append(req.name)
        del emu.objects[PODS, req.namespace, req.name]
        return {"kind": "Status", "status": "Success"}

    emu["delete", PODS] << delete
    b = backend(emu)
    out = await asyncio.to_thread(b.take_out, "gpu-node-002", "NVLink down", True)
    assert "train/jobset/pre" in out
    assert sorted(deleted) == [f"pre-w-0-{i}" for i in range(4)]
    assert not [p for _, p in evictions_and_deletes(emu) if p.endswith("/eviction")]


async def test_a_plain_pod_beside_a_gang_is_still_evicted_alone(
    emu: kmock.KubernetesEmulator,
) -> None:
    plain = member("notebook", "gpu-node-001", {}, {},
                   {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "nb", "uid": "rs"},
                   "nb-1")  # fmt: skip
    emu.objects[PODS, "train", "notebook"] = plain
    emu["post", kmock.subresource("eviction")] << (
        lambda req: {"kind": "Status", "status": "Success"}
    )
    b = backend(emu)
    out = await asyncio.to_thread(b.take_out, "gpu-node-001", "XID 79", True)
    assert out.startswith("cordoned and tainted; evicted 1 pods; restarted 1 gang(s)")
    assert [p for _, p in evictions_and_deletes(emu)] == [
        "/api/v1/namespaces/train/pods/notebook/eviction"
    ]
