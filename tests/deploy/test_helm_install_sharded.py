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
from tests.deploy.sharded import (
    ANALYZER,
    PDB,
    analyzer_pods,
    install_sharded,
    lease_names,
    replica_leases,
    scheduling_lab,
)
from tests.deploy.test_helm_install import NS, deployment, helm
from tests.kubelab import KubeLab

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    with scheduling_lab(tmp_path_factory.mktemp("crds")) as lab:
        yield lab


def test_the_sharded_chart_runs_replicas_named_after_their_pods_that_share_one_plan(
    lab: KubeLab,
) -> None:
    install_sharded(lab, 3)

    def ready() -> bool:
        st = deployment(lab, ANALYZER).get("status") or {}
        return bool(st.get("readyReplicas") == 3)

    wait_until(ready, 90, 0.3, "3 analyzer replicas ready")
    names = sorted(p["metadata"]["name"] for p in analyzer_pods(lab))
    assert len(names) == 3 and all(REPLICA_NAME.fullmatch(n) for n in names), names
    # the replicas' membership with those names, the pod's namespace and the chart's grants
    api = replica_leases(lab)
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
    assert lease_names(lab) == ["gpuwarden-analyzer-leader"]

    def computed() -> dict | None:
        st = lab.http.get(PDB).get("status") or {}
        return st if st.get("expectedPods") == 3 else None

    st = wait_until(computed, 30, 0.2, "the analyzer PDB computed")
    assert st["disruptionsAllowed"] == 1 and st["desiredHealthy"] == 2, st
    helm(lab, "uninstall", "gw", "--namespace", NS, "--wait", "--timeout", "60s")
