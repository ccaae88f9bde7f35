"""Placement tiers on the real API server and the real kube-scheduler (tests/kubelab.py):
``marginal`` as a PreferNoSchedule taint scores a node down but the scheduler still uses it
when nothing else fits; ``suspect`` as NoSchedule keeps pods off unless they tolerate it;
a JSON patch whose ``test`` no longer holds is refused by the server (422) and planned
again from a fresh read, keeping a taint someone else added meanwhile. Run as the shipped
remediation ServiceAccount. Issue 32: these had only met the kmock emulator, which has no
scheduler and does not judge RFC 6902 ``test`` operations the way the server does."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from gpuwarden.processes import wait_until
from remediation.placement.kubernetes import TIER_LABEL, KubePlacement, shown_tier
from tests.kube.shipped import apply_remediation_rbac
from tests.kubelab import KubeLab, Obj

pytestmark = pytest.mark.real
POOL = "gpuwarden-test/pool"


@pytest.fixture(scope="module")
def placement(kube_lab: KubeLab) -> KubePlacement:
    kube_lab.start_scheduler()
    return KubePlacement(kube_lab.kube_api(apply_remediation_rbac(kube_lab, [])))


def pool_nodes(lab: KubeLab, n: int, gpus: int) -> tuple[str, list[str]]:
    pool = uuid.uuid4().hex[:8]
    return pool, [lab.add_node(gpus=gpus, labels={POOL: pool}) for _ in range(n)]


def gpu_pod(
    lab: KubeLab, ns: str, pool: str, tolerate: str | None = None, wait: bool = True
) -> Obj:
    spec: dict[str, Any] = {"nodeSelector": {POOL: pool}}
    if tolerate:
        spec["tolerations"] = [{"key": tolerate, "operator": "Exists"}]
    return lab.run_pod(ns, None, gpus=1, extra_spec=spec, wait_running=wait)


def node_of(lab: KubeLab, pod: Obj) -> str:
    return str(pod["spec"]["nodeName"])


def test_a_marginal_node_is_scored_down_and_still_used_when_nothing_else_fits(
    kube_lab: KubeLab, placement: KubePlacement
) -> None:
    lab = kube_lab
    ns = lab.namespace("tier")
    pool, (marginal, healthy) = pool_nodes(lab, 2, gpus=4)
    placement.reconcile({marginal: "marginal"})
    n = lab.http.get(f"/api/v1/nodes/{marginal}")
    assert shown_tier(n) == ("marginal", "marginal")
    assert {"key": "gpuwarden.io/marginal", "value": "true", "effect": "PreferNoSchedule"} in (
        n["spec"]["taints"]
    )
    first = [node_of(lab, gpu_pod(lab, ns, pool)) for _ in range(4)]
    assert first == [healthy] * 4, "the scheduler preferred the healthy node while it had room"
    fifth = node_of(lab, gpu_pod(lab, ns, pool))
    assert fifth == marginal, "PreferNoSchedule costs preference, never capacity"


def test_a_suspect_node_takes_only_pods_that_tolerate_it(
    kube_lab: KubeLab, placement: KubePlacement
) -> None:
    lab = kube_lab
    ns = lab.namespace("suspect")
    pool, (suspect, healthy) = pool_nodes(lab, 2, gpus=1)
    placement.reconcile({suspect: "suspect"})
    assert node_of(lab, gpu_pod(lab, ns, pool)) == healthy
    stuck = gpu_pod(lab, ns, pool, wait=False)
    name = stuck["metadata"]["name"]

    def unschedulable() -> bool:
        pod = lab.http.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        conds = (pod.get("status") or {}).get("conditions") or []
        return any(
            c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds
        )

    wait_until(unschedulable, 30, 0.2, "the scheduler to refuse the suspect node")
    said = str(lab.http.get(f"/api/v1/namespaces/{ns}/pods/{name}")["status"]["conditions"])
    assert "untolerated taint" in said and "Insufficient nvidia.com/gpu" in said, said
    canary = gpu_pod(lab, ns, pool, tolerate="gpuwarden.io/suspect")
    assert node_of(lab, canary) == suspect
    placement.reconcile({})  # back to neutral: ours gone, the label too
    n = lab.http.get(f"/api/v1/nodes/{suspect}")
    assert shown_tier(n) == (None, None)
    assert TIER_LABEL not in (n["metadata"].get("labels") or {})


def test_a_taint_added_between_the_read_and_the_patch_is_kept_and_ours_lands(
    kube_lab: KubeLab, placement: KubePlacement
) -> None:
    lab = kube_lab
    _, (node,) = pool_nodes(lab, 1, gpus=8)
    stale = lab.http.get(f"/api/v1/nodes/{node}")  # what reconcile read
    foreign = {"key": "example.com/maintenance", "value": "fw", "effect": "NoSchedule"}
    lab.http.merge_patch(f"/api/v1/nodes/{node}", {"spec": {"taints": [foreign]}})
    mark = lab.audit_mark()
    placement._show(node, stale, "marginal")
    taints = lab.http.get(f"/api/v1/nodes/{node}")["spec"]["taints"]
    assert foreign in taints, "a taint someone else added meanwhile was lost"
    assert [t["key"] for t in taints].count("gpuwarden.io/marginal") == 1
    time.sleep(1)  # the audit log is written asynchronously
    patches = [
        e for e in lab.audit_since(mark)
        if e.get("verb") == "patch" and (e.get("objectRef") or {}).get("name") == node
        and e.get("stage") == "ResponseComplete"
    ]  # fmt: skip
    codes = [(e.get("responseStatus") or {}).get("code") for e in patches]
    assert 422 in codes, f"the server should have refused the stale patch: {codes}"
    assert codes[-1] == 200, codes
