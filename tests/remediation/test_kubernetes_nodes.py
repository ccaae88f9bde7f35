"""What the Kubernetes backend reads from a node and writes to it: its view of each node
(who cordoned it, NotReady, failure domains), the cordon and its refusals, one GPU taken out
through DRA, the release (of the node, or only of its GPUs), the state label and the reboot
request, with the Node conditions and Events an operator sees. On the in-memory API
(tests/remediation/fakekube.py)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from remediation.backends import nodehealth
from remediation.backends.base import BackendError, EvacuationBlocked
from remediation.backends.kubeapi import Eviction, OfficialKubeApi
from remediation.backends.kubernetes import OWNER, REASON, STATE_LABEL, KubernetesBackend
from remediation.model import NodeView
from tests.remediation.fakekube import FakeKube, backend, node, pod

N1, N2 = "gpu-node-001", "gpu-node-002"
LEAF = "topology.gpuwarden.io/leaf"


def events(api: FakeKube, reason: str) -> list[tuple[str, str, str]]:
    """(node, type, message) of each Event with this reason."""
    return [(e["involvedObject"]["name"], e["type"], e["message"])
            for e in api.events if e["reason"] == reason]  # fmt: skip


def cond(api: FakeKube, name: str, kind: str) -> tuple[str, str, str]:
    c = api.conditions(name)[kind]
    return c["status"], c["reason"], c["message"]


def cordoned_by(who: str | None, reason: str | None = None, ready: str = "True") -> dict[str, Any]:
    n = node(N1, ready=ready)
    n["spec"]["unschedulable"] = True
    if who is not None:
        n["metadata"]["annotations"][OWNER] = who
    if reason is not None:
        n["metadata"]["annotations"][REASON] = reason
    return n


# ---------------------------------------------------------------- the view of a node


def test_a_ready_schedulable_node_is_in_service_with_no_reason() -> None:
    b = backend(FakeKube(node(N1)))
    assert b.node(N1) == NodeView(N1, False, False, "", {})


def test_a_node_whose_ready_condition_is_false_or_unknown_is_out_of_service_as_not_ready() -> None:
    for ready in ("False", "Unknown"):
        n = node(N1, ready=ready)
        n["status"]["conditions"].insert(0, {"type": "MemoryPressure", "status": "False"})
        assert backend(FakeKube(n)).node(N1) == NodeView(N1, True, False, "NotReady")


def test_other_conditions_that_are_false_do_not_make_a_ready_node_not_ready() -> None:
    n = node(N1)
    n["status"]["conditions"].append({"type": "DiskPressure", "status": "False"})
    assert backend(FakeKube(n)).node(N1) == NodeView(N1, False, False, "")


def test_a_node_without_status_is_in_service() -> None:
    assert backend(FakeKube(node(N1, ready=None))).node(N1) == NodeView(N1)


def test_a_node_cordoned_by_someone_else_is_out_of_service_not_ours_reason_cordoned() -> None:
    view = backend(FakeKube(cordoned_by(None))).node(N1)
    assert view == NodeView(N1, True, False, "cordoned")
    view = backend(FakeKube(cordoned_by("someone", "maintenance"))).node(N1)
    assert view == NodeView(N1, True, False, "cordoned")


def test_a_node_gpuwarden_cordoned_is_ours_with_the_reason_it_wrote() -> None:
    view = backend(FakeKube(cordoned_by("gpuwarden", "xid 79"))).node(N1)
    assert view == NodeView(N1, True, True, "xid 79")


def test_a_node_gpuwarden_cordoned_without_a_reason_has_none_or_not_ready() -> None:
    assert backend(FakeKube(cordoned_by("gpuwarden"))).node(N1) == NodeView(N1, True, True, "")
    view = backend(FakeKube(cordoned_by("gpuwarden", ready="False"))).node(N1)
    assert view == NodeView(N1, True, True, "NotReady")


def test_the_topology_file_overrides_a_node_s_labels_for_that_node_only() -> None:
    a, c = node(N1), node(N2)
    a["metadata"]["labels"][LEAF] = "leaf-01"
    c["metadata"]["labels"][LEAF] = "leaf-02"
    b = backend(FakeKube(a, c), topology={N1: {"leaf": "leaf-09", "spine": "s1"}})
    views = {v.name: v for v in b.fleet()}
    assert views[N1].domains == {"leaf": "leaf-09", "spine": "s1"}
    assert views[N2].domains == {"leaf": "leaf-02"}


def test_an_unknown_node_is_none_and_not_taken_out() -> None:
    b = backend(FakeKube(node(N1)))
    assert b.node("nope") is None
    assert b.is_taken_out("nope") is False


def test_a_node_in_service_or_cordoned_by_another_is_not_taken_out_by_gpuwarden() -> None:
    assert backend(FakeKube(node(N1))).is_taken_out(N1) is False
    assert backend(FakeKube(cordoned_by(None))).is_taken_out(N1) is False
    assert backend(FakeKube(cordoned_by("gpuwarden", "x"))).is_taken_out(N1) is True


# ---------------------------------------------------------------- the cordon


def test_taking_out_an_unknown_node_says_which() -> None:
    with pytest.raises(BackendError, match=f"^node {N1}x not found$"):
        backend(FakeKube(node(N1))).take_out(N1 + "x", "xid", False)


def test_gpuwarden_s_own_cordon_is_taken_out_again_whatever_its_reason_text_says() -> None:
    api = FakeKube(cordoned_by("gpuwarden", "cordoned"))
    assert backend(api).take_out(N1, "xid 79", False) == "cordoned and tainted"
    assert api.nodes[N1]["metadata"]["annotations"][REASON] == "xid 79"


def test_a_cordon_the_server_does_not_keep_fails_on_read_back() -> None:
    api = FakeKube(node(N1))
    api.ignore_node_patches = True
    with pytest.raises(BackendError, match=f"^cordon of {N1} not visible on read-back$"):
        backend(api).take_out(N1, "xid", False)


def test_a_node_write_that_fails_other_than_by_conflict_fails_the_step_as_it_failed() -> None:
    api = FakeKube(node(N1))
    api.node_patch_error = ConnectionResetError("connection reset by peer")
    with pytest.raises(ConnectionResetError, match="connection reset"):
        backend(api).take_out(N1, "xid", False)
    assert len(api.node_patches) == 1  # not retried: only a 409 is


def test_a_pod_without_a_namespace_is_evicted_from_default() -> None:
    api = FakeKube(node(N1))
    api.add(pod(None, "bare", N1))
    out = backend(api).take_out(N1, "xid", True)
    assert api.evictions == [("default", "bare")]
    assert out == "cordoned and tainted; evicted 1 pods"


def test_a_refused_eviction_blocks_the_node_s_evacuation_with_a_warning_event_on_it() -> None:
    api = FakeKube(node(N1))
    api.add(pod("ml", "train", N1))
    api.refuse["ml/train"] = Eviction(429, "TooManyRequests", "budget", ("pdb train",))
    with pytest.raises(EvacuationBlocked) as e:
        backend(api).take_out(N1, "xid", True)
    assert e.value.node == N1
    assert [(p.pod, p.status, p.message) for p in e.value.pods] == [
        ("ml/train", 429, "budget pdb train")
    ]
    msg = f"node {N1}: ml/train: HTTP 429 TooManyRequests: budget pdb train"
    assert events(api, "EvacuationBlocked") == [(N1, "Warning", msg)]


# ---------------------------------------------------------------- one GPU through DRA


def dra_node() -> FakeKube:
    api = FakeKube(node(N1))
    api.gpus(N1)
    api.add(pod("ml", "on-gpu2", N1, gpus=1), pod("ml", "on-gpu0", N1, gpus=1))
    api.claim("ml", "on-gpu2", N1, 2)
    api.claim("ml", "on-gpu0", N1, 0)
    return api


def test_isolating_one_gpu_taints_its_device_evicts_its_pods_and_reports_it_on_the_node() -> None:
    api = dra_node()
    out = backend(api).isolate_gpu(N1, "2", "xid 79", "NoSchedule")
    assert out == "gpu-2 tainted NoSchedule; evicted 1 pod(s) using it: ml/on-gpu2"
    assert api.evictions == [("ml", "on-gpu2")]
    rule = api.rules[f"gpuwarden-{N1}-gpu2"]
    assert rule["metadata"]["annotations"]["gpuwarden.io/reason"] == "xid 79"
    assert cond(api, N1, nodehealth.HEALTHY) == ("False", "GpuIsolated", "GPU 2: xid 79")
    assert events(api, "GpuIsolated") == [(N1, "Warning", f"GPU 2 taken out alone: {out}")]


def test_isolating_one_gpu_no_execute_writes_that_effect_and_the_reason() -> None:
    api = dra_node()
    out = backend(api).isolate_gpu(N1, "0", "row remap failed", "NoExecute")
    assert out == "gpu-0 tainted NoExecute; the control plane evicts 1 pod(s)"
    rule = api.rules[f"gpuwarden-{N1}-gpu0"]
    assert rule["spec"]["taint"]["effect"] == "NoExecute"
    assert rule["metadata"]["annotations"]["gpuwarden.io/reason"] == "row remap failed"
    assert api.evictions == []


def test_a_gpu_without_a_dra_device_takes_the_node_path() -> None:
    api = dra_node()
    assert backend(api).isolate_gpu(N1, "7", "xid", "NoSchedule") is None
    assert api.rules == {} and api.events == []


def test_a_refused_eviction_of_a_gpu_s_pod_is_a_warning_event_on_its_node() -> None:
    api = dra_node()
    api.refuse["ml/on-gpu2"] = Eviction(429, "TooManyRequests", "budget")
    with pytest.raises(EvacuationBlocked):
        backend(api).isolate_gpu(N1, "2", "xid", "NoSchedule")
    assert events(api, "EvacuationBlocked") == [
        (N1, "Warning", f"GPU 2 of {N1}: ml/on-gpu2: HTTP 429 TooManyRequests: budget")
    ]
    assert events(api, "GpuIsolated") == []


# ---------------------------------------------------------------- release


def test_releasing_an_unknown_node_says_which() -> None:
    with pytest.raises(BackendError, match=f"^node {N2} not found$"):
        backend(FakeKube(node(N1))).release(N2)


def test_releasing_only_a_node_s_gpus_deletes_their_rules_and_reports_the_gpus() -> None:
    api = dra_node()
    b = backend(api)
    b.isolate_gpu(N1, "0", "xid", "NoExecute")
    b.isolate_gpu(N1, "2", "xid", "NoExecute")
    out = b.release(N1)
    assert out == "GPU(s) 0, 2 back in service (DeviceTaintRules deleted)"
    assert api.rules == {}
    assert events(api, "GpuReleased") == [(N1, "Normal", f"gpuwarden released the node: {out}")]
    assert cond(api, N1, nodehealth.HEALTHY) == ("True", "NoGpuFault", f"released: {out}")
    assert cond(api, N1, nodehealth.QUARANTINED) == ("False", "Released", out)


def test_releasing_gpus_of_a_node_without_gpuwarden_s_conditions_adds_none() -> None:
    api = dra_node()
    backend(api).isolate_gpu(N1, "0", "xid", "NoExecute")
    api.nodes[N1]["status"]["conditions"] = [{"type": "Ready", "status": "True"}]
    api.status_patches.clear()
    assert backend(api).release(N1).startswith("GPU(s) 0 back in service")
    assert api.status_patches == []
    assert len(events(api, "GpuReleased")) == 1


def test_releasing_a_node_removes_the_cordon_taint_annotations_and_state_label() -> None:
    api = FakeKube(node(N1))
    b = backend(api)
    b.take_out(N1, "xid", False)
    assert api.nodes[N1]["metadata"]["labels"][STATE_LABEL] == "quarantined"
    assert b.release(N1) == "uncordoned"
    n = api.nodes[N1]
    assert STATE_LABEL not in n["metadata"]["labels"]
    assert OWNER not in n["metadata"]["annotations"] and REASON not in n["metadata"]["annotations"]
    assert n["spec"] == {"unschedulable": False, "taints": []}
    assert events(api, "Released") == [(N1, "Normal", "gpuwarden released the node: uncordoned")]


def test_an_uncordon_the_server_does_not_keep_fails_on_read_back() -> None:
    api = FakeKube(node(N1))
    b = backend(api)
    b.take_out(N1, "xid", False)
    api.ignore_node_patches = True
    with pytest.raises(BackendError, match=f"^uncordon of {N1} not visible on read-back$"):
        b.release(N1)
    assert events(api, "Released") == []


def test_releasing_a_node_that_vanished_after_the_uncordon_fails_on_read_back() -> None:
    api = FakeKube(node(N1))
    b = backend(api)
    b.take_out(N1, "xid", False)
    patch = api.patch_node

    def patch_then_vanish(name: str, body: Any) -> None:
        patch(name, body)
        del api.nodes[name]

    api.patch_node = patch_then_vanish  # type: ignore[method-assign]
    with pytest.raises(BackendError, match="not visible on read-back"):
        b.release(N1)


# ---------------------------------------------------------------- state label, reboot


def test_mark_writes_the_state_label_and_no_condition_on_a_node_never_taken_out() -> None:
    api = FakeKube(node(N1))
    backend(api).mark(N1, "inspection")
    assert api.nodes[N1]["metadata"]["labels"][STATE_LABEL] == "inspection"
    assert api.status_patches == []


def test_mark_on_a_node_taken_out_says_the_state_in_the_quarantined_condition() -> None:
    api = FakeKube(node(N1))
    b = backend(api)
    b.take_out(N1, "xid", False)
    b.mark(N1, "action_failed")
    assert cond(api, N1, nodehealth.QUARANTINED) == (
        "True",
        "ActionFailed",
        "gpuwarden holds the node: action_failed",
    )


def test_a_reboot_request_carries_the_reason_to_the_self_node_remediation() -> None:
    api = FakeKube(node(N1))
    api.custom["selfnoderemediationtemplates"] = [
        {"metadata": {"name": "automatic", "namespace": "medik8s"}, "spec": {}}
    ]
    out = backend(api).reboot(N1, "xid 79 after reset")
    assert out.startswith("reboot requested")
    (_, _, ns, plural, body) = api.created[0]
    assert (ns, plural, body["metadata"]["name"]) == ("medik8s", "selfnoderemediations", N1)
    assert body["metadata"]["annotations"]["gpuwarden.io/reason"] == "xid 79 after reset"


# ---------------------------------------------------------------- from_config


def kubeconfig(tmp: Path) -> Path:
    path = tmp / "kubeconfig"
    path.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'http://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    return path


def test_from_config_builds_the_kubeconfig_client_with_the_defaults(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path)))
    topology = {N1: {"leaf": "leaf-01"}}
    b = KubernetesBackend.from_config(topology)
    assert isinstance(b.api, OfficialKubeApi)
    assert (b.api.timeout, b.effect, b.topology) == (10.0, "NoSchedule", topology)


def test_from_config_passes_the_taint_effect_and_the_command_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(tmp_path)))
    b = KubernetesBackend.from_config({}, "NoExecute", timeout=2.5)
    assert isinstance(b.api, OfficialKubeApi)
    assert (b.api.timeout, b.effect) == (2.5, "NoExecute")


def test_event_and_condition_times_are_now() -> None:
    api = FakeKube(node(N1))
    before = int(time.time())
    backend(api).take_out(N1, "xid", False)
    stamp = api.conditions(N1)[nodehealth.HEALTHY]["lastHeartbeatTime"]
    assert stamp >= nodehealth.stamp(before)
