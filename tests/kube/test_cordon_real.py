"""Cordon, taints and the release on the real API server, with the shipped ServiceAccount's
token: what gpuwarden writes, what it leaves to others, and what happens when another writer
changes the node between gpuwarden's read and its write (optimistic concurrency)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.processes import wait_until
from remediation.backends.base import BackendError
from remediation.backends.kubernetes import OWNER, TAINT_KEY, KubernetesBackend
from tests.kube.shipped import apply_remediation_rbac
from tests.kubelab import KubeLab, Obj

pytestmark = pytest.mark.real
OPERATOR_TAINT = {"key": "example.com/maintenance", "value": "disk", "effect": "NoSchedule"}


@pytest.fixture(scope="module")
def token(kube_lab: KubeLab) -> str:
    return apply_remediation_rbac(kube_lab, [])


@pytest.fixture
def backend(kube_lab: KubeLab, token: str) -> KubernetesBackend:
    return KubernetesBackend(kube_lab.kube_api(token))


def _node(lab: KubeLab, name: str) -> Obj:
    return lab.http.get(f"/api/v1/nodes/{name}")


def _taint_keys(node: Obj) -> list[str]:
    return [t["key"] for t in (node.get("spec") or {}).get("taints") or []]


def test_take_out_cordons_and_taints_and_the_release_removes_only_what_gpuwarden_added(
    kube_lab: KubeLab, backend: KubernetesBackend
) -> None:
    name = kube_lab.add_node(taints=[OPERATOR_TAINT])
    backend.take_out(name, "XID 79", evict=False)
    node = _node(kube_lab, name)
    assert node["spec"]["unschedulable"] is True
    assert sorted(_taint_keys(node)) == sorted([OPERATOR_TAINT["key"], TAINT_KEY])
    assert node["metadata"]["annotations"][OWNER] == "gpuwarden"
    assert backend.is_taken_out(name)

    assert backend.release(name) == "uncordoned"
    node = _node(kube_lab, name)
    assert not node["spec"].get("unschedulable")
    assert _taint_keys(node) == [OPERATOR_TAINT["key"]]
    assert OWNER not in (node["metadata"].get("annotations") or {})


def test_a_node_an_operator_cordoned_is_neither_taken_nor_released(
    kube_lab: KubeLab, backend: KubernetesBackend
) -> None:
    name = kube_lab.add_node()
    kube_lab.http.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"unschedulable": True}})
    with pytest.raises(BackendError, match="cordoned by someone else"):
        backend.take_out(name, "XID 79", evict=False)
    with pytest.raises(BackendError, match="cordon is not ours"):
        backend.release(name)
    assert _node(kube_lab, name)["spec"]["unschedulable"] is True


class _Interleaved:
    """The backend's KubeApi, with another writer's change to the node landing on the real
    server just before gpuwarden's first write to it (after every read gpuwarden made)."""

    def __init__(self, api: Any, lab: KubeLab, node: str, change: Obj) -> None:
        self.api, self.lab, self.node, self.change = api, lab, node, change
        self.armed = True

    def patch_node(self, name: str, body: Any) -> None:
        if self.armed and name == self.node:
            self.armed = False
            self.lab.http.merge_patch(f"/api/v1/nodes/{name}", self.change)
        self.api.patch_node(name, body)

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.api, attr)


@pytest.mark.parametrize("step", ["take_out", "release"])
def test_a_taint_another_writer_adds_between_read_and_write_is_not_lost(
    kube_lab: KubeLab, token: str, step: str
) -> None:
    name = kube_lab.add_node()
    if step == "release":
        KubernetesBackend(kube_lab.kube_api(token)).take_out(name, "XID 79", evict=False)
    theirs = {"key": "example.com/late", "value": "x", "effect": "NoSchedule"}
    current = (_node(kube_lab, name)["spec"].get("taints")) or []
    api = _Interleaved(
        kube_lab.kube_api(token), kube_lab, name, {"spec": {"taints": [*current, theirs]}}
    )
    backend = KubernetesBackend(api)  # type: ignore[arg-type]
    getattr(backend, step)(name, *(("XID 79", False) if step == "take_out" else ()))
    assert not api.armed
    keys = _taint_keys(_node(kube_lab, name))
    assert "example.com/late" in keys
    assert (TAINT_KEY in keys) is (step == "take_out")


def test_daemonset_pods_stay_and_the_rest_are_evicted(
    kube_lab: KubeLab, backend: KubernetesBackend
) -> None:
    kube_lab.start_scheduler()  # the DaemonSet controller's pod is bound by the scheduler
    ns = kube_lab.namespace()
    name = kube_lab.add_node(labels={"lab/agent": ns})
    kube_lab.http.post(
        f"/apis/apps/v1/namespaces/{ns}/daemonsets",
        {"metadata": {"name": "agent"}, "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                         "spec": {"nodeSelector": {"lab/agent": ns},
                                  "containers": [{"name": "c", "image": "lab/none:0"}]}}}},
    )  # fmt: skip

    def agent() -> Obj | None:
        pods = kube_lab.http.get(f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dagent")
        running = [p for p in pods["items"] if p["status"].get("phase") == "Running"]
        return running[0] if running else None

    ds_pod = wait_until(agent, 60, 0.2, "the DaemonSet's pod running")
    assert ds_pod["spec"]["nodeName"] == name
    kube_lab.run_pod(ns, name, name="work")
    out = backend.take_out(name, "XID 79", evict=True)
    assert "evicted 1 pods" in out
    wait_until(
        lambda: kube_lab.http.get_or_none(f"/api/v1/namespaces/{ns}/pods/work") is None,
        30, 0.1, "evicted pod gone",
    )  # fmt: skip
    assert agent() is not None
