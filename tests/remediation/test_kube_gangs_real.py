"""Gang restarts and SelfNodeRemediation on a real API server (tests/kubelab.py), run as the
shipped remediation ServiceAccount (tests/kube/shipped.py: the base's ClusterRoles and the
job-namespace RoleBinding): a 403 fails the test.

Each gang is made as its controller makes it: the published CRD installed (fixtures/crds,
tests/lab/servers.sh crds), the custom object created, and its member pods carrying the
labels, annotations and owner references that controller writes (Volcano v1.15
``createJobPod``; JobSet v0.10 child Jobs, whose pods the real Job controller creates;
Kubeflow training-operator v1.8 ``GenLabels`` + replica labels). No gang controller runs:
what gpuwarden asked of it (a RestartJob Command, members deleted together) is read back
on the server, and what the real Job and garbage-collection controllers do with it is
checked. Issue 32: these paths had met only the kmock emulator.
"""

from __future__ import annotations

import pytest

from gpuwarden.processes import wait_until
from remediation.backends import noderemediation
from remediation.backends.base import BackendError
from remediation.backends.kubernetes import KubernetesBackend
from remediation.checkpoint import ANNOTATION as CHECKPOINT
from tests.kube.shipped import NAMESPACE, REMEDIATION_SA, apply_remediation_rbac, used
from tests.kubelab import ApiError, KubeLab, Obj, crd_file

pytestmark = pytest.mark.real

USER = f"system:serviceaccount:{NAMESPACE}:{REMEDIATION_SA}"
CRDS = (
    "batch.volcano.sh_jobs.yaml",
    "bus.volcano.sh_commands.yaml",
    "scheduling.volcano.sh_podgroups.yaml",
    "jobset.x-k8s.io_jobsets.yaml",
    "kubeflow.org_pytorchjobs.yaml",
    "self-node-remediation.medik8s.io_selfnoderemediations.yaml",
    "self-node-remediation.medik8s.io_selfnoderemediationtemplates.yaml",
)
_installed: set[str] = set()
CONTAINERS = [{"name": "main", "image": "lab/none:0"}]


def prepared(lab: KubeLab) -> tuple[str, KubernetesBackend]:
    """The CRDs (once per server), a job namespace with the shipped job-namespace RoleBinding,
    and the backend as the shipped ServiceAccount."""
    if lab.url not in _installed:
        for crd in CRDS:
            lab.install_crd(crd_file(crd))
        _installed.add(lab.url)
    ns = lab.namespace("ml")
    token = apply_remediation_rbac(lab, [ns])
    return ns, KubernetesBackend(lab.kube_api(token))


def owner_ref(obj: Obj) -> Obj:
    """The controller reference a controller puts on what it creates."""
    return {"apiVersion": obj["apiVersion"], "kind": obj["kind"], "name": obj["metadata"]["name"],
            "uid": obj["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def pod(lab: KubeLab, ns: str, name: str, node: str, labels: dict[str, str],
        annotations: dict[str, str] | None = None, owner: Obj | None = None) -> Obj:  # fmt: skip
    meta: Obj = {"name": name, "labels": labels, "annotations": annotations or {}}
    if owner is not None:
        meta["ownerReferences"] = [owner]
    lab.http.post(f"/api/v1/namespaces/{ns}/pods",
                  {"metadata": meta, "spec": {"nodeName": node, "containers": CONTAINERS}})  # fmt: skip
    return lab.wait_phase(ns, name, "Running")


def uids(lab: KubeLab, ns: str) -> dict[str, str]:
    items = lab.http.get(f"/api/v1/namespaces/{ns}/pods").get("items") or []
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in items
            if not p["metadata"].get("deletionTimestamp")}  # fmt: skip


