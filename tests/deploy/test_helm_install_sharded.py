"""`helm install --set analyzer.replicas=3` for real on a control plane of its own
(tests/kubelab.py: the real scheduler, controller-manager and disruption controller): the
Deployment controller's own pod names are valid replica names, the chart's ServiceAccount
and Lease Role carry a coordinator cycle of those replicas on the real server, and the
PodDisruptionBudget allows one replica out at a time. No Prometheus here: the replicas are
the analyzer's Coordinator objects run in this process with the pods' names and the
ServiceAccount's token (the analyzer process itself is tested in tests/analyzer)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.leases import LeaseMembership
from analyzer.settings import REPLICA_NAME
from gpuwarden.processes import wait_until
from tests.deploy.test_helm_chart import CHART
from tests.deploy.test_helm_install import NS, deployment, helm, pods
from tests.deploy.test_helm_lab import install_operator_crds
from tests.kubelab import KubeLab, cleanup, start_lab

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    lab = start_lab()
    try:
        lab.start_scheduler()
        install_operator_crds(lab, tmp_path_factory.mktemp("crds"))
        yield lab
    finally:
        cleanup(lab)


def test_the_sharded_chart_runs_replicas_named_after_their_pods_that_share_one_plan(
    lab: KubeLab,
) -> None:
    import kubernetes

    lab.add_node(gpus=0)  # a CPU node: no exporter pods, the analyzers land here
    lab.http.post("/api/v1/namespaces", {"metadata": {"name": NS}})
    # no --wait: remediation's claims stay unbound here (test_helm_install.py binds them)
    helm(lab, "install", "gw", str(CHART), "--namespace", NS, "--set", "createNamespace=false",
         "--set", "analyzer.replicas=3")  # fmt: skip

    def ready() -> bool:
        st = deployment(lab, "gpuwarden-analyzer").get("status") or {}
        return bool(st.get("readyReplicas") == 3)

    wait_until(ready, 90, 0.3, "3 analyzer replicas ready")
    names = sorted(
        p["metadata"]["name"] for p in pods(lab, "app.kubernetes.io%2Fname%3Dgpuwarden-analyzer")
    )
    assert len(names) == 3 and all(REPLICA_NAME.fullmatch(n) for n in names), names
    sa = deployment(lab, "gpuwarden-analyzer")["spec"]["template"]["spec"]["serviceAccountName"]
    token = lab.http.post(
        f"/api/v1/namespaces/{NS}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]  # fmt: skip

    # the replicas' membership with those names, the pod's namespace and the chart's grants
    api = kubernetes.client.CoordinationV1Api(lab.client(token))
    members = [LeaseMembership(api, NS) for _ in names]
    timing = Timing(10.0)
    start = 1000 * 10.0 + 3.0  # inside cycle 1000: they judge from 1001
    coords = [Coordinator(m, n, timing, start) for m, n in zip(members, names, strict=True)]
    units = [f"leaf/l{i}" for i in range(9)]
    judged: dict[int, list[str]] = {}
    for tick in range(7, 30):  # cycles 1001 and 1002
        now = 1000 * 10.0 + tick
        for c in coords:
            plan = c.turn(now)
            if plan:
                assert plan.members == tuple(names), plan
                judged.setdefault(plan.cycle, []).extend(c.mine(plan, units))
    assert {k: sorted(v) for k, v in judged.items()} == {1001: units, 1002: units}
    for c in coords:  # SIGTERM: each removes its heartbeat Lease
        c.leave()
    leases = lab.http.get(f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases")["items"]
    assert [x["metadata"]["name"] for x in leases] == ["gpuwarden-analyzer-leader"]

    path = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/gpuwarden-analyzer"

    def computed() -> dict | None:
        st = lab.http.get(path).get("status") or {}
        return st if st.get("expectedPods") == 3 else None

    st = wait_until(computed, 30, 0.2, "the analyzer PDB computed")
    assert st["disruptionsAllowed"] == 1 and st["desiredHealthy"] == 2, st
    helm(lab, "uninstall", "gw", "--namespace", NS, "--wait", "--timeout", "60s")
