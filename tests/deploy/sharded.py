"""The sharded chart (`analyzer.replicas` > 1) on a control plane of its own, shared by the
install and the rolling-update tests: the lab with the real scheduler, the install, the
analyzer ServiceAccount's token and the Lease client the replicas use with it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.deploy.test_helm_chart import CHART
from tests.deploy.test_helm_install import NS, deployment, helm, pods
from tests.deploy.test_helm_lab import install_operator_crds
from tests.kubelab import KubeLab, cleanup, start_lab

ANALYZER = "gpuwarden-analyzer"
SELECTOR = "app.kubernetes.io%2Fname%3Dgpuwarden-analyzer"
LEASES = f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases"
PDB = f"/apis/policy/v1/namespaces/{NS}/poddisruptionbudgets/{ANALYZER}"


@contextlib.contextmanager
def scheduling_lab(scratch: Path) -> Iterator[KubeLab]:
    """A lab with the real scheduler and the Prometheus Operator's CRDs (the chart's
    ServiceMonitor and rules)."""
    lab = start_lab()
    try:
        lab.start_scheduler()
        install_operator_crds(lab, scratch)
        yield lab
    finally:
        cleanup(lab)


def install_sharded(lab: KubeLab, replicas: int, chart: Path = CHART) -> None:
    """`helm install --set analyzer.replicas=N` on a CPU node (no exporter pods: the analyzers
    land there). No --wait: remediation's claims stay unbound (test_helm_install.py binds
    them)."""
    lab.add_node(gpus=0)
    if lab.http.get_or_none(f"/api/v1/namespaces/{NS}") is None:  # a lab's second install
        lab.http.post("/api/v1/namespaces", {"metadata": {"name": NS}})
    helm(lab, "install", "gw", str(chart), "--namespace", NS, "--set", "createNamespace=false",
         "--set", f"analyzer.replicas={replicas}")  # fmt: skip


def analyzer_pods(lab: KubeLab) -> list[dict[str, Any]]:
    return pods(lab, SELECTOR)


def replica_token(lab: KubeLab) -> str:
    """A token of the chart's analyzer ServiceAccount, as its pods have mounted."""
    sa = deployment(lab, ANALYZER)["spec"]["template"]["spec"]["serviceAccountName"]
    return str(lab.http.post(
        f"/api/v1/namespaces/{NS}/serviceaccounts/{sa}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )["status"]["token"])  # fmt: skip


def replica_leases(lab: KubeLab) -> Any:
    """The ``CoordinationV1Api`` a replica pod has: the chart's ServiceAccount's token."""
    import kubernetes

    return kubernetes.client.CoordinationV1Api(lab.client(replica_token(lab)))


def lease_names(lab: KubeLab) -> list[str]:
    return sorted(x["metadata"]["name"] for x in lab.http.get(LEASES)["items"])
