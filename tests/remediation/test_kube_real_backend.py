"""The Kubernetes backend on a real API server (tests/kubelab.py: kube-apiserver and
kube-controller-manager v1.37, the kubelet stand-in), run as the shipped ClusterRole's
ServiceAccount: evictions through the real disruption controller (a budget blocks a Running
pod and says why, then allows it; a Pending pod is evicted whatever its budget; with no
disruption controller every budget answers 429 "still being processed"), DeviceTaintRules at
the version discovery finds (v1 on 1.37), and gpuwarden's decisions as Node conditions and
Events that ``kubectl describe node`` shows. Issue 32: none of these had met a real server."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import catalog
from gpuwarden.processes import wait_until
from remediation.backends import dra
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.service import Service, build
from remediation.settings import Settings
from tests.kubelab import ApiError, KubeLab, Run, cleanup, start_lab, versions
from tests.remediation.helpers import LIVE_POLICY, TOKEN, alert

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
BLOCKED = catalog.REMEDIATION_EVICTIONS_BLOCKED.name
BUDGET = "Cannot evict pod as it would violate the pod's disruption budget."


def remediation_token(lab: KubeLab) -> str:
    """A ServiceAccount bound to the shipped ClusterRole gpuwarden-remediation (under a
    name of its own: the lab is shared), as the service runs in a cluster."""
    docs = yaml.safe_load_all((ROOT / "deploy/kubernetes/base/remediation-rbac.yaml").read_text())
    [role] = [d for d in docs if d["kind"] == "ClusterRole"
              and d["metadata"]["name"] == "gpuwarden-remediation"]  # fmt: skip
    name = f"gpuwarden-remediation-{uuid.uuid4().hex[:6]}"
    ns = lab.namespace("gw")
    lab.http.post("/apis/rbac.authorization.k8s.io/v1/clusterroles",
                  {"metadata": {"name": name}, "rules": role["rules"]})  # fmt: skip
    lab.http.post(
        "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
        {"metadata": {"name": name},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
         "subjects": [{"kind": "ServiceAccount", "name": "remediation", "namespace": ns}]},
    )  # fmt: skip
    return lab.service_account_token(ns, "remediation")


def service_on(lab: KubeLab, tmp: Path, token: str) -> Service:
    pol = tmp / "policy.yaml"
    pol.write_text(LIVE_POLICY)
    s = Settings(policy=pol, state_db=tmp / "state.db", webhook_token=TOKEN, backend="kubernetes")
    return build(s, clock=FakeClock(), backend=KubernetesBackend(lab.kube_api(token)))


def drain(svc: Service, node: str, aid: int | None = None) -> tuple[int, str, str]:
    """Decide a drain of ``node`` (or run action ``aid`` again) once; (action, state, outcome)."""
    if aid is None:
        fault = alert(node, action="drain", fp=f"fp-{node}")
        svc.journal.accept([fault], 0)
        aid = svc.engine.decide(fault)
        assert aid is not None, svc.journal.rows("SELECT guard, reason FROM decisions")
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = svc.executor.run(row)
    return aid, state, outcome


def gone(lab: KubeLab, ns: str, pod: str) -> None:
    wait_until(lambda: lab.http.get_or_none(f"/api/v1/namespaces/{ns}/pods/{pod}") is None,
               30, 0.1, f"pod {ns}/{pod} gone")  # fmt: skip


def fleet(lab: KubeLab, nodes: int = 12) -> None:
    """Enough healthy nodes that the policy's fleet budget lets one node go."""
    for _ in range(nodes):
        lab.add_node()


@pytest.fixture(scope="module")
def token(kube_lab: KubeLab) -> str:
    fleet(kube_lab)
    return remediation_token(kube_lab)


def test_a_budget_blocks_a_running_pod_with_the_servers_words_then_allows_the_drain(
    kube_lab: KubeLab, token: str, tmp_path: Path
) -> None:
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    kube_lab.run_pod(ns, node, name="train-0", labels={"app": "train"})
    pdb = kube_lab.pdb(ns, {"app": "train"}, minAvailable=1)
    name = pdb["metadata"]["name"]
    svc = service_on(kube_lab, tmp_path, token)
    aid, state, outcome = drain(svc, node)
    assert state == "retry" and BUDGET in outcome
    ev = svc.evacuation(node)
    assert ev is not None and ev["state"] == "blocked"
    [p] = ev["pods"]
    assert (p["pod"], p["status"], p["reason"]) == (f"{ns}/train-0", 429, "TooManyRequests")
    assert p["message"].startswith(f"{BUDGET} The disruption budget {name} needs 1 healthy pods")
    svc.refresh_gauges()
    assert (
        f'{BLOCKED}{{node="{node}",reason="TooManyRequests"}} 1.0' in svc.metrics.render().decode()
    )
    # the budget relaxed; its controller recomputes it; the retry drains the node
    path = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets/{name}"
    kube_lab.http.merge_patch(path, {"spec": {"minAvailable": 0}})
    wait_until(lambda: (kube_lab.http.get(path).get("status") or {}).get("disruptionsAllowed"),
               30, 0.1, "the budget allows a disruption")  # fmt: skip
    _, state, outcome = drain(svc, node, aid)
    assert (state, outcome) == ("done", "cordoned and tainted; evicted 1 pods")
    gone(kube_lab, ns, "train-0")
    assert svc.evacuation(node) is None


