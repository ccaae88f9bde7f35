"""The analyzer replicas' membership as Lease objects (coordination.k8s.io/v1) on the real
kube-apiserver: the same contract as the in-memory fake and the shared directory, plus what
only a real server shows (its 409 on a stale resourceVersion, its MicroTime format, a
coordinator cycle on it), and the shipped Role of the analyzer-sharded overlay proven least and
sufficient for those calls from the server's audit log."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from analyzer.replicas.configmaps import ConfigMapExchange
from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.leases import PLANS, LeaseMembership
from analyzer.replicas.membership import Membership
from tests.analyzer.membership_contract import CONTRACT, T0
from tests.kube.shipped import DEPLOY, RBAC_KINDS, kustomize, used
from tests.kubelab import KubeLab

pytestmark = pytest.mark.real


def _leases(lab: KubeLab) -> LeaseMembership:
    import kubernetes

    return LeaseMembership(kubernetes.client.CoordinationV1Api(lab.client()), lab.namespace())


@pytest.mark.parametrize("check", CONTRACT, ids=lambda c: c.__name__)
def test_leases_keep_the_membership_contract(
    kube_lab: KubeLab, check: Callable[[Membership], None]
) -> None:
    check(_leases(kube_lab))


def test_a_replica_holding_a_stale_copy_of_the_leader_lease_loses_the_race(
    kube_lab: KubeLab,
) -> None:
    m = _leases(kube_lab)
    assert m.lead("r-1", T0, 12.0)
    stale = m._leader()  # what a slow replica read before r-1 renewed
    assert m.lead("r-1", T0 + 5, 12.0)
    stale.spec.holder_identity = "r-2"
    assert m._replace(stale) is False  # the server's 409 Conflict
    lease = kube_lab.http.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{m.namespace}/leases/{m.leader_name}"
    )
    assert lease["spec"]["holderIdentity"] == "r-1"
    assert lease["spec"]["leaseDurationSeconds"] == 12
    assert lease["spec"]["renewTime"].endswith("Z") and "." in lease["spec"]["renewTime"]


def test_three_coordinators_on_the_server_agree_on_one_plan_per_cycle(kube_lab: KubeLab) -> None:
    m = _leases(kube_lab)
    timing = Timing(10.0)
    start = 1000 * 10.0 + 3.0  # inside cycle 1000: they judge from 1001
    coords = [Coordinator(m, f"r-{i}", timing, start) for i in range(3)]
    units = [f"leaf/l{i}" for i in range(9)]
    judged: list[tuple[int, str, str]] = []
    for tick in range(7, 40):  # cycles 1001..1003, a tick a tenth of the interval
        now = 1000 * 10.0 + tick
        for c in coords:
            plan = c.turn(now)
            if plan:
                judged += [(plan.cycle, c.replica, u) for u in c.mine(plan, units)]
    per_cycle = {k: sorted(u for kk, _, u in judged if kk == k) for k in (1001, 1002, 1003)}
    assert all(v == sorted(units) for v in per_cycle.values()), per_cycle
    assert sum(c.leading for c in coords) == 1
    lease = kube_lab.http.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{m.namespace}/leases/{m.leader_name}"
    )
    assert set(__import__("json").loads(lease["metadata"]["annotations"][PLANS])) >= {"1003"}


def test_the_shipped_sharded_role_allows_every_lease_and_scores_call_and_no_more(
    kube_lab: KubeLab,
) -> None:
    import kubernetes

    ns = kube_lab.namespace("shard")
    shipped = kustomize(DEPLOY / "overlays" / "analyzer-sharded")
    deployment = next(d for d in shipped if d["kind"] == "Deployment"
                      and d["metadata"]["name"] == "gpuwarden-analyzer")  # fmt: skip
    sa = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    mine = [d for d in shipped if d["kind"] in RBAC_KINDS - {"Namespace", "ClusterRole",
            "ClusterRoleBinding"} and d["metadata"]["labels"].get("app.kubernetes.io/component")
            == "analyzer"]  # fmt: skip
    assert {d["kind"] for d in mine} == {"ServiceAccount", "Role", "RoleBinding"}
    for d in mine:  # into a namespace of its own, as `kustomize edit set namespace` would
        d["metadata"]["namespace"] = ns
        for s in d.get("subjects") or []:
            s["namespace"] = ns
    kube_lab.apply_yaml(mine)
    token = kube_lab.service_account_token(ns, sa)
    api = kubernetes.client.CoordinationV1Api(kube_lab.client(token))
    mark = kube_lab.audit_mark()
    for i, check in enumerate(CONTRACT):  # every call leases.py makes, with the shipped token
        check(LeaseMembership(api, ns, prefix=f"gpuwarden-analyzer-{i}"))
    scores = ConfigMapExchange(kubernetes.client.CoreV1Api(kube_lab.client(token)), ns)
    scores.put(1, "r-0", b"a")  # every call configmaps.py makes: create,
    scores.put(2, "r-0", b"b")  # replace,
    assert scores.get(2) == {"r-0": b"b"}  # list,
    scores.leave("r-0")  # delete
    calls = used(kube_lab.audit_since(mark, user=f"system:serviceaccount:{ns}:{sa}"))
    assert not [k for k, codes in calls.items() if 403 in codes], calls
    role = next(d for d in mine if d["kind"] == "Role")
    granted = {(rule["apiGroups"][0] or "core", r, v) for rule in role["rules"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert set(calls) == granted, (sorted(granted - set(calls)), sorted(set(calls) - granted))


def test_a_killed_replicas_lease_and_scores_are_removed_by_the_leader(kube_lab: KubeLab) -> None:
    import kubernetes

    from analyzer.replicas.role import ReplicaRole

    m = _leases(kube_lab)
    scores = ConfigMapExchange(kubernetes.client.CoreV1Api(kube_lab.client()), m.namespace)
    interval = 10.0
    m.heartbeat("r-killed", 1000, 1000 * interval)  # its last heartbeat, then SIGKILL
    scores.put(1000, "r-killed", b"its scores")
    role = ReplicaRole(m, "r-live", interval, started=1000 * interval + 1, exchange=scores)
    seen = []
    for tick in range(10, 130, 2):  # cycles 1001..1012, a few turns a cycle
        role.turn(1000 * interval + tick)
        seen.append({b.replica for b in m.beats()})
    assert "r-killed" in seen[0] and seen[-1] == {"r-live"}
    # forgotten when the plan of cycle 1010 (its last beat + forget_after) was published
    assert sum("r-killed" in s for s in seen) in range(40, 48), seen
    assert scores.get(1000) == {}
    names = {i.metadata.name for i in m.api.list_namespaced_lease(m.namespace).items}
    assert f"{m.prefix}-r-killed" not in names and f"{m.prefix}-r-live" in names
