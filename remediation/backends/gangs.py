"""Gang-scheduled training jobs on Kubernetes: which pods move together, and how to restart them.

Distributed training runs as a gang: every rank must run, or the others hang inside a
collective. Evicting one member leaves the rest hung, and a lone replacement pod does not
restart the job. This module recognises a pod's gang from the labels, annotations and owner
references its controller writes, and plans a restart the way that controller expects:

- Volcano ``batch.volcano.sh/v1alpha1`` Job (vcjob): pods carry ``volcano.sh/job-name`` and
  the ``scheduling.k8s.io/group-name`` annotation (their PodGroup). Restart: a
  ``bus.volcano.sh/v1alpha1`` ``Command`` with ``action: RestartJob`` aimed at the vcjob
  and owned by it (what ``vcctl`` writes and Volcano's own job controller acts on; the
  vcjob's deletion takes the Command with it). The Command's CRD requires the target's
  uid, which the pods' owner reference gives; members that name no owner are deleted
  together instead (the server would refuse a Command without it, 422).
- A bare PodGroup (Volcano ``scheduling.k8s.io/group-name``, or the scheduler-plugins
  coscheduling label ``scheduling.x-k8s.io/pod-group``): restart by deleting every member
  together; their controllers recreate them and the gang scheduler places them at once.
- JobSet (``jobset.sigs.k8s.io/jobset-name``): deleting every member together fails the
  child Jobs, and the JobSet's failure policy recreates all of them (one restart attempt).
- Kubeflow ``PyTorchJob`` (``training.kubeflow.org/job-name`` with an owner reference of kind
  PyTorchJob; older operators: ``pytorch-job-name``): delete every member together; the
  training operator recreates them under the job's ``restartPolicy``.

Pure: it reads pod dicts and returns plans; the backend carries them out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

Obj = dict[str, Any]

VOLCANO_JOB_LABEL = "volcano.sh/job-name"
VOLCANO_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
COSCHEDULING_LABEL = "scheduling.x-k8s.io/pod-group"
JOBSET_LABEL = "jobset.sigs.k8s.io/jobset-name"
PYTORCHJOB_LABELS = ("training.kubeflow.org/job-name", "pytorch-job-name")
VOLCANO_JOB_API = "batch.volcano.sh/v1alpha1"
VOLCANO_COMMAND_API = "bus.volcano.sh/v1alpha1"


@dataclass(frozen=True)
class Gang:
    """One gang: ``kind`` (volcano-job | podgroup | jobset | pytorchjob), its namespace and
    name, and the uid of the controlling object when the pods name it."""

    kind: str
    namespace: str
    name: str
    owner_uid: str = ""

    @property
    def job_id(self) -> str:
        """How journal and budgets name the gang: one job, whatever its size."""
        return f"{self.namespace}/{self.kind}/{self.name}"


@dataclass(frozen=True)
class RestartPlan:
    """What restarting a gang takes: a ``command`` object to create (Volcano), or the member
    pods to delete together (``namespace/name``)."""

    gang: Gang
    members: tuple[str, ...]
    nodes: tuple[str, ...]
    command: Obj | None = None
    delete_pods: tuple[str, ...] = ()


def _meta(p: Obj) -> Mapping[str, Any]:
    return p.get("metadata") or {}


def gang_of(pod: Obj) -> Gang | None:
    """The gang ``pod`` belongs to, or None for a pod that can move alone."""
    meta = _meta(pod)
    labels = meta.get("labels") or {}
    ann = meta.get("annotations") or {}
    ns = str(meta.get("namespace") or "default")
    owners = meta.get("ownerReferences") or []

    def owner_uid(kind: str, api_prefix: str = "") -> str:
        for o in owners:
            if o.get("kind") == kind and str(o.get("apiVersion", "")).startswith(api_prefix):
                return str(o.get("uid") or "")
        return ""

    if labels.get(VOLCANO_JOB_LABEL):
        return Gang("volcano-job", ns, labels[VOLCANO_JOB_LABEL], owner_uid("Job", "batch.volcano"))
    if labels.get(JOBSET_LABEL):
        return Gang("jobset", ns, labels[JOBSET_LABEL])
    for key in PYTORCHJOB_LABELS:
        if labels.get(key):
            return Gang("pytorchjob", ns, labels[key], owner_uid("PyTorchJob"))
    if any(o.get("kind") == "PyTorchJob" for o in owners):
        name = next(str(o.get("name")) for o in owners if o.get("kind") == "PyTorchJob")
        return Gang("pytorchjob", ns, name, owner_uid("PyTorchJob"))
    group = ann.get(VOLCANO_GROUP_ANNOTATION) or labels.get(COSCHEDULING_LABEL)
    if group:
        return Gang("podgroup", ns, str(group))
    return None


def members(gang: Gang, pods: Iterable[Obj]) -> list[Obj]:
    """Every live pod of ``gang`` among ``pods`` (finished pods are not members any more)."""
    out = []
    for p in pods:
        if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        g = gang_of(p)
        if g is not None and (g.kind, g.namespace, g.name) == (
            gang.kind,
            gang.namespace,
            gang.name,
        ):
            out.append(p)
    return out


def _id(p: Obj) -> str:
    m = _meta(p)
    return f"{m.get('namespace', 'default')}/{m.get('name')}"


def restart_plan(gang: Gang, pods: Iterable[Obj], reason: str) -> RestartPlan:
    """How to restart ``gang`` whole; never a plan that moves one member alone."""
    mine = members(gang, pods)
    ids = tuple(sorted(_id(p) for p in mine))
    nodes = tuple(sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in mine} - {""}))
    if gang.kind == "volcano-job" and gang.owner_uid:
        # no blockOwnerDeletion: under OwnerReferencesPermissionEnforcement that would need
        # update on the vcjob's finalizers, a grant nothing else wants
        target: Obj = {"apiVersion": VOLCANO_JOB_API, "kind": "Job", "name": gang.name,
                       "uid": gang.owner_uid, "controller": True}  # fmt: skip
        command: Obj = {
            "apiVersion": VOLCANO_COMMAND_API,
            "kind": "Command",
            "metadata": {
                "generateName": f"{gang.name}-restartjob-",
                "namespace": gang.namespace,
                "ownerReferences": [target],
            },
            "action": "RestartJob",
            "target": target,
            "reason": "gpuwarden",
            "message": reason,
        }
        return RestartPlan(gang, ids, nodes, command=command)
    return RestartPlan(gang, ids, nodes, delete_pods=ids)
