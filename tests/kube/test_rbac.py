"""RBAC proven least and sufficient on the real API server.

The shipped manifests' ServiceAccount, ClusterRoles, Role and bindings (deploy/kubernetes/,
rendered by kubectl kustomize, applied server-side) are applied to the lab; every
Kubernetes path of the remediation service then runs with that ServiceAccount's token: a
quarantine with evictions and a gang restart, a checkpoint request, a reboot through
SelfNodeRemediation, the release, one-GPU isolation through DRA (preview, live, release),
a validation Job read through pods/log and cleaned up, a maintenance kube_job (its
dry-run check, the Job, its polls), placement's taints. The API server's
audit log says which calls were made and what was answered:
- sufficient: no call was refused (403);
- least: every verb on every resource a shipped Role grants was used by some path.
The verb x resource matrix in docs/rbac-matrix.md is generated from the same audit
(GPUWARDEN_WRITE_DOCS=1 rewrites it; the test fails while it is stale).
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.processes import wait_until
from remediation.backends.base import BackendError, EvacuationBlocked
from remediation.backends.dra import DraIsolation
from remediation.backends.kubernetes import KubernetesBackend
from remediation.maintenance.operations import KubeJob
from remediation.placement.kubernetes import KubePlacement
from remediation.validation.kubernetes import KubernetesValidation
from remediation.validation.suite import load_suites
from tests.kube.shipped import NAMESPACE, REMEDIATION_SA, apply_remediation_rbac, granted, used
from tests.kubelab import KubeLab, Obj, Run, crd_file

pytestmark = pytest.mark.real
DOC = Path(__file__).resolve().parents[2] / "docs" / "rbac-matrix.md"
SUITE = load_suites(
    {
        "pre-release": [
            {"name": "diag", "command": ["true"], "timeout_s": 60, "parser": "dcgmi-diag"}
        ]
    }
)["pre-release"]


def _slice(node: str) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(2)
            ],
        },
    }


def _claim_holding(lab: KubeLab, ns: str, node: str, device: str, pod: Obj) -> None:
    """A ResourceClaim allocated ``device`` and reserved for ``pod`` (as the scheduler and
    the DRA driver leave it)."""
    name = f"claim-{pod['metadata']['name']}"
    lab.http.post(
        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims",
        {
            "metadata": {"name": name},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
        },
    )  # fmt: skip
    lab.http.merge_patch(
        f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{name}/status",
        {
            "status": {
                "allocation": {"devices": {"results": [
                    {"request": "gpu", "driver": "gpu.nvidia.com", "pool": node,
                     "device": device}]}},
                "reservedFor": [{"resource": "pods", "name": pod["metadata"]["name"],
                                 "uid": pod["metadata"]["uid"]}],
            }
        },
    )  # fmt: skip


def _finished(validation: KubernetesValidation, run: Any) -> bool:
    """One tick's try of the clean-up (the service retries it each tick until confirmed)."""
    try:
        validation.finish(run, None)
    except BackendError:
        return False
    return True