def bystanders(lab: KubeLab, ns: str, node: str) -> dict[str, str]:
    """What must not move: a lone pod on a member's other node, and in another namespace a
    pod carrying every gang label of the gang's name (another team's job of the same name)."""
    other = lab.namespace("other")
    pod(lab, ns, "notebook", node, {"app": "notebook"})
    same_name = {"volcano.sh/job-name": "llm", "jobset.sigs.k8s.io/jobset-name": "llm",
                 "training.kubeflow.org/job-name": "llm"}  # fmt: skip
    pod(lab, other, "llm-twin", node, same_name,
        {"scheduling.k8s.io/group-name": "llm"})  # fmt: skip
    return {f"{ns}/notebook": uids(lab, ns)["notebook"],
            f"{other}/llm-twin": uids(lab, other)["llm-twin"]}  # fmt: skip


def untouched(lab: KubeLab, before: dict[str, str]) -> None:
    for key, uid in before.items():
        ns, _, name = key.partition("/")
        assert uids(lab, ns).get(name) == uid, f"{key} was moved"


def calls(lab: KubeLab, mark: int) -> list[tuple[str, str, str, str, int]]:
    """The ServiceAccount's calls since ``mark``: (verb, resource, namespace, name, code);
    none refused."""
    events = lab.audit_since(mark, user=USER)
    refused = sorted(k for k, codes in used(events).items() if 403 in codes)
    assert not refused, f"the shipped RBAC refused: {refused}"
    out = []
    for e in events:
        ref = e.get("objectRef") or {}
        res = (ref.get("resource") or "") + (f"/{ref['subresource']}" if ref.get("subresource")
                                             else "")  # fmt: skip
        out.append((e["verb"], res, ref.get("namespace") or "", ref.get("name") or "",
                    int((e.get("responseStatus") or {}).get("code", 0))))  # fmt: skip
    return out


def writes(lab: KubeLab, mark: int) -> list[tuple[str, str, str, str, int]]:
    """Every write but the node's own (cordon, taint, conditions, Events)."""
    return [c for c in calls(lab, mark) if c[0] not in ("get", "list", "watch")
            and not c[1].startswith("nodes") and c[1] != "events"]  # fmt: skip


def written(lab: KubeLab, mark: int, n: int) -> list[tuple[str, str, str, str, int]]:
    """``writes`` once ``n`` are in the audit log (its last event may land just after the
    answer)."""

    def enough() -> list[tuple[str, str, str, str, int]] | None:
        w = writes(lab, mark)
        return w if len(w) >= n else None

    return list(wait_until(enough, 10, 0.1, f"{n} writes audited"))


def gone(lab: KubeLab, ns: str, names: list[str]) -> None:
    wait_until(lambda: not set(names) & set(uids(lab, ns)), 30, 0.1, f"{names} deleted")


# ---------------------------------------------------------------- Volcano


def vcjob(lab: KubeLab, ns: str, name: str, nodes: list[str], owned: bool = True) -> list[str]:
    """A Volcano Job, the PodGroup its controller makes (``<job>-<uid>``, owned by the job)
    and its worker pods as ``createJobPod`` writes them (v1.15)."""
    job = lab.http.post(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs", {
        "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "metadata": {"name": name},
        "spec": {"minAvailable": len(nodes), "schedulerName": "volcano", "queue": "default",
                 "tasks": [{"name": "worker", "replicas": len(nodes),
                            "template": {"spec": {"containers": CONTAINERS}}}]}})  # fmt: skip
    group = f"{name}-{job['metadata']['uid']}"
    lab.http.post(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": group, "ownerReferences": [owner_ref(job)]},
        "spec": {"minMember": len(nodes), "queue": "default"}})  # fmt: skip
    names = []
    for i, node in enumerate(nodes):
        names.append(f"{name}-worker-{i}")
        labels = {"volcano.sh/job-name": name, "volcano.sh/task-spec": "worker",
                  "volcano.sh/job-namespace": ns, "volcano.sh/queue-name": "default",
                  "volcano.sh/task-index": str(i)}  # fmt: skip
        ann = {"scheduling.k8s.io/group-name": group, "volcano.sh/job-name": name,
               "volcano.sh/task-spec": "worker", "volcano.sh/queue-name": "default",
               "volcano.sh/job-version": "0", "volcano.sh/task-index": str(i),
               "volcano.sh/template-uid": f"{name}-worker"}  # fmt: skip
        pod(lab, ns, names[-1], node, labels, ann, owner_ref(job) if owned else None)
    return names


