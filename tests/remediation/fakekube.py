"""An in-memory Kubernetes API for the Kubernetes backend (remediation/backends/kubernetes.py):
the KubeApi calls it makes, over dicts, with every write recorded. No HTTP: the tests that
use it run in milliseconds, so the mutation run can afford them (the kmock tests in
test_kubernetes.py check the same backend over real HTTP, with exact requests).

Semantics kept from the API server where the backend depends on them: a node patch is a JSON
merge patch (None deletes a key, a list is replaced whole) conditional on the
``resourceVersion`` it carries (409 when stale); the status subresource merges conditions by
type; an eviction answers what the test scripted (201 and the pod gone by default).
"""

from __future__ import annotations

import copy
from typing import Any

from remediation.backends import dra
from remediation.backends.base import Unavailable
from remediation.backends.kubeapi import Eviction
from remediation.backends.kubernetes import KubernetesBackend

Obj = dict[str, Any]


class Conflict(Exception):
    """The client's ApiException for a stale resourceVersion."""

    status = 409


def merge(into: Obj, patch: Obj) -> None:
    """RFC 7386 JSON merge patch."""
    for k, v in patch.items():
        if v is None:
            into.pop(k, None)
        elif isinstance(v, dict) and isinstance(into.get(k), dict):
            merge(into[k], v)
        else:
            into[k] = copy.deepcopy(v)


def node(name: str, ready: str | None = "True", **meta: Any) -> Obj:
    status = {} if ready is None else {"conditions": [{"type": "Ready", "status": ready}]}
    return {
        "metadata": {"name": name, "labels": {}, "annotations": {}, "resourceVersion": "1",
                     **meta},
        "spec": {},
        "status": status,
    }  # fmt: skip


def pod(ns: str | None, name: str, on: str | None, phase: str | None = "Running",
        gpus: int = 0, uid: str | None = None, owner: str = "ReplicaSet",
        labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None) -> Obj:  # fmt: skip
    meta: Obj = {"name": name, "labels": dict(labels or {}), "annotations": dict(annotations or {}),
                 "ownerReferences": [{"kind": owner, "name": "o", "uid": f"ctrl-{name}",
                                      "controller": True, "apiVersion": "apps/v1"}]}  # fmt: skip
    if ns is not None:
        meta["namespace"] = ns
    if uid is not None:
        meta["uid"] = uid
    container: Obj = {"name": "c", "image": "i"}
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
    spec: Obj = {"containers": [container]}
    if on is not None:
        spec["nodeName"] = on
    return {"metadata": meta, "spec": spec, "status": {} if phase is None else {"phase": phase}}