def _exercise_every_path(lab: KubeLab, token: str, job_ns: str) -> None:
    api = lab.kube_api(token)
    backend = KubernetesBackend(api)
    node, dra_node = lab.add_node(), lab.add_node()

    # a single pod and gangs (a Volcano vcjob's two ranks) under a quarantine
    solo = lab.run_pod(job_ns, node, labels={"app": "solo"}, gpus=8)
    vcjob = lab.http.post(
        f"/apis/batch.volcano.sh/v1alpha1/namespaces/{job_ns}/jobs",
        {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": "vc"},
         "spec": {"minAvailable": 2, "schedulerName": "volcano", "tasks": [
             {"name": "worker", "replicas": 2, "template": {"spec": {"containers": [
                 {"name": "main", "image": "lab/none:0"}]}}}]}},
    )  # fmt: skip
    owner = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "name": "vc",
             "uid": vcjob["metadata"]["uid"], "controller": True}  # fmt: skip
    for rank in range(2):
        lab.run_pod(job_ns, node, name=f"vc-{rank}", labels={"volcano.sh/job-name": "vc"},
                    owner=owner)  # fmt: skip
    # and a coscheduling PodGroup's two ranks: restarted by deleting both together
    for rank in range(2):
        lab.run_pod(job_ns, node, name=f"pg-{rank}",
                    labels={"scheduling.x-k8s.io/pod-group": "pg"})  # fmt: skip
    jobs = backend.jobs_on(node)
    assert {j.job_id for j in jobs} == {f"{job_ns}/{solo['metadata']['name']}",
                                        f"{job_ns}/volcano-job/vc",
                                        f"{job_ns}/podgroup/pg"}  # fmt: skip
    for job in jobs:
        backend.request_checkpoint(job)
        assert backend.job(job.job_id) is not None  # the checkpoint wait reads it back
    assert "evicted 1 pods" in backend.take_out(node, "rbac test", evict=True)

    # a drain a budget blocks, twice: its Event is created, then bumped (events patch);
    # the node's conditions (nodes/status patch) come with every quarantine
    blocked = lab.add_node()
    lab.run_pod(job_ns, blocked, name="guarded", labels={"app": "guarded"})
    lab.pdb(job_ns, {"app": "guarded"}, minAvailable=1)
    for _ in range(2):
        with pytest.raises(EvacuationBlocked):
            backend.take_out(blocked, "rbac test", evict=True)
    assert backend.release(blocked) == "uncordoned"

    # reboot through medik8s Self Node Remediation, then the release deletes its CR
    tpl_ns = lab.namespace("snr")
    lab.http.post(
        f"/apis/self-node-remediation.medik8s.io/v1alpha1/namespaces/{tpl_ns}/"
        "selfnoderemediationtemplates",
        {"apiVersion": "self-node-remediation.medik8s.io/v1alpha1",
         "kind": "SelfNodeRemediationTemplate",
         "metadata": {"name": "self-node-remediation-automatic-strategy-template"},
         "spec": {"template": {"spec": {"remediationStrategy": "Automatic"}}}},
    )  # fmt: skip
    assert "reboot requested" in backend.reboot(node, "rbac test")
    assert "SelfNodeRemediation deleted" in backend.release(node)
    lab.http.delete(  # the lab is shared: another test's operator has its own template
        f"/apis/self-node-remediation.medik8s.io/v1alpha1/namespaces/{tpl_ns}/"
        "selfnoderemediationtemplates/self-node-remediation-automatic-strategy-template"
    )

    # a validation Job, its verdict read through pods/log, then everything deleted
    validation = KubernetesValidation(api, NAMESPACE, "lab/none:0", gpus=0)
    with lab.kubelet.scripted(
        lambda pod: Run(log="===gpuwarden-step 0 begin===\nok\n===gpuwarden-step 0 rc=0===\n",
                        exit_code=0)
        if pod["metadata"].get("namespace") == NAMESPACE else None
    ):  # fmt: skip
        run = validation.start(node, SUITE, f"rbac-{int(time.time())}")
        deadline = time.monotonic() + 60
        steps = None
        while steps is None and time.monotonic() < deadline:
            steps = validation.poll(run)
            time.sleep(0.2)
    assert steps is not None and steps[0].exit_code == 0
    wait_until(lambda: _finished(validation, run), 30, 0.2, "validation Job cleaned up")

    # rolling maintenance's kube_job operation: the plan's dry-run create, the Job, its polls
    upgrade = KubeJob(api, {"apiVersion": "batch/v1", "kind": "Job", "spec": {"template": {
        "spec": {"containers": [{"name": "up", "image": "lab/none:0"}]}}}}, NAMESPACE, 60)  # fmt: skip
    assert upgrade.check(node) is None
    with lab.kubelet.scripted(
        lambda pod: Run(exit_code=0)
        if pod["metadata"].get("labels", {}).get("app.kubernetes.io/name")
        == "gpuwarden-maintenance" else None
    ):  # fmt: skip
        handle = upgrade.start(int(time.time()), node, 1)
        wait_until(lambda: upgrade.poll(handle) == "ok", 60, 0.2, "maintenance Job complete")

    # placement: de-prefer a node (PreferNoSchedule taint + label), then neutral again
    placement = KubePlacement(api)
    placement.reconcile({node: "marginal"})
    placement.reconcile({})

    # one GPU out through DRA: the dry-run preview, then live (patched in place), then back
    lab.http.post("/apis/resource.k8s.io/v1/resourceslices", _slice(dra_node))
    holder = lab.run_pod(job_ns, dra_node, name="dra-holder")
    _claim_holding(lab, job_ns, dra_node, "gpu-1", holder)
    dra = DraIsolation(api)
    assert "preview" in dra.isolate(dra_node, "1", "rbac test", dry_run=True)
    assert "NoSchedule" in dra.isolate(dra_node, "1", "rbac test")
    assert dra.active()
    dra.release(dra_node, "1")