def test_a_volcano_job_is_restarted_by_one_restartjob_command_it_owns_and_no_pod_is_touched(
    any_kube_lab: KubeLab,
) -> None:
    lab = any_kube_lab
    ns, backend = prepared(lab)
    a, b = lab.add_node(), lab.add_node()
    members = vcjob(lab, ns, "llm", [a, b])
    before = {**bystanders(lab, ns, b), **{f"{ns}/{m}": uids(lab, ns)[m] for m in members}}
    mark = lab.audit_mark()
    out = backend.take_out(a, "xid 79", evict=True)
    assert (
        out
        == f"cordoned and tainted; evicted 0 pods; restarted 1 gang(s) whole: {ns}/volcano-job/llm"
    )
    [cmd] = lab.http.get(f"/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands")["items"]
    job = lab.http.get(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/llm")
    assert cmd["action"] == "RestartJob" and cmd["reason"] == "gpuwarden"
    ref = {k: v for k, v in owner_ref(job).items() if k != "blockOwnerDeletion"}
    assert cmd["target"] == ref  # what Volcano's job controller acts on
    assert cmd["metadata"]["ownerReferences"] == [ref]
    untouched(lab, before)  # Volcano restarts its pods; gpuwarden deletes and evicts none
    assert written(lab, mark, 1) == [("create", "commands", ns, "", 201)]
    # the vcjob deleted: the real garbage collector takes the Command (and the PodGroup) along
    # once its discovery, refreshed every 30 s, has found the CRDs installed here
    lab.http.delete(f"/apis/batch.volcano.sh/v1alpha1/namespaces/{ns}/jobs/llm")
    wait_until(lambda: not lab.http.get(f"/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands")
               ["items"], 90, 0.5, "the Command collected with its job")  # fmt: skip


def test_the_command_crd_refuses_a_target_without_uid_so_unowned_volcano_members_go_together(
    kube_lab: KubeLab,
) -> None:
    ns, backend = prepared(kube_lab)
    with pytest.raises(ApiError) as e:  # what main sent for members that name no owner
        kube_lab.http.post(f"/apis/bus.volcano.sh/v1alpha1/namespaces/{ns}/commands", {
            "apiVersion": "bus.volcano.sh/v1alpha1", "kind": "Command",
            "metadata": {"generateName": "llm-restartjob-"}, "action": "RestartJob",
            "target": {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
                       "name": "llm"}})  # fmt: skip
    assert e.value.status == 422 and "target.uid: Required value" in str(e.value.body)
    a, b = kube_lab.add_node(), kube_lab.add_node()
    members = vcjob(kube_lab, ns, "llm", [a, b], owned=False)
    before = bystanders(kube_lab, ns, b)
    out = backend.take_out(a, "xid 79", evict=True)
    assert out.endswith(f"restarted 1 gang(s) whole: {ns}/volcano-job/llm")
    gone(kube_lab, ns, members)
    untouched(kube_lab, before)


def test_a_volcano_podgroups_members_on_two_nodes_are_deleted_together_and_the_job_controller_replaces_them(
    any_kube_lab: KubeLab,
) -> None:
    """A bare PodGroup (``scheduling.k8s.io/group-name`` on pods of ordinary batch Jobs, one
    rank each): both ranks deleted together; the real Job controller creates replacements,
    which gpuwarden reads back as the gang's restart."""
    lab = any_kube_lab
    ns, backend = prepared(lab)
    a, b = lab.add_node(), lab.add_node()
    lab.http.post(f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{ns}/podgroups", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "pg"}, "spec": {"minMember": 2}})  # fmt: skip
    for rank, node in enumerate((a, b)):
        lab.http.post(f"/apis/batch/v1/namespaces/{ns}/jobs", {
            "metadata": {"name": f"rank-{rank}"},
            "spec": {"backoffLimit": 3, "template": {
                "metadata": {"annotations": {"scheduling.k8s.io/group-name": "pg"}},
                "spec": {"nodeName": node, "restartPolicy": "Never", "schedulerName": "volcano",
                         "containers": CONTAINERS}}}})  # fmt: skip
    wait_until(lambda: len(uids(lab, ns)) == 2, 30, 0.1, "the Job controller's pods")
    for name in uids(lab, ns):
        lab.wait_phase(ns, name, "Running")
    first = uids(lab, ns)
    before = bystanders(lab, ns, b)
    [job] = backend.jobs_on(a)
    assert (job.job_id, job.nodes) == (f"{ns}/podgroup/pg", tuple(sorted((a, b))))
    mark = lab.audit_mark()
    assert backend.take_out(a, "xid 79", evict=True).endswith(f"whole: {ns}/podgroup/pg")
    done = written(lab, mark, 2)
    assert sorted((c[0], c[1], c[3]) for c in done) == [
        ("delete", "pods", n) for n in sorted(first)
    ]
    untouched(lab, before)

    def ranks() -> dict[str, str]:
        return {k: v for k, v in uids(lab, ns).items() if k.startswith("rank-")}

    def replaced() -> bool:
        now = ranks()
        return len(now) == 2 and not set(now.values()) & set(first.values())

    wait_until(replaced, 60, 0.2, "the Job controller replaced both ranks")
    for name in ranks():
        lab.wait_phase(ns, name, "Running")
    again = backend.job(job.job_id)
    assert again is not None and (again.restarts, again.state) == (1, "RUNNING")


# ---------------------------------------------------------------- JobSet


def test_a_jobsets_ranks_are_deleted_together_and_the_real_job_controller_fails_each_child_job(
    any_kube_lab: KubeLab,
) -> None:
    """JobSet v0.10's child Jobs (backoffLimit 0, as its examples) own the pods the real Job
    controller makes; deleting every rank together fails each child Job, which is what the
    JobSet's failure policy restarts the whole set on."""
    lab = any_kube_lab
    ns, backend = prepared(lab)
    a, b = lab.add_node(), lab.add_node()
    js = lab.http.post(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets", {
        "apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "pre"},
        "spec": {"failurePolicy": {"maxRestarts": 3}, "replicatedJobs": [{
            "name": "w", "replicas": 2, "template": {"spec": {"backoffLimit": 0, "template": {
                "spec": {"restartPolicy": "Never", "containers": CONTAINERS}}}}}]}})  # fmt: skip
    uid = js["metadata"]["uid"]
    for i, node in enumerate((a, b)):
        labels = {"jobset.sigs.k8s.io/jobset-name": "pre",
                  "jobset.sigs.k8s.io/replicatedjob-name": "w",
                  "jobset.sigs.k8s.io/replicatedjob-replicas": "2",
                  "jobset.sigs.k8s.io/job-index": str(i),
                  "jobset.sigs.k8s.io/job-global-index": str(i),
                  "jobset.sigs.k8s.io/restart-attempt": "0",
                  "jobset.sigs.k8s.io/jobset-uid": uid}  # fmt: skip
        lab.http.post(f"/apis/batch/v1/namespaces/{ns}/jobs", {
            "metadata": {"name": f"pre-w-{i}", "labels": labels, "annotations": labels,
                         "ownerReferences": [owner_ref(js)]},
            "spec": {"backoffLimit": 0, "template": {
                "metadata": {"labels": labels, "annotations": labels},
                "spec": {"nodeName": node, "restartPolicy": "Never",
                         "containers": CONTAINERS}}}})  # fmt: skip
    wait_until(lambda: len(uids(lab, ns)) == 2, 30, 0.1, "the Job controller's pods")
    for name in uids(lab, ns):
        lab.wait_phase(ns, name, "Running")
    ranks = sorted(uids(lab, ns))
    before = bystanders(lab, ns, b)
    [job] = backend.jobs_on(a)
    assert (job.job_id, job.nodes) == (f"{ns}/jobset/pre", tuple(sorted((a, b))))
    mark = lab.audit_mark()
    assert backend.take_out(a, "NVLink down", evict=True).endswith(f"whole: {ns}/jobset/pre")
    done = written(lab, mark, 2)  # deletes of the ranks, nothing else
    assert sorted((c[0], c[1], c[3]) for c in done) == [("delete", "pods", n) for n in ranks]
    untouched(lab, before)

    def failed(i: int) -> bool:
        st = lab.http.get(f"/apis/batch/v1/namespaces/{ns}/jobs/pre-w-{i}").get("status") or {}
        return any(c["type"] == "Failed" and c["status"] == "True"
                   for c in st.get("conditions") or [])  # fmt: skip

    wait_until(lambda: failed(0) and failed(1), 60, 0.2, "both child Jobs Failed")
    assert lab.http.get(f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{ns}/jobsets/pre")


# ---------------------------------------------------------------- PyTorchJob


def test_a_pytorchjobs_ranks_are_asked_to_checkpoint_then_deleted_together(
    any_kube_lab: KubeLab,
) -> None:
    lab = any_kube_lab
    ns, backend = prepared(lab)
    a, b = lab.add_node(), lab.add_node()
    ptj = lab.http.post(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs", {
        "apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": "bert"},
        "spec": {"pytorchReplicaSpecs": {
            "Master": {"replicas": 1, "restartPolicy": "OnFailure",
                       "template": {"spec": {"containers": [{"name": "pytorch",
                                                             "image": "lab/none:0"}]}}},
            "Worker": {"replicas": 1, "restartPolicy": "OnFailure",
                       "template": {"spec": {"containers": [{"name": "pytorch",
                                                             "image": "lab/none:0"}]}}}}}})  # fmt: skip
    common = {"training.kubeflow.org/operator-name": "pytorchjob-controller",
              "training.kubeflow.org/job-name": "bert"}  # fmt: skip
    pod(lab, ns, "bert-master-0", a, {**common, "training.kubeflow.org/replica-type": "master",
                                      "training.kubeflow.org/replica-index": "0",
                                      "training.kubeflow.org/job-role": "master"},
        owner=owner_ref(ptj))  # fmt: skip
    pod(lab, ns, "bert-worker-0", b, {**common, "training.kubeflow.org/replica-type": "worker",
                                      "training.kubeflow.org/replica-index": "0"},
        owner=owner_ref(ptj))  # fmt: skip
    before = bystanders(lab, ns, b)
    [job] = backend.jobs_on(a)
    assert (job.job_id, job.nodes, job.state) == (f"{ns}/pytorchjob/bert",
                                                  tuple(sorted((a, b))), "RUNNING")  # fmt: skip
    backend.request_checkpoint(job)  # every rank, so none blocks the others' collective
    for name in ("bert-master-0", "bert-worker-0"):
        ann = lab.http.get(f"/api/v1/namespaces/{ns}/pods/{name}")["metadata"]["annotations"]
        assert CHECKPOINT in ann
    mark = lab.audit_mark()
    backend.requeue(job, a)
    done = written(lab, mark, 2)
    assert sorted((c[0], c[1], c[3]) for c in done) == [
        ("delete", "pods", "bert-master-0"),
        ("delete", "pods", "bert-worker-0"),
    ]
    gone(lab, ns, ["bert-master-0", "bert-worker-0"])
    untouched(lab, before)
    assert lab.http.get(f"/apis/kubeflow.org/v1/namespaces/{ns}/pytorchjobs/bert")  # the operator's