class FakeKube:
    def __init__(self, *nodes: Obj) -> None:
        self.nodes: dict[str, Obj] = {n["metadata"]["name"]: n for n in nodes}
        self.pods: list[Obj] = []
        self.events: list[Obj] = []
        self.status_patches: list[tuple[str, Obj]] = []
        self.node_patches: list[tuple[str, Any]] = []
        self.pod_patches: list[tuple[str, str, Obj]] = []
        self.evictions: list[tuple[str, str]] = []
        self.refuse: dict[str, Eviction] = {}  # "ns/name" -> the refusal the server answers
        self.deleted: list[tuple[str, str]] = []
        self.delete_status: dict[str, int] = {}  # "ns/name" -> the DELETE's HTTP status
        self.custom: dict[str, list[Obj]] = {}  # plural -> objects
        self.created: list[tuple[str, str, str, str, Obj]] = []
        self.create_status = 201
        self.rules: dict[str, Obj] = {}  # DeviceTaintRules by name
        self.slices: list[Obj] = []
        self.claims: list[Obj] = []
        self.list_all_pods = 0  # list_pods(None) calls: the whole cluster's pods
        self.ignore_node_patches = False  # a webhook that undoes every node write
        self.node_patch_error: Exception | None = None
        self.jobs: dict[tuple[str, str], Obj] = {}  # batch/v1 Jobs by (namespace, name)
        self.job_creates: list[tuple[str, str]] = []
        self.dry_run: tuple[int, str] = (201, "")  # what a dryRun=All create answers
        self.dry_runs: list[Obj] = []
        self.silent: set[str] = set()  # calls that raise Unavailable (a silent server)
        self.job_read_error: Exception | None = None

    # -- the cluster
    def add(self, *pods: Obj) -> None:
        self.pods.extend(pods)

    def conditions(self, name: str) -> dict[str, Obj]:
        conds = (self.nodes[name].get("status") or {}).get("conditions") or []
        return {c["type"]: c for c in conds if c["type"] != "Ready"}

    def gpus(self, name: str, count: int = 4) -> None:
        """Publish ``count`` GPUs of node ``name`` in a ResourceSlice (DRA)."""
        devs = [{"name": f"gpu-{g}", "attributes": {"index": {"int": g}}} for g in range(count)]
        self.slices.append({"spec": {"nodeName": name, "driver": dra.DRIVER,
                                     "pool": {"name": name}, "devices": devs}})  # fmt: skip

    def claim(self, ns: str, pod_name: str, on: str, gpu: int) -> None:
        self.claims.append({"metadata": {"namespace": ns}, "status": {
            "allocation": {"devices": {"results": [
                {"driver": dra.DRIVER, "pool": on, "device": f"gpu-{gpu}"}]}},
            "reservedFor": [{"resource": "pods", "name": pod_name}]}})  # fmt: skip

    # -- nodes
    def list_nodes(self) -> list[Obj]:
        return [copy.deepcopy(n) for n in self.nodes.values()]

    def read_node(self, name: str) -> Obj | None:
        return copy.deepcopy(self.nodes.get(name))

    def patch_node(self, name: str, body: Any) -> None:
        self.node_patches.append((name, copy.deepcopy(body)))
        if self.node_patch_error is not None:
            raise self.node_patch_error
        n = self.nodes[name]
        body = copy.deepcopy(body)
        rv = (body.get("metadata") or {}).pop("resourceVersion", None)
        if rv is not None and rv != n["metadata"].get("resourceVersion"):
            raise Conflict(f"node {name}: resourceVersion {rv} is stale")
        if self.ignore_node_patches:
            return
        merge(n, body)
        n["metadata"]["resourceVersion"] = str(int(n["metadata"].get("resourceVersion", 0)) + 1)

    def patch_node_status(self, name: str, body: Obj) -> None:
        if name not in self.nodes:
            raise LookupError(f"node {name} not found")
        self.status_patches.append((name, copy.deepcopy(body)))
        status = self.nodes[name].setdefault("status", {})
        conds = status.setdefault("conditions", [])
        for c in body["status"]["conditions"]:
            conds[:] = [x for x in conds if x["type"] != c["type"]] + [copy.deepcopy(c)]

    # -- events
    def create_event(self, namespace: str, body: Obj) -> int:
        self.events.append(copy.deepcopy(body))
        return 201

    def patch_event(self, namespace: str, name: str, body: Obj) -> int:
        for e in self.events:
            if e["metadata"]["name"] == name:
                merge(e, body)
                return 200
        return 404

    # -- pods
    def list_pods(self, node: str | None) -> list[Obj]:
        if node is None:
            self.list_all_pods += 1
            return copy.deepcopy(self.pods)
        return [copy.deepcopy(p) for p in self.pods if p["spec"].get("nodeName") == node]

    def _find(self, namespace: str, name: str) -> Obj | None:
        for p in self.pods:
            m = p["metadata"]
            if (m.get("namespace", "default"), m["name"]) == (namespace, name):
                return p
        return None

    def read_pod(self, namespace: str, name: str) -> Obj | None:
        return copy.deepcopy(self._find(namespace, name))

    def patch_pod(self, namespace: str, name: str, body: Obj) -> None:
        self.pod_patches.append((namespace, name, copy.deepcopy(body)))
        p = self._find(namespace, name)
        if p is None:
            raise LookupError(f"pod {namespace}/{name} not found")
        merge(p, body)

    def evict(self, namespace: str, name: str) -> Eviction:
        self.evictions.append((namespace, name))
        refusal = self.refuse.get(f"{namespace}/{name}")
        if refusal is not None:
            return refusal
        p = self._find(namespace, name)
        if p is None:
            return Eviction(404)
        self.pods.remove(p)
        return Eviction(201)

    def delete_pod(self, namespace: str, name: str) -> int:
        self.deleted.append((namespace, name))
        status = self.delete_status.get(f"{namespace}/{name}")
        if status is not None:
            return status
        p = self._find(namespace, name)
        if p is None:
            return 404
        self.pods.remove(p)
        return 200

    # -- custom objects (Volcano Commands, medik8s, DRA)
    def served_versions(self, group: str, plural: str) -> list[str]:
        return ["v1"] if (group, plural) == (dra.GROUP, dra.RULES) else []

    def list_custom(self, group: str, version: str, plural: str) -> list[Obj]:
        if plural == "resourceslices":
            return copy.deepcopy(self.slices)
        if plural == "resourceclaims":
            return copy.deepcopy(self.claims)
        if plural == dra.RULES:
            return [copy.deepcopy(r) for r in self.rules.values()]
        return copy.deepcopy(self.custom.get(plural, []))

    def create_custom(self, group: str, version: str, namespace: str, plural: str,
                      body: Obj) -> int:  # fmt: skip
        self.created.append((group, version, namespace, plural, copy.deepcopy(body)))
        return self.create_status

    def delete_custom(self, group: str, version: str, namespace: str, plural: str,
                      name: str) -> None:  # fmt: skip
        self.custom[plural] = [o for o in self.custom.get(plural, [])
                               if (o["metadata"].get("namespace"), o["metadata"]["name"])
                               != (namespace, name)]  # fmt: skip

    def create_cluster_custom(self, group: str, version: str, plural: str, body: Obj) -> int:
        name = body["metadata"]["name"]
        if name in self.rules:
            return 409
        self.rules[name] = copy.deepcopy(body)
        self.rules[name]["metadata"]["resourceVersion"] = "1"
        return 201

    def read_cluster_custom(self, group: str, version: str, plural: str, name: str) -> Obj | None:
        return copy.deepcopy(self.rules.get(name))

    def delete_cluster_custom(self, group: str, version: str, plural: str, name: str,
                              resource_version: str = "") -> None:  # fmt: skip
        self.rules.pop(name, None)

    # -- batch/v1 Jobs: stored as created; a test writes their status (no Job controller)
    def _silent(self, call: str) -> None:
        if call in self.silent:
            raise Unavailable(f"Kubernetes API server did not answer {call} within 10 s")

    def create_job(self, namespace: str, body: Obj) -> int:
        self._silent("create_job")
        name = body["metadata"]["name"]
        self.job_creates.append((namespace, name))
        if (namespace, name) in self.jobs:
            return 409  # AlreadyExists
        self.jobs[(namespace, name)] = copy.deepcopy(body)
        return 201

    def dry_run_create_job(self, namespace: str, body: Obj) -> tuple[int, str]:
        self._silent("dry_run_create_job")
        self.dry_runs.append(copy.deepcopy(body))
        return self.dry_run

    def read_job(self, namespace: str, name: str) -> Obj | None:
        self._silent("read_job")
        if self.job_read_error is not None:
            raise self.job_read_error
        return copy.deepcopy(self.jobs.get((namespace, name)))

    def delete_job(self, namespace: str, name: str) -> None:
        self.jobs.pop((namespace, name), None)

    def job_condition(self, namespace: str, name: str, type_: str, reason: str = "",
                      message: str = "") -> None:  # fmt: skip
        """What the Job controller writes when the Job ends."""
        cond = {"type": type_, "status": "True", "reason": reason, "message": message}
        self.jobs[(namespace, name)]["status"] = {"conditions": [cond]}


def backend(api: FakeKube, **kw: Any) -> KubernetesBackend:
    """The backend on ``api`` (the calls it makes; not the whole KubeApi protocol)."""
    return KubernetesBackend(api, **kw)  # type: ignore[arg-type]