def test_every_call_remediation_makes_is_granted_and_every_grant_is_used(
    kube_lab: KubeLab,
) -> None:
    for crd in (
        "self-node-remediation.medik8s.io_selfnoderemediations.yaml",
        "self-node-remediation.medik8s.io_selfnoderemediationtemplates.yaml",
        "bus.volcano.sh_commands.yaml",
        "batch.volcano.sh_jobs.yaml",
    ):
        kube_lab.install_crd(crd_file(crd))
    job_ns = kube_lab.namespace("ml")
    token = apply_remediation_rbac(kube_lab, [job_ns])
    user = f"system:serviceaccount:{NAMESPACE}:{REMEDIATION_SA}"
    mark = kube_lab.audit_mark()
    _exercise_every_path(kube_lab, token, job_ns)
    calls = used(kube_lab.audit_since(mark, user=user))

    refused = sorted(k for k, codes in calls.items() if 403 in codes)
    assert not refused, f"calls the shipped RBAC refuses: {refused}"
    grants = granted(kube_lab, NAMESPACE, REMEDIATION_SA)
    unused = sorted(grants - set(calls))
    assert not unused, f"granted but no code path uses them: {unused}"

    text = matrix(grants, calls)
    if os.environ.get("GPUWARDEN_WRITE_DOCS"):
        DOC.write_text(text)
    assert DOC.read_text() == text, "docs/rbac-matrix.md is stale: GPUWARDEN_WRITE_DOCS=1"


def matrix(grants: set[tuple[str, str, str]], calls: dict[tuple[str, str, str], set[int]]) -> str:
    rows = sorted(grants | set(calls))
    lines = [
        "# RBAC matrix: the remediation ServiceAccount",
        "",
        "Generated by `tests/kube/test_rbac.py` from the real API server's audit log while every",
        "Kubernetes path of the remediation service ran with the shipped ServiceAccount's token",
        "(`GPUWARDEN_WRITE_DOCS=1` rewrites it). *granted*: a shipped Role or ClusterRole binds",
        "it; *used*: some path made that call. The test fails on any refused call",
        "(403) and on any grant no path uses. The exporter mounts no token and calls no",
        "Kubernetes API; nor does the analyzer unless it runs sharded (the analyzer-sharded",
        "overlay, Helm `analyzer.replicas` > 1): its own ServiceAccount's Role then allows",
        "`coordination.k8s.io` `leases` get, list, create, update, patch, delete in its namespace",
        "and nothing else, each verb proven used and sufficient the same way by",
        "`tests/kube/test_replica_leases.py`.",
        "",
        "| API group | resource | verb | granted | used |",
        "|---|---|---|---|---|",
    ]
    for g, r, v in rows:
        granted_ = "yes" if (g, r, v) in grants else "no"
        lines.append(f"| {g} | {r} | {v} | {granted_} | {'yes' if (g, r, v) in calls else 'no'} |")
    return "\n".join(lines) + "\n"
