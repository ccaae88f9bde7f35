"""The Kubernetes backend over real HTTP against the kmock emulator, with exact requests."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation import checkpoint
from remediation.backends.base import BackendError
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import OWNER, TAINT_KEY, KubernetesBackend
from remediation.checkpoint import ANNOTATION
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.policy import Checkpoint
from tests.remediation.helpers import alert, live_policy


def node(name: str, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"topology.gpuwarden.io/leaf": "leaf-01"},
            "annotations": {},
        },
        "spec": dict(spec),
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def pod(ns: str, name: str, on: str, owner: str = "ReplicaSet") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "annotations": {},
            "ownerReferences": [
                {
                    "kind": owner,
                    "name": "o",
                    "uid": f"uid-{name}",
                    "controller": True,
                    "apiVersion": "apps/v1",
                }
            ],
        },
        "spec": {"nodeName": on, "containers": [{"name": "c", "image": "i"}]},
        "status": {"phase": "Running"},
    }


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        for n in ("gpu-node-001", "gpu-node-002"):
            e.objects[kmock.resource("v1/nodes"), None, n] = node(n)
        e.objects[kmock.resource("v1/pods"), "ml", "train-0"] = pod("ml", "train-0", "gpu-node-001")
        e.objects[kmock.resource("v1/pods"), "kube-system", "dcgm"] = pod(
            "kube-system", "dcgm", "gpu-node-001", owner="DaemonSet"
        )
        e.objects[kmock.resource("v1/pods"), "ml", "other"] = pod("ml", "other", "gpu-node-002")
        yield e


def backend(e: kmock.KubernetesEmulator, **kw: Any) -> KubernetesBackend:
    api = OfficialKubeApi.from_config(str(e.url).rstrip("/"))
    return KubernetesBackend(api, taint_effect="NoExecute", **kw)


def writes(e: kmock.KubernetesEmulator, health: bool = False) -> list[tuple[str, str, Any]]:
    """Every write, in order; ``health``: also the Node conditions and Events (the node
    health report, tested in test_node_health.py), left out by default."""
    return [
        (str(r.method).split(".")[-1].upper(), r.url.path, r.data)
        for r in list(e)
        if str(r.method).split(".")[-1].upper() not in ("GET",)
        and (health or not (r.url.path.endswith("/status") or "/events" in r.url.path))
    ]


def allow_eviction(e: kmock.KubernetesEmulator, blocked: int = 0) -> list[str]:
    calls: list[str] = []

    def evict(req: Any) -> Any:
        calls.append(req.name)
        if len(calls) <= blocked:
            raise kmock.KubernetesError(
                status=429,
                reason="TooManyRequests",
                message="Cannot evict pod as it would violate the pod's disruption budget.",
            )
        del e.objects[kmock.resource("v1/pods"), req.namespace, req.name]
        return {"kind": "Status", "status": "Success"}

    e["post", kmock.subresource("eviction")] << evict
    return calls


async def test_drain_cordons_taints_labels_and_evicts_through_the_eviction_api(
    emu: kmock.KubernetesEmulator,
) -> None:
    allow_eviction(emu)
    b = backend(emu)
    out = await asyncio.to_thread(b.take_out, "gpu-node-001", "gpuwarden: drain xid d1", True)
    assert out == "cordoned and tainted; evicted 1 pods"
    w = writes(emu)
    assert w[0] == (
        "PATCH",
        "/api/v1/nodes/gpu-node-001",
        {
            "metadata": {
                "annotations": {
                    OWNER: "gpuwarden",
                    "gpuwarden.io/reason": "gpuwarden: drain xid d1",
                },
                "labels": {"gpuwarden.io/quarantine": "quarantined"},
            },
            "spec": {
                "unschedulable": True,
                "taints": [{"key": TAINT_KEY, "value": "true", "effect": "NoExecute"}],
            },
        },
    )
    assert w[1][:2] == ("POST", "/api/v1/namespaces/ml/pods/train-0/eviction")
    assert w[1][2]["kind"] == "Eviction" and w[1][2]["apiVersion"] == "policy/v1"
    assert len(w) == 2  # the DaemonSet pod and the other node's pod are untouched
    assert await asyncio.to_thread(b.is_taken_out, "gpu-node-001")
    view = await asyncio.to_thread(b.node, "gpu-node-001")
    assert view is not None and view.domains == {"leaf": "leaf-01"}


async def test_a_pdb_blocked_eviction_fails_the_attempt_at_once_and_a_later_attempt_evicts(
    emu: kmock.KubernetesEmulator,
) -> None:
    calls = allow_eviction(emu, blocked=2)
    b = backend(emu)
    for attempt in (1, 2):  # one eviction request per attempt: no thread sleeps on a budget
        with pytest.raises(
            BackendError,
            match=r"ml/train-0: Cannot evict pod as it would violate the pod.s disruption budget",
        ):
            await asyncio.to_thread(b.take_out, "gpu-node-001", "gpuwarden: drain", True)
        assert calls == ["train-0"] * attempt
    assert "evicted 1 pods" in await asyncio.to_thread(
        b.take_out, "gpu-node-001", "gpuwarden: drain", True
    )
    assert calls == ["train-0"] * 3
    assert not [w for w in writes(emu) if w[0] == "DELETE"]


async def test_a_pdb_that_never_yields_fails_the_action_after_its_retries_and_nothing_is_deleted(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    calls = allow_eviction(emu, blocked=10_000)
    b = backend(emu)
    journal, clock = Journal(tmp_path / "s.db"), FakeClock()
    pol = live_policy()
    engine = Engine(journal, b, pol, clock, Metrics())
    executor = Executor(journal, b, pol, clock.now)
    fault = alert("gpu-node-001", action="drain")
    journal.accept([fault], 0)
    aid = await asyncio.to_thread(engine.decide, fault)
    assert aid is not None
    states = []
    for _ in range(pol.action_retries):
        [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        state, outcome = await asyncio.to_thread(executor.run, row)
        states.append(state)
        assert "ml/train-0: Cannot evict pod as it would violate the pod's disruption" in outcome
        [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        if state == "retry":  # persisted: the tick runs it again once next_at has come
            assert row["next_at"] > clock.now()
            clock.advance(row["next_at"] - clock.now())
    assert states == ["retry"] * (pol.action_retries - 1) + ["failed"]
    assert len(calls) == pol.action_retries  # one request per attempt
    node_row = journal.node("gpu-node-001")
    assert node_row is not None and node_row["state"] == "action_failed"
    assert not [w for w in writes(emu) if w[0] == "DELETE"]
    assert (kmock.resource("v1/pods"), "ml", "train-0") in emu.objects
    journal.close()


async def test_a_node_cordoned_by_an_operator_is_neither_taken_nor_uncordoned(
    emu: kmock.KubernetesEmulator,
) -> None:
    emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-002"] = node(
        "gpu-node-002", unschedulable=True
    )
    b = backend(emu)
    with pytest.raises(BackendError, match="someone else"):
        await asyncio.to_thread(b.take_out, "gpu-node-002", "gpuwarden: drain", False)
    with pytest.raises(BackendError, match="not ours"):
        await asyncio.to_thread(b.release, "gpu-node-002")
    assert writes(emu) == []


async def test_uncordon_removes_only_what_we_added(emu: kmock.KubernetesEmulator) -> None:
    other = {"key": "nvidia.com/gpu", "value": "x", "effect": "NoSchedule"}
    emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-002"] = node(
        "gpu-node-002", taints=[other]
    )
    b = backend(emu)
    await asyncio.to_thread(b.take_out, "gpu-node-002", "gpuwarden: cordon d4", False)
    assert await asyncio.to_thread(b.release, "gpu-node-002") == "uncordoned"
    last = writes(emu)[-1]
    assert last[2]["spec"] == {"unschedulable": False, "taints": [other]}
    assert last[2]["metadata"]["annotations"][OWNER] is None


async def test_checkpoint_request_annotates_the_pod_and_requeue_evicts_it(
    emu: kmock.KubernetesEmulator,
) -> None:
    allow_eviction(emu)
    b = backend(emu)
    [job] = await asyncio.to_thread(b.jobs_on, "gpu-node-001")
    assert (job.job_id, job.state) == ("ml/train-0", "RUNNING")
    await asyncio.to_thread(b.request_checkpoint, job)
    patch = writes(emu)[-1]
    assert patch[:2] == ("PATCH", "/api/v1/namespaces/ml/pods/train-0")
    assert ANNOTATION in patch[2]["metadata"]["annotations"]
    await asyncio.to_thread(b.requeue, job, "gpu-node-001")
    assert writes(emu)[-1][1] == "/api/v1/namespaces/ml/pods/train-0/eviction"
    # the controller's replacement on another node is recognised as the job running again
    emu.objects[kmock.resource("v1/pods"), "ml", "train-0-b"] = {
        **pod("ml", "train-0-b", "gpu-node-002"),
        "metadata": {
            **pod("ml", "train-0-b", "gpu-node-002")["metadata"],
            "ownerReferences": [
                {
                    "kind": "ReplicaSet",
                    "uid": "uid-train-0",
                    "controller": True,
                    "name": "o",
                    "apiVersion": "apps/v1",
                }
            ],
        },
    }
    again = await asyncio.to_thread(b.job, "ml/train-0")
    assert again is not None and again.nodes == ("gpu-node-002",) and again.state == "RUNNING"


async def test_checkpoint_then_restart_on_kubernetes_end_to_end(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    """Cordon (no eviction yet), annotate, the pod acks, evict, its replacement runs elsewhere."""

    def evict(req: Any) -> Any:  # the ReplicaSet controller, in one line: replace elsewhere
        del emu.objects[kmock.resource("v1/pods"), req.namespace, req.name]
        emu.objects[kmock.resource("v1/pods"), "ml", "train-0-x"] = {
            **pod("ml", "train-0-x", "gpu-node-002"),
            "metadata": {
                "name": "train-0-x",
                "namespace": "ml",
                "annotations": {},
                "ownerReferences": [
                    {
                        "kind": "ReplicaSet",
                        "uid": "uid-train-0",
                        "controller": True,
                        "name": "o",
                        "apiVersion": "apps/v1",
                    }
                ],
            },
        }
        return {"kind": "Status", "status": "Success"}

    emu["post", kmock.subresource("eviction")] << evict
    b = backend(emu)
    journal = Journal(tmp_path / "s.db")
    ck = Checkpoint(str(tmp_path), deadline_s=10, on_timeout="requeue", restart_deadline_s=10)
    pol = live_policy(checkpoint=ck)
    engine = Engine(journal, b, pol, FakeClock(), Metrics())
    executor = Executor(journal, b, pol, time.time)
    a = alert("gpu-node-001", action="checkpoint_restart")
    journal.accept([a], 0)
    aid = await asyncio.to_thread(engine.decide, a)
    assert aid is not None
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))

    def the_pod() -> None:  # reads its annotations (the downward API's view), saves, acks
        api = OfficialKubeApi.from_config(str(emu.url).rstrip("/"))
        for _ in range(200):
            p = api.read_pod("ml", "train-0") or {}
            if ANNOTATION in ((p.get("metadata") or {}).get("annotations") or {}):
                checkpoint.acknowledge(str(tmp_path), "ml/train-0", step=123)
                return
            time.sleep(0.05)

    pod_thread = threading.Thread(target=the_pod)
    pod_thread.start()
    state, outcome = await asyncio.to_thread(executor.run, row)
    while state == "waiting":  # what the worker's tick does: run it again, nobody sleeps
        await asyncio.sleep(0.05)
        state, outcome = await asyncio.to_thread(executor.run, row)
    pod_thread.join(5)
    assert state == "done", outcome
    assert "ack received" in outcome and "running elsewhere" in outcome
    w = [(m, path) for m, path, _ in writes(emu)]
    assert w == [
        ("PATCH", "/api/v1/nodes/gpu-node-001"),  # cordon + taint, no eviction yet
        ("PATCH", "/api/v1/namespaces/ml/pods/train-0"),  # checkpoint request
        ("POST", "/api/v1/namespaces/ml/pods/train-0/eviction"),
    ]
    journal.close()


SNR = "self-node-remediation.medik8s.io/v1alpha1"


async def test_reboot_creates_a_medik8s_self_node_remediation_and_release_deletes_it(
    emu: kmock.KubernetesEmulator,
) -> None:
    emu.resources[f"{SNR}/selfnoderemediationtemplates"] = kmock.ResourceInfo(namespaced=True)
    emu.resources[f"{SNR}/selfnoderemediations"] = kmock.ResourceInfo(namespaced=True)
    # what the operator installs (its default template, strategy included)
    emu.objects[kmock.resource(f"{SNR}/selfnoderemediationtemplates"), "medik8s",
                "self-node-remediation-automatic-strategy-template"] = {
        "apiVersion": SNR, "kind": "SelfNodeRemediationTemplate",
        "metadata": {"name": "self-node-remediation-automatic-strategy-template",
                     "namespace": "medik8s"},
        "spec": {"template": {"spec": {"remediationStrategy": "OutOfServiceTaint"}}},
    }  # fmt: skip
    b = backend(emu)
    await asyncio.to_thread(b.take_out, "gpu-node-002", "gpuwarden: reboot xid_fatal d1", True)
    out = await asyncio.to_thread(b.reboot, "gpu-node-002", "gpuwarden: reboot xid_fatal d1")
    assert out == "reboot requested from medik8s (SelfNodeRemediation medik8s/gpu-node-002)"
    cr = emu.objects[kmock.resource(f"{SNR}/selfnoderemediations"), "medik8s", "gpu-node-002"]
    assert cr["spec"] == {"remediationStrategy": "OutOfServiceTaint"}
    assert cr["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuwarden"
    again = await asyncio.to_thread(b.reboot, "gpu-node-002", "gpuwarden: reboot xid_fatal d1")
    assert again.startswith("reboot already requested")
    assert await asyncio.to_thread(b.release, "gpu-node-002") == (
        "uncordoned; its SelfNodeRemediation deleted"
    )
    deletes = [w for w in writes(emu) if w[0] == "DELETE"]
    assert [w[1] for w in deletes] == [
        f"/apis/{SNR}/namespaces/medik8s/selfnoderemediations/gpu-node-002"
    ]
    listed = await asyncio.to_thread(
        b.api.list_custom, "self-node-remediation.medik8s.io", "v1alpha1", "selfnoderemediations"
    )
    assert listed == []


async def test_reboot_without_the_operator_fails_with_a_reason_and_labels_nothing(
    emu: kmock.KubernetesEmulator,
) -> None:
    b = backend(emu)
    with pytest.raises(BackendError, match="Self Node Remediation"):
        await asyncio.to_thread(b.reboot, "gpu-node-001", "gpuwarden: reboot")
    labels = emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-001"]["metadata"]["labels"]
    assert set(labels) == {"topology.gpuwarden.io/leaf"}


async def test_a_cordon_conflicting_on_every_write_fails_the_step_without_a_partial_taint_list(
    emu: kmock.KubernetesEmulator,
) -> None:
    """Each write is conditional on the resourceVersion read (the real server's 409 and the
    re-read are in tests/kube/test_cordon_real.py); one that conflicts every time fails."""
    node_obj = emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-001"]
    node_obj.raw["metadata"]["resourceVersion"] = "7"  # type: ignore[index]
    emu["patch", kmock.resource("v1/nodes"), kmock.name("gpu-node-001")] << 409
    b = backend(emu)
    with pytest.raises(BackendError, match=r"changed under each of 5 writes \(HTTP 409\)"):
        await asyncio.to_thread(b.take_out, "gpu-node-001", "xid", False)
    bodies = [body for m, path, body in writes(emu) if m == "PATCH"]
    assert len(bodies) == 5
    assert all(body["metadata"]["resourceVersion"] == "7" for body in bodies)
