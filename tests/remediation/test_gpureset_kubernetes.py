"""The GPU reset rung on the Kubernetes fake (kmock, real HTTP): an XID whose resolution is a
GPU reset on GPU 3 of gpu-node-001 becomes ``reset_gpu``; only the pod whose DRA claim holds
GPU 3 is moved (the pod on GPU 5 keeps running); the reset runs as a privileged Job bound to
the node; success keeps the node quarantined for probation; a failure or a hang falls back
to the reboot rung (medik8s) with the reset's evidence journaled; a restart mid-reset adopts
the Job it made instead of creating a second one."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation import policy as policy_mod
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.gpureset.kubernetes import KubernetesReset
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.service import make_resetter
from tests.remediation.helpers import LIVE_POLICY, alert
from tests.remediation.kgc import CollectingEmulator
from tests.remediation.test_dra_isolation import claim, slice_of
from tests.remediation.test_kubernetes import SNR, node, pod, writes
from tests.remediation.test_validation_kubernetes import complete

ALLOW = "checkpoint_restart, reboot, inspect]"
POLICY = (
    LIVE_POLICY.replace(ALLOW, ALLOW.replace("reboot,", "reboot, reset_gpu,"), 1)
    + "reset_gpu: {timeout_s: 30, deadline_s: 300}\n"
    + "validation: {kubernetes: {image: registry.local/gpu-validate:1}}\n"
)
PODS, JOBS = kmock.resource("v1/pods"), kmock.resource("batch/v1/jobs")
SMI_Q = (
    Path(__file__).resolve().parents[2] / "fixtures/gpureset/smi-q-r565.57-h100.txt"
).read_text()
OK_LOG = (
    "===gpuwarden-step 0 begin===\nGPU 00000000:3B:00.0 was successfully reset.\n"
    f"===gpuwarden-step 0 rc=0===\n===gpuwarden-step 1 begin===\n{SMI_Q}"
    "===gpuwarden-step 1 rc=0===\n"
)
FAIL_LOG = (
    "===gpuwarden-step 0 begin===\nUnable to reset GPU 00000000:3B:00.0: In use by another "
    "client\n===gpuwarden-step 0 rc=1===\n===gpuwarden-step 1 begin===\n"
    "===gpuwarden-step 1 rc=0===\n"
)


def gpu_pod(ns: str, name: str, on: str) -> dict[str, Any]:
    p = pod(ns, name, on)
    p["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}]
    return p


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with CollectingEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["resource.k8s.io/v1/resourceslices"] = kmock.ResourceInfo(namespaced=False)
        e.resources["resource.k8s.io/v1/resourceclaims"] = kmock.ResourceInfo(namespaced=True)
        e.resources["batch/v1/jobs"] = kmock.ResourceInfo(namespaced=True)
        e.resources[f"{SNR}/selfnoderemediationtemplates"] = kmock.ResourceInfo(namespaced=True)
        e.resources[f"{SNR}/selfnoderemediations"] = kmock.ResourceInfo(namespaced=True)
        e.objects[kmock.resource(f"{SNR}/selfnoderemediationtemplates"), "medik8s",
                  "self-node-remediation-automatic-strategy-template"] = {
            "apiVersion": SNR, "kind": "SelfNodeRemediationTemplate",
            "metadata": {"name": "self-node-remediation-automatic-strategy-template",
                         "namespace": "medik8s"},
            "spec": {"template": {"spec": {"remediationStrategy": "OutOfServiceTaint"}}},
        }  # fmt: skip
        for n in ("gpu-node-001", "gpu-node-002"):
            e.objects[kmock.resource("v1/nodes"), None, n] = node(n)
        e.objects[kmock.resource("resource.k8s.io/v1/resourceslices"), None,
                  "gpu-node-001-gpu.nvidia.com"] = slice_of("gpu-node-001")  # fmt: skip
        for p, dev in (("infer-3", "gpu-3"), ("infer-5", "gpu-5")):
            e.objects[PODS, "ml", p] = gpu_pod("ml", p, "gpu-node-001")
            e.objects[kmock.resource("resource.k8s.io/v1/resourceclaims"), "ml", f"{p}-gpu"] = (
                claim("ml", f"{p}-gpu", "gpu-node-001", dev, p)
            )
        yield e


def replicaset_controller(e: kmock.KubernetesEmulator) -> list[str]:
    """An eviction deletes the pod; its ReplicaSet runs a replacement on the other node."""
    evicted: list[str] = []

    def evict(req: Any) -> Any:
        evicted.append(req.name)
        del e.objects[PODS, req.namespace, req.name]
        new = pod(req.namespace, f"{req.name}-b", "gpu-node-002")
        new["metadata"]["ownerReferences"][0]["uid"] = f"uid-{req.name}"
        e.objects[PODS, req.namespace, f"{req.name}-b"] = new
        return {"kind": "Status", "status": "Success"}

    e["post", kmock.subresource("eviction")] << evict
    return evicted


class Rig:
    def __init__(self, e: kmock.KubernetesEmulator, journal: Journal, clock: FakeClock) -> None:
        self.e, self.journal, self.clock = e, journal, clock
        self.backend = KubernetesBackend(OfficialKubeApi.from_config(str(e.url).rstrip("/")))
        self.policy = policy_mod.loads(POLICY)
        self.engine = Engine(journal, self.backend, self.policy, clock, Metrics())
        self.executor = Executor(journal, self.backend, self.policy, clock.now)
        self.executor.resetter = make_resetter(self.policy, self.backend)

    async def run(self, aid: int) -> tuple[str, str]:
        [row] = self.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        return await asyncio.to_thread(self.executor.run, row)

    async def until_job(self, aid: int) -> str:
        """Run the action until the reset Job exists; its name."""
        for _ in range(5):
            state, outcome = await self.run(aid)
            assert state in ("waiting", "retry"), outcome
            jobs = [k for k in self.e.objects if k[0] == JOBS]
            if jobs:
                return str(jobs[0][2])
            self.clock.advance(5)
        raise AssertionError("no reset Job was created")


async def decided(rig: Rig) -> int:
    fault = alert("gpu-node-001", "xid_fatal", "reboot", gpu="3", reset_suffices="true")
    rig.journal.accept([fault], 0)
    aid = await asyncio.to_thread(rig.engine.decide, fault)
    assert aid is not None, rig.journal.rows("SELECT guard, reason FROM decisions")
    [row] = rig.journal.rows("SELECT action FROM actions WHERE id=?", (aid,))
    assert row["action"] == "reset_gpu"
    return aid


def deleted(e: kmock.KubernetesEmulator) -> list[str]:
    return [w[1].rsplit("/", 1)[1] for w in writes(e) if w[0] == "DELETE" and "/jobs/" in w[1]]


def steps(journal: Journal, aid: int) -> dict[str, tuple[str, str]]:
    rows = journal.rows("SELECT step, state, detail FROM steps WHERE action_id=?", (aid,))
    return {r["step"]: (r["state"], r["detail"] or "") for r in rows}


async def test_a_reset_runs_as_a_privileged_job_on_the_node_moving_only_the_gpus_pod(
    emu: kmock.KubernetesEmulator, tmp_path: Any
) -> None:
    evicted = replicaset_controller(emu)
    rig = Rig(emu, Journal(tmp_path / "s.db"), FakeClock())
    assert isinstance(rig.executor.resetter, KubernetesReset)
    aid = await decided(rig)
    name = await rig.until_job(aid)
    assert evicted == ["infer-3"]  # infer-5 (GPU 5) keeps running
    assert steps(rig.journal, aid)["jobs_scope"][1] == "the pods holding GPU 3 (DRA)"
    job = emu.objects[JOBS, "gpuwarden", name]
    spec = job["spec"]["template"]["spec"]
    [c] = spec["containers"]
    assert spec["nodeName"] == "gpu-node-001" and c["securityContext"] == {"privileged": True}
    assert "resources" not in c and "nvidia-smi -r -i 3" in c["command"][2]
    assert "nvidia-smi -q -i 3" in c["command"][2]
    complete(emu, name, OK_LOG, ok=True)
    rig.clock.advance(5)
    state, outcome = await rig.run(aid)
    assert state == "done", outcome
    assert "GPU 3 reset and verified" in outcome and "validation and release follow" in outcome
    verdict = json.loads(steps(rig.journal, aid)["reset_verdict"][1])
    assert verdict["passed"] is True and verdict["gpu"] == "3"
    assert deleted(emu) == [name]  # the Job removed
    n = emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-001"]
    assert n["spec"]["unschedulable"] is True  # still quarantined: probation, then release
    assert not [w for w in writes(emu) if "selfnoderemediations" in w[1]]  # no reboot


@pytest.mark.parametrize("how", ["fails", "hangs"])
async def test_a_reset_that_fails_or_hangs_falls_back_to_reboot_with_its_evidence(
    emu: kmock.KubernetesEmulator, tmp_path: Any, how: str
) -> None:
    replicaset_controller(emu)
    rig = Rig(emu, Journal(tmp_path / "s.db"), FakeClock())
    aid = await decided(rig)
    name = await rig.until_job(aid)
    if how == "fails":
        complete(emu, name, FAIL_LOG, ok=False)
        rig.clock.advance(5)
    else:
        rig.clock.advance(301)  # reset_gpu.deadline_s passed with the Job still running
    state, outcome = await rig.run(aid)
    # the pod on GPU 5 still runs: the reboot waits for an idle node, like the reboot rung
    assert state == "deferred" and "fell back to reboot" in outcome and "node busy" in outcome
    why = "failed (exit 1)" if how == "fails" else "no result within 300s (job cancelled)"
    assert why in steps(rig.journal, aid)["fallback"][1]
    assert set(deleted(emu)) == {name}  # cancelled (a hang) and removed
    del emu.objects[PODS, "ml", "infer-5"]  # its job ended
    state, outcome = await rig.run(aid)
    assert state == "done", outcome
    assert why in outcome and "reboot requested from medik8s" in outcome
    assert steps(rig.journal, aid)["reset_verdict"][0] == "done"


async def test_a_restart_mid_reset_adopts_the_job_it_made_instead_of_making_another(
    emu: kmock.KubernetesEmulator, tmp_path: Any
) -> None:
    replicaset_controller(emu)
    rig = Rig(emu, Journal(tmp_path / "s.db"), FakeClock())
    aid = await decided(rig)
    name = await rig.until_job(aid)
    # kill -9 after the Job was created, before its handle was journaled
    rig.journal.set_step(aid, "reset_start", "started")
    rig.journal.close()
    after = Rig(emu, Journal(tmp_path / "s.db"), rig.clock)  # a new process, same journal
    state, outcome = await after.run(aid)
    assert state == "waiting", outcome
    creates = [w for w in writes(emu) if w[0] == "POST" and w[1].endswith("/jobs")]
    assert len(creates) == 2 and [str(k[2]) for k in emu.objects if k[0] == JOBS] == [name]
    complete(emu, name, OK_LOG, ok=True)
    state, outcome = await after.run(aid)
    assert state == "done" and "GPU 3 reset and verified" in outcome, outcome


async def test_without_dra_the_reset_moves_the_nodes_gpu_pods_and_leaves_the_others(
    emu: kmock.KubernetesEmulator,
) -> None:
    del emu.objects[kmock.resource("resource.k8s.io/v1/resourceslices"), None,
                    "gpu-node-001-gpu.nvidia.com"]  # fmt: skip
    plain = pod("ml", "web", "gpu-node-001")  # no GPU
    emu.objects[PODS, "ml", "web"] = plain
    b = KubernetesBackend(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    jobs, scope = await asyncio.to_thread(b.jobs_on_gpu, "gpu-node-001", "3")
    assert sorted(j.job_id for j in jobs) == ["ml/infer-3", "ml/infer-5"]
    assert scope.startswith("the node's GPU pods (no DRA device")


def test_without_an_image_there_is_no_kubernetes_resetter_and_the_rung_says_why() -> None:
    pol = policy_mod.loads(POLICY.replace("image: registry.local/gpu-validate:1", "gpus: 8"))
    b = KubernetesBackend(OfficialKubeApi.from_config("http://127.0.0.1:9"))
    assert make_resetter(pol, b) is None
    assert make_resetter(policy_mod.loads(POLICY.replace("dry_run: false", "dry_run: true")),
                         b) is None  # fmt: skip