def test_a_pending_pod_is_evicted_whatever_its_budget_and_only_the_running_one_is_blocked(
    kube_lab: KubeLab, token: str, tmp_path: Path
) -> None:
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    kube_lab.run_pod(ns, node, name="running", labels={"app": "train"})
    with kube_lab.kubelet.scripted(lambda pod: Run(pending=True)
                                   if pod["metadata"]["name"] == "queued" else None):  # fmt: skip
        kube_lab.run_pod(ns, node, name="queued", labels={"app": "train"}, wait_running=False)
        kube_lab.pdb(ns, {"app": "train"}, minAvailable=2)  # neither may go, by the budget
        assert kube_lab.http.get(f"/api/v1/namespaces/{ns}/pods/queued")["status"]["phase"] == (
            "Pending")  # fmt: skip
        svc = service_on(kube_lab, tmp_path, token)
        _, state, _ = drain(svc, node)
        gone(kube_lab, ns, "queued")  # the server ignores budgets for Pending pods
    assert state == "retry"
    ev = svc.evacuation(node)
    assert ev is not None and [p["pod"] for p in ev["pods"]] == [f"{ns}/running"]


def test_a_drain_killed_between_its_cordon_and_its_evictions_evicts_on_restart_not_reconciled(
    kube_lab: KubeLab, token: str, tmp_path: Path
) -> None:
    """kill -9 after the cordon landed and before the evictions (seen in a full run of
    test_kube_service_real's kill -9 stream): the node is ours, so the take-out once read as
    done, and its pods ran on. The restart now evicts them; a drain whose evictions did land
    is still reconciled, not repeated."""
    ns, node, done = kube_lab.namespace(), kube_lab.add_node(), kube_lab.add_node()
    kube_lab.run_pod(ns, node, name="train-0")
    kube_lab.run_pod(ns, done, name="train-1")
    svc = service_on(kube_lab, tmp_path, token)
    for n, evicted in ((node, False), (done, True)):
        fault = alert(n, action="drain", fp=f"fp-{n}")
        svc.journal.accept([fault], 0)
        aid = svc.engine.decide(fault)
        assert aid is not None
        [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        svc.journal.set_step(aid, "take_out", "started")  # then the crash, mid-step
        svc.executor.backend.take_out(n, str(row["reason"]), evicted)
        if evicted:
            gone(kube_lab, ns, "train-1")
        state, outcome = svc.executor.run(row)
        assert state == "done", outcome
        if evicted:
            assert outcome == "reconciled after restart"
        else:
            assert outcome.startswith("cordoned and tainted; evicted 1 pods"), outcome
    gone(kube_lab, ns, "train-0")
    b = svc.executor.backend
    assert b.is_taken_out(node) and b.is_evacuated(node) and b.is_evacuated(done)


@pytest.fixture(scope="module")
def no_disruption_controller() -> Iterator[KubeLab]:
    """A server whose controller manager runs without the disruption controller: no PDB's
    status is ever computed."""
    lab = start_lab(kcm_controllers="*,-node-lifecycle-controller,-node-ipam-controller,"
                    "-disruption-controller")  # fmt: skip
    try:
        yield lab
    finally:
        cleanup(lab)


def test_with_no_disruption_controller_the_node_says_its_budget_is_still_being_processed(
    no_disruption_controller: KubeLab, tmp_path: Path
) -> None:
    lab = no_disruption_controller
    fleet(lab)
    ns, node = lab.namespace(), lab.add_node()
    lab.run_pod(ns, node, name="train-0", labels={"app": "train"})
    lab.http.post(
        f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets",
        {
            "metadata": {"name": "train"},
            "spec": {"selector": {"matchLabels": {"app": "train"}}, "maxUnavailable": 1},
        },
    )  # fmt: skip: would allow one, if computed
    svc = service_on(lab, tmp_path, remediation_token(lab))
    _, state, outcome = drain(svc, node)
    still = "The disruption budget train is still being processed by the server."
    assert state == "retry" and still in outcome and "PodDisruptionBudget" not in outcome
    ev = svc.evacuation(node)
    assert ev is not None
    [p] = ev["pods"]
    assert (p["status"], p["reason"], p["message"]) == (429, "TooManyRequests",
                                                        f"{BUDGET} {still}")  # fmt: skip


# ---------------------------------------------------------------- DRA: DeviceTaintRules


def publish_gpus(lab: KubeLab, node: str, gpus: int = 4) -> None:
    """A ResourceSlice as the NVIDIA DRA driver publishes the node's GPUs (resource.k8s.io/v1:
    devices with an ``index`` attribute, pool = the node)."""
    devices = [{"name": f"gpu-{i}", "attributes": {"index": {"int": i}}} for i in range(gpus)]
    lab.http.post("/apis/resource.k8s.io/v1/resourceslices", {
        "metadata": {"name": f"{node}-gpu.nvidia.com"},
        "spec": {"driver": dra.DRIVER, "nodeName": node, "devices": devices,
                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}},
    })  # fmt: skip


