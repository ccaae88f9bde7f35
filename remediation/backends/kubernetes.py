"""Kubernetes backend: cordon, taint, evict through the Eviction API, label, uncordon ours only.

Ownership is an annotation we write when we cordon (``gpuwarden.io/cordoned-by``); a node
cordoned by anyone else is never touched and never uncordoned. The cordon and the release
rewrite the node's taint list (the server replaces it whole), so each is conditional on the
``resourceVersion`` read: a taint another writer added meanwhile makes the write answer 409,
and the node is read again (never lost). An eviction the server
refuses (a PodDisruptionBudget's 429, a budget its controller has not computed yet, 403, a
400 from a server without policy/v1, 500) blocks the evacuation: the attempt fails at once
with :class:`EvacuationBlocked`, carrying each pod and the server's own reason and message
(no thread sleeps on it), the executor records the block and retries the action with the
policy's backoff on later ticks; nothing is ever deleted around a budget.
Checkpoint requests are a pod annotation the pod reads through a downward-API volume.

Gang-scheduled jobs (Volcano vcjobs and PodGroups, JobSets, Kubeflow PyTorchJobs; see
:mod:`remediation.backends.gangs`) are one job here: every member is asked to checkpoint,
and the gang is restarted whole the way its controller expects, never one member evicted
alone. Budgets count the gang once, with all its members' nodes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from common import fabric
from remediation.backends import nodehealth, noderemediation
from remediation.backends.base import BackendError, BlockedPod, EvacuationBlocked, NodePath
from remediation.backends.dra import DraIsolation
from remediation.backends.gangs import Gang, gang_of, members, restart_plan
from remediation.backends.kubeapi import KubeApi, Obj, OfficialKubeApi
from remediation.backends.nodehealth import NodeHealth
from remediation.checkpoint import ANNOTATION as CHECKPOINT_ANNOTATION
from remediation.model import Job, NodeView

OWNER = "gpuwarden.io/cordoned-by"
REASON = "gpuwarden.io/reason"
STATE_LABEL = "gpuwarden.io/quarantine"
TAINT_KEY = "gpuwarden.io/quarantine"
WRITE_TRIES = 5  # reads and conditional writes of a node before a conflict fails the step


def _meta(o: Obj) -> dict[str, Any]:
    return o.get("metadata") or {}


def _wants_gpu(p: Obj) -> bool:
    """A pod given GPUs by the device plugin (``nvidia.com/gpu``, MIG slices) or by DRA."""
    spec = p.get("spec") or {}
    if spec.get("resourceClaims"):
        return True
    for c in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
        res = c.get("resources") or {}
        names = {*(res.get("limits") or {}), *(res.get("requests") or {})}
        if any(str(n).startswith("nvidia.com/") for n in names):
            return True
    return False


class KubernetesBackend:
    name = "kubernetes"

    def __init__(
        self,
        api: KubeApi,
        topology: Mapping[str, Mapping[str, str]] | None = None,
        taint_effect: str = "NoSchedule",
    ) -> None:
        self.api, self.topology, self.effect = api, topology or {}, taint_effect
        self.owners: dict[str, str] = {}  # job id -> controller uid, to find its replacement
        self.gangs: dict[str, Gang] = {}  # gang job id -> gang
        self.restarted: dict[str, frozenset[str]] = {}  # gang job id -> member uids we replaced
        self.dra = DraIsolation(api)  # one GPU out, not the node (policy kubernetes.dra_*)
        self.health = NodeHealth(api)  # Node conditions and Events: what gpuwarden decided

    @classmethod
    def from_config(
        cls,
        topology: Mapping[str, Mapping[str, str]],
        taint_effect: str = "NoSchedule",
        timeout: float = 10.0,
    ) -> KubernetesBackend:
        """The in-cluster or $KUBECONFIG client; each API call bounded by ``timeout``
        (--command-timeout-s) and one retry (OfficialKubeApi.from_config)."""
        return cls(OfficialKubeApi.from_config(timeout=timeout), topology, taint_effect)

    def _view(self, n: Obj) -> NodeView:
        meta, spec = _meta(n), n.get("spec") or {}
        ann, labels = meta.get("annotations") or {}, meta.get("labels") or {}
        name = str(meta.get("name"))
        conds = (n.get("status") or {}).get("conditions") or []
        not_ready = any(c.get("type") == "Ready" and c.get("status") != "True" for c in conds)
        cordoned = bool(spec.get("unschedulable"))
        ours = cordoned and ann.get(OWNER) == "gpuwarden"
        reason = ann.get(REASON) or "" if ours else ("cordoned" if cordoned else "")
        domains = fabric.from_labels(labels)
        domains.update(self.topology.get(name, {}))
        return NodeView(
            name, cordoned or not_ready, ours, reason or ("NotReady" if not_ready else ""), domains
        )

    def fleet(self) -> tuple[NodeView, ...]:
        return tuple(self._view(n) for n in self.api.list_nodes())

    def node(self, name: str) -> NodeView | None:
        n = self.api.read_node(name)
        return None if n is None else self._view(n)

    def _write_node(self, node: str, body_of: Callable[[list[Obj]], Obj]) -> None:
        """Read-modify-write of the node's taints (a list the server replaces whole),
        conditional on the ``resourceVersion`` read: another writer's change in between (a
        taint of theirs) answers 409 and the node is read again, never overwritten.
        ``body_of``: the patch, given the node's taints other than gpuwarden's."""
        for _ in range(WRITE_TRIES):
            n = self.api.read_node(node) or {}
            others = [t for t in (n.get("spec") or {}).get("taints") or []
                      if t.get("key") != TAINT_KEY]  # fmt: skip
            body = body_of(others)
            if _meta(n).get("resourceVersion"):
                body["metadata"]["resourceVersion"] = _meta(n)["resourceVersion"]
            try:
                self.api.patch_node(node, body)
                return
            except Exception as e:  # the client's ApiException; only a conflict is retried
                if getattr(e, "status", None) != 409:
                    raise
        raise BackendError(f"node {node} changed under each of {WRITE_TRIES} writes (HTTP 409)")

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        view = self.node(node)
        if view is None:
            raise BackendError(f"node {node} not found")
        if view.out_of_service and not view.ours and view.reason == "cordoned":
            raise BackendError(f"node {node} is cordoned by someone else")
        taint = {"key": TAINT_KEY, "value": "true", "effect": self.effect}
        self._write_node(
            node,
            lambda others: {
                "metadata": {
                    "annotations": {OWNER: "gpuwarden", REASON: reason},
                    "labels": {STATE_LABEL: "quarantined"},
                },
                "spec": {"unschedulable": True, "taints": [*others, taint]},
            },
        )
        if not self.is_taken_out(node):
            raise BackendError(f"cordon of {node} not visible on read-back")
        self.health.set(node, {nodehealth.HEALTHY: (False, "GpuFault", reason),
                               nodehealth.QUARANTINED: (True, "Cordoned", reason)})  # fmt: skip
        if not view.ours:  # once per quarantine, not again on each retry of its evictions
            self.health.event(node, "Warning", "Quarantined",
                              f"cordoned and tainted {self.effect}: {reason}")  # fmt: skip
        out = "cordoned and tainted"
        if evict:
            out += f"; {self._reported(node, self._evict_all)}"
        return out

    def _reported(self, node: str, evacuate: Callable[[str], str]) -> str:
        """Run an evacuation; a blocked one is also an Event on the node (aggregated: the
        same pods refused for the same reason bump one Event's count)."""
        try:
            return evacuate(node)
        except EvacuationBlocked as e:
            self.health.event(node, "Warning", "EvacuationBlocked",
                              f"{e.scope} {node}: {nodehealth.blocked_message(e.pods)}")  # fmt: skip
            raise

    def is_taken_out(self, node: str) -> bool:
        v = self.node(node)
        return v is not None and v.ours

    def is_evacuated(self, node: str) -> bool:
        """No pod left on ``node`` that a drain evicts one by one (a DaemonSet's, a static or
        a finished pod stays; one already terminating is going): a drain killed between its
        cordon and its evictions is not done (reconciliation). A gang's pods are restarted
        whole, not evicted, and are not counted."""
        return not any(gang_of(p) is None and not _meta(p).get("deletionTimestamp")
                       for p in self._pods(node))  # fmt: skip

    def isolate_gpu(self, node: str, gpu: str, reason: str, effect: str) -> str | None:
        """Taint one GPU's DRA device; None where the node has no DRA device for it."""
        try:
            out = self._reported(node, lambda _: self.dra.isolate(node, gpu, reason, effect))
        except NodePath:
            raise  # said, and journaled by the executor: not a silent fallback
        except BackendError as e:
            if "node path" in str(e):  # no DRA device for this GPU: the usual node path
                return None
            raise
        self.health.set(node, {nodehealth.HEALTHY: (False, "GpuIsolated", f"GPU {gpu}: {reason}")})
        self.health.event(node, "Warning", "GpuIsolated", f"GPU {gpu} taken out alone: {out}")
        return out

    def release(self, node: str) -> str:
        view = self.node(node)
        if view is None:
            raise BackendError(f"node {node} not found")
        gpus = self.dra.release_node(node)
        if gpus and not view.ours:
            out = f"GPU(s) {', '.join(gpus)} back in service (DeviceTaintRules deleted)"
            self._report_release(node, "GpuReleased", out)
            return out
        if view.out_of_service and not view.ours:
            raise BackendError(f"refusing to uncordon {node}: cordon is not ours ({view.reason})")
        if not view.ours:
            return "already in service"
        self._write_node(
            node,
            lambda others: {
                "metadata": {
                    "annotations": {OWNER: None, REASON: None},
                    "labels": {STATE_LABEL: None},
                },
                "spec": {"unschedulable": False, "taints": others},
            },
        )
        after = self.node(node)
        if after is None or after.ours:
            raise BackendError(f"uncordon of {node} not visible on read-back")
        out = "uncordoned"
        if noderemediation.clear(self.api, node):
            out = "uncordoned; its SelfNodeRemediation deleted"
        self._report_release(node, "Released", out)
        return out

    def _report_release(self, node: str, reason: str, out: str) -> None:
        """Conditions back to all-clear (only where gpuwarden wrote them) and an Event."""
        self.health.set(node, {nodehealth.HEALTHY: (True, "NoGpuFault", f"released: {out}"),
                               nodehealth.QUARANTINED: (False, "Released", out)},
                        only_if_present=True)  # fmt: skip
        self.health.event(node, "Normal", reason, f"gpuwarden released the node: {out}")

    def _pods(self, node: str) -> list[Obj]:
        out = []
        for p in self.api.list_pods(node):
            owners = _meta(p).get("ownerReferences") or []
            if any(o.get("kind") == "DaemonSet" for o in owners):
                continue  # DaemonSet pods stay (kubectl drain --ignore-daemonsets)
            if "kubernetes.io/config.mirror" in (_meta(p).get("annotations") or {}):
                continue  # static pods cannot be evicted
            if (p.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            out.append(p)
        return out

    def _evict(self, namespace: str, name: str) -> BlockedPod | None:
        """One eviction request: None when the pod is gone or going, else what the server
        said refusing it (a PodDisruptionBudget's 429, a budget the disruption controller
        has not computed yet, 403, a 400 from a server without policy/v1, 500, ...). A
        Pending pod is evicted whatever its budget (the server ignores budgets for pods
        that are Pending, terminating or finished); nothing here assumes otherwise."""
        answer = self.api.evict(namespace, name)
        if answer.done:
            return None
        message = " ".join(x for x in (answer.message, *answer.causes) if x)
        return BlockedPod(f"{namespace}/{name}", answer.status, answer.reason, message)

    def _evict_all(self, node: str) -> str:
        singles, gangs = [], {}
        for p in self._pods(node):
            g = gang_of(p)
            if g is None:
                singles.append(p)
            else:
                gangs[g.job_id] = g
        blocked = [
            b
            for p in singles
            if (b := self._evict(_meta(p).get("namespace", "default"), _meta(p)["name"]))
        ]
        if blocked:  # the executor retries the action with backoff; gangs wait for that
            raise EvacuationBlocked(node, tuple(blocked))
        for g in gangs.values():  # never one member alone: the whole gang restarts
            self._restart_gang(g, f"node {node} taken out of service")
        out = f"evicted {len(singles)} pods"
        if gangs:
            out += f"; restarted {len(gangs)} gang(s) whole: {', '.join(sorted(gangs))}"
        return out

    def _restart_gang(self, gang: Gang, reason: str) -> None:
        pods = self.api.list_pods(None)
        plan = restart_plan(gang, pods, reason)
        self.restarted[gang.job_id] = frozenset(
            str(_meta(p).get("uid") or _meta(p).get("name")) for p in members(gang, pods)
        )
        if plan.command is not None:
            group, _, version = str(plan.command["apiVersion"]).rpartition("/")
            status = self.api.create_custom(
                group, version, gang.namespace, "commands", plan.command
            )
            if status not in (200, 201):
                raise BackendError(f"restart of gang {gang.job_id}: Command create HTTP {status}")
            return
        failed = []
        for pid in plan.delete_pods:
            namespace, _, name = pid.partition("/")
            status = self.api.delete_pod(namespace, name)
            if status not in (200, 202, 404):
                failed.append(f"{pid}: HTTP {status}")
        if failed:
            raise BackendError(f"restart of gang {gang.job_id} incomplete: {'; '.join(failed)}")

    def _gang_job(self, gang: Gang, pods: list[Obj]) -> Job:
        mine = members(gang, pods)
        phases = {str((p.get("status") or {}).get("phase") or "Pending").upper() for p in mine}
        state = "RUNNING" if phases == {"RUNNING"} else ("PENDING" if mine else "COMPLETED")
        nodes = tuple(sorted({str((p.get("spec") or {}).get("nodeName") or "") for p in mine}))
        replaced = self.restarted.get(gang.job_id)
        uids = {str(_meta(p).get("uid") or _meta(p).get("name")) for p in mine}
        restarts = 1 if replaced is not None and mine and not (uids & replaced) else 0
        return Job(gang.job_id, state, tuple(n for n in nodes if n), restarts)

    def _job(self, p: Obj) -> Job:
        meta = _meta(p)
        jid = f"{meta.get('namespace', 'default')}/{meta.get('name')}"
        phase = str((p.get("status") or {}).get("phase") or "Pending").upper()
        where = str((p.get("spec") or {}).get("nodeName") or "")
        return Job(jid, phase, (where,) if where else ())  # unscheduled: on no node, as a gang

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return self._jobs_of(self._pods(node))

    def jobs_on_gpu(self, node: str, gpu: str) -> tuple[tuple[Job, ...], str]:
        """The jobs a reset of GPU ``gpu`` must move, and how they were found: with DRA, the
        pods whose ResourceClaims hold that device; else (no DRA device for it, or the DRA
        API unreadable) every pod of the node that requests a GPU (the device plugin does
        not say which GPU a pod has). Pods without GPUs stay either way."""
        pods = self._pods(node)
        try:
            held = self.dra.pods_on(node, gpu)
        except Exception as e:  # fail closed: move more, never fewer, than the GPU's users
            scope = f"the node's GPU pods (no DRA device: {e})"
            return self._jobs_of([p for p in pods if _wants_gpu(p)]), scope
        mine = [p for p in pods if (_meta(p).get("namespace", "default"), _meta(p)["name"]) in held]
        return self._jobs_of(mine), f"the pods holding GPU {gpu} (DRA)"

    def _jobs_of(self, pods: list[Obj]) -> tuple[Job, ...]:
        jobs: list[Job] = []
        everyone: list[Obj] | None = None
        for p in pods:
            gang = gang_of(p)
            if gang is not None:  # one job per gang, with every member's node
                if all(j.job_id != gang.job_id for j in jobs):
                    self.gangs[gang.job_id] = gang
                    everyone = self.api.list_pods(None) if everyone is None else everyone
                    jobs.append(self._gang_job(gang, everyone))
                continue
            job = self._job(p)
            ctrl = [o for o in _meta(p).get("ownerReferences") or [] if o.get("controller")]
            if ctrl:
                self.owners[job.job_id] = str(ctrl[0].get("uid"))
            jobs.append(job)
        return tuple(jobs)

    def job(self, job_id: str) -> Job | None:
        gang = self.gangs.get(job_id)
        if gang is not None:
            job = self._gang_job(gang, self.api.list_pods(None))
            return None if job.state == "COMPLETED" else job
        namespace, _, name = job_id.partition("/")
        pod = self.api.read_pod(namespace, name)
        if pod is not None:
            return self._job(pod)
        uid = self.owners.get(job_id)
        if uid is None:
            return None
        for p in self.api.list_pods(None):  # the replacement pod of the same controller
            if any(o.get("uid") == uid for o in _meta(p).get("ownerReferences") or []):
                job = self._job(p)
                return Job(job_id, job.state, job.nodes, 1)
        return None

    def request_checkpoint(self, job: Job) -> None:
        body = {"metadata": {"annotations": {CHECKPOINT_ANNOTATION: str(int(time.time()))}}}
        gang = self.gangs.get(job.job_id)
        if gang is not None:  # every rank is asked, so no rank blocks the others' checkpoint
            for p in members(gang, self.api.list_pods(None)):
                self.api.patch_pod(_meta(p).get("namespace", "default"), _meta(p)["name"], body)
            return
        namespace, _, name = job.job_id.partition("/")
        self.api.patch_pod(namespace, name, body)

    def requeue(self, job: Job, exclude: str) -> None:
        gang = self.gangs.get(job.job_id)
        if gang is not None:
            self._restart_gang(gang, f"requeued away from {exclude}")
            return
        namespace, _, name = job.job_id.partition("/")

        def move(node: str) -> str:  # cordoned: its controller reschedules it elsewhere
            blocked = self._evict(namespace, name)
            if blocked is not None:
                raise EvacuationBlocked(node, (blocked,))
            return "evicted"

        self._reported(exclude, move)

    def reboot(self, node: str, reason: str) -> str:
        return noderemediation.request_reboot(self.api, node, reason)  # medik8s does it

    def mark(self, node: str, state: str) -> None:
        self.api.patch_node(node, {"metadata": {"labels": {STATE_LABEL: state}}})
        self.health.set(node, {nodehealth.QUARANTINED: (True, nodehealth.camel(state),
                                                        f"gpuwarden holds the node: {state}")},
                        only_if_present=True)  # fmt: skip