# ---------------------------------------------------------------- SelfNodeRemediation


def snr_path(ns: str, name: str = "") -> str:
    base = f"/apis/{noderemediation.GROUP}/{noderemediation.VERSION}/namespaces/{ns}"
    return f"{base}/{noderemediation.REMEDIATIONS}" + (f"/{name}" if name else "")


def test_a_reboot_creates_one_selfnoderemediation_and_waits_while_the_last_one_is_being_deleted(
    any_kube_lab: KubeLab,
) -> None:
    lab = any_kube_lab
    _, backend = prepared(lab)
    base = f"/apis/{noderemediation.GROUP}/{noderemediation.VERSION}"

    def listed() -> list[Obj] | None:
        try:  # a CRD just installed answers 429 while its storage initializes
            return list(lab.http.get(f"{base}/{noderemediation.TEMPLATES}").get("items") or [])
        except ApiError:
            return None

    for t in wait_until(lambda: (got := listed()) is not None and [got], 30, 0.5, "templates")[0]:
        lab.http.delete(  # the lab is shared: this test's operator is the only one
            f"{base}/namespaces/{t['metadata']['namespace']}/{noderemediation.TEMPLATES}/"
            f"{t['metadata']['name']}"
        )
    snr_ns = lab.namespace("snr")
    lab.http.post(f"/apis/{noderemediation.GROUP}/{noderemediation.VERSION}/namespaces/{snr_ns}/"
                  f"{noderemediation.TEMPLATES}", {
        "apiVersion": f"{noderemediation.GROUP}/{noderemediation.VERSION}",
        "kind": "SelfNodeRemediationTemplate",
        "metadata": {"name": "self-node-remediation-automatic-strategy-template"},
        "spec": {"template": {"spec": {"remediationStrategy": "OutOfServiceTaint"}}}})  # fmt: skip
    node = lab.add_node()
    backend.take_out(node, "xid 79", evict=True)
    assert backend.reboot(node, "xid 79") == (
        f"reboot requested from medik8s (SelfNodeRemediation {snr_ns}/{node})")  # fmt: skip
    cr = lab.http.get(snr_path(snr_ns, node))
    assert cr["spec"]["remediationStrategy"] == "OutOfServiceTaint"  # the template's
    assert cr["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "gpuwarden"}
    assert backend.reboot(node, "again") == (
        f"reboot already requested (SelfNodeRemediation {snr_ns}/{node})")  # fmt: skip
    # the operator's finalizer holds the CR while its agent unwinds: the release deletes it,
    # and a reboot asked meanwhile must not be reported as requested
    lab.http.merge_patch(snr_path(snr_ns, node), {"metadata": {"finalizers": [
        "self-node-remediation.medik8s.io/snr-finalizer"]}})  # fmt: skip
    assert backend.release(node) == "uncordoned; its SelfNodeRemediation deleted"
    assert lab.http.get(snr_path(snr_ns, node))["metadata"].get("deletionTimestamp")
    backend.take_out(node, "xid 79 again", evict=True)
    with pytest.raises(BackendError, match="still being deleted"):
        backend.reboot(node, "xid 79 again")
    lab.http.merge_patch(snr_path(snr_ns, node), {"metadata": {"finalizers": None}})
    wait_until(lambda: lab.http.get_or_none(snr_path(snr_ns, node)) is None, 30, 0.1, "CR gone")
    assert backend.reboot(node, "xid 79 again").startswith("reboot requested")
    fresh = lab.http.get(snr_path(snr_ns, node))
    assert fresh["metadata"]["annotations"]["gpuwarden.io/reason"] == "xid 79 again"