def holding(lab: KubeLab, ns: str, node: str, pod: str, device: str) -> None:
    """A pod on ``node`` whose ResourceClaim is allocated ``device`` (what the scheduler
    and the driver write), reserved for it."""
    lab.http.post(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims", {
        "metadata": {"name": f"{pod}-gpu"},
        "spec": {"devices": {"requests": [{"name": "gpu",
                                           "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}},
    })  # fmt: skip
    p = lab.run_pod(ns, node, name=pod, extra_spec={
        "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{pod}-gpu"}]})  # fmt: skip
    lab.http.merge_patch(f"/apis/resource.k8s.io/v1/namespaces/{ns}/resourceclaims/{pod}-gpu/status", {
        "status": {
            "allocation": {"devices": {"results": [{"request": "gpu", "driver": dra.DRIVER,
                                                    "pool": node, "device": device}]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": p["metadata"]["uid"]}],
        }})  # fmt: skip


def test_on_1_37_the_rule_api_is_found_at_v1_and_one_gpu_is_taken_out_and_back(
    kube_lab: KubeLab, token: str
) -> None:
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    publish_gpus(kube_lab, node)
    holding(kube_lab, ns, node, "infer-3", "gpu-3")
    holding(kube_lab, ns, node, "infer-1", "gpu-1")
    b = KubernetesBackend(kube_lab.kube_api(token))
    out = b.isolate_gpu(node, "3", "xid 79 on GPU 3", "NoSchedule")  # main: v1alpha3, 404
    assert out == f"gpu-3 tainted NoSchedule; evicted 1 pod(s) using it: {ns}/infer-3"
    assert b.dra.version() == "v1"
    name = dra.rule_name(node, "3")
    rule = kube_lab.http.get(f"/apis/resource.k8s.io/v1/devicetaintrules/{name}")
    assert rule["spec"]["deviceSelector"] == {"driver": dra.DRIVER, "pool": node,
                                              "device": "gpu-3"}  # fmt: skip
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"
    gone(kube_lab, ns, "infer-3")
    assert kube_lab.http.get(f"/api/v1/namespaces/{ns}/pods/infer-1")["status"]["phase"] == (
        "Running"
    )  # fmt: skip: the node's other GPUs serve on
    assert [r["gpu"] for r in b.dra.listing() if r["node"] == node] == ["3"]
    assert b.release(node) == "GPU(s) 3 back in service (DeviceTaintRules deleted)"
    assert kube_lab.http.get_or_none(f"/apis/resource.k8s.io/v1/devicetaintrules/{name}") is None


# ---------------------------------------------------------------- node health


def conditions(lab: KubeLab, node: str) -> dict[str, dict[str, Any]]:
    n = lab.http.get(f"/api/v1/nodes/{node}")
    return {c["type"]: c for c in n["status"]["conditions"]}


def test_conditions_and_events_show_in_kubectl_describe_node_and_the_kubelets_stay(
    kube_lab: KubeLab, token: str, tmp_path: Path
) -> None:
    ns, node = kube_lab.namespace(), kube_lab.add_node()
    kube_lab.run_pod(ns, node, name="train-0", labels={"app": "train"})
    kube_lab.pdb(ns, {"app": "train"}, minAvailable=1)
    svc = service_on(kube_lab, tmp_path, token)
    aid, state, _ = drain(svc, node)
    _, again, _ = drain(svc, node, aid)  # blocked twice: one Event, counted twice
    assert state == again == "retry"
    conds = conditions(kube_lab, node)
    assert conds["Ready"]["status"] == "True"  # the kubelet's, merged by type, untouched
    assert (conds["GpuHealthy"]["status"], conds["GpuHealthy"]["reason"]) == ("False", "GpuFault")
    q = conds["GpuwardenQuarantined"]
    assert (q["status"], q["reason"]) == ("True", "Cordoned")
    managers = {m["manager"] for m in kube_lab.http.get(f"/api/v1/nodes/{node}")["metadata"]
                ["managedFields"] if m.get("subresource") == "status"}  # fmt: skip
    assert "gpuwarden" in managers
    lines = kube_lab.kubectl("describe", "node", node).splitlines()
    assert any(ln.split()[:2] == ["GpuwardenQuarantined", "True"] for ln in lines)
    assert any(ln.split()[:2] == ["GpuHealthy", "False"] for ln in lines)
    events = "\n".join(lines[next(i for i, ln in enumerate(lines) if ln.startswith("Events:")) :])
    assert "Warning  Quarantined" in events and "Warning  EvacuationBlocked" in events
    assert "(x2 over" in events  # aggregated, as the kubelet's repeats are
    assert "gpuwarden.io/remediation" in events or "gpuwarden-remediation" in events
    # released: the conditions stay, all clear; an Event says so
    v = svc.engine.release(node, True, "alice")
    assert v.allow, v.reason
    conds = conditions(kube_lab, node)
    assert (conds["GpuwardenQuarantined"]["status"], conds["GpuHealthy"]["status"]) == (
        "False", "True")  # fmt: skip
    assert conds["GpuwardenQuarantined"]["lastTransitionTime"] >= q["lastTransitionTime"]
    assert "Normal   Released" in kube_lab.kubectl("describe", "node", node)


def test_the_shipped_role_patches_node_status_and_events_but_may_not_replace_or_delete_them(
    kube_lab: KubeLab, token: str
) -> None:
    node = kube_lab.add_node()
    as_sa = kube_lab.as_user(token)
    with pytest.raises(ApiError) as e:
        as_sa.call("PUT", f"/api/v1/nodes/{node}/status", kube_lab.http.get(f"/api/v1/nodes/{node}"),
                   "application/json")  # fmt: skip
    assert e.value.status == 403
    with pytest.raises(ApiError) as e:
        as_sa.call("DELETE", "/api/v1/namespaces/default/events", None, "application/json")
    assert e.value.status == 403


# ---------------------------------------------------------------- the oldest version


@pytest.fixture(scope="module")
def oldest() -> Iterator[KubeLab]:
    """The oldest Kubernetes gpuwarden claims (1.34: DRA's slices and claims are v1, the
    DeviceTaintRule alpha is behind a feature gate, off by default)."""
    lab = start_lab(versions()["OLDEST_KUBE_VERSION"])
    try:
        fleet(lab)
        yield lab
    finally:
        cleanup(lab)


def test_on_the_oldest_version_no_rule_api_is_served_so_a_gpu_drain_takes_the_node_and_says_why(
    oldest: KubeLab, tmp_path: Path
) -> None:
    assert oldest.http.get("/version")["gitVersion"] == versions()["OLDEST_KUBE_VERSION"]
    ns, node = oldest.namespace(), oldest.add_node()
    publish_gpus(oldest, node)
    holding(oldest, ns, node, "infer-3", "gpu-3")
    pol = tmp_path / "policy.yaml"
    pol.write_text(LIVE_POLICY + "\nkubernetes: {dra_isolation: true}\n")
    s = Settings(policy=pol, state_db=tmp_path / "state.db", webhook_token=TOKEN,
                 backend="kubernetes")  # fmt: skip
    svc = build(s, clock=FakeClock(),
                backend=KubernetesBackend(oldest.kube_api(remediation_token(oldest))))  # fmt: skip
    assert svc.policy.dra_isolation
    fault = alert(node, action="drain", fp=f"fp-{node}", gpu="3")
    svc.journal.accept([fault], 0)
    aid = svc.engine.decide(fault)
    assert aid is not None
    _, state, outcome = drain(svc, node, aid)
    assert state == "done", outcome
    assert outcome.startswith("GPU not taken out alone (DeviceTaintRules are not served by this "
                              "API server")  # fmt: skip
    assert outcome.endswith("whole node: cordoned and tainted; evicted 1 pods")
    assert oldest.http.get(f"/api/v1/nodes/{node}")["spec"]["unschedulable"] is True
    conds = conditions(oldest, node)
    assert conds["GpuwardenQuarantined"]["status"] == "True" and conds["Ready"]["status"] == "True"
