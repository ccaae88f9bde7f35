"""`helm install` for real on a control plane of its own (tests/kubelab.py, the real
scheduler, the Prometheus Operator's CRDs): the exporter DaemonSet's pods are scheduled on
the GPU nodes only and become ready, the remediation Deployment is available off the GPU
nodes (its PVCs bound by the real PV controller), `helm install --wait` returns; then the
remediation service run with the chart's own arguments, policy ConfigMap and the chart's
ServiceAccount answers its webhook; `helm uninstall` removes what it installed.

A lab of its own: the chart owns the `gpuwarden` namespace's ServiceAccounts and RBAC, which
other tests apply into the shared lab without Helm's ownership labels."""

from __future__ import annotations

import os
import shlex
import subprocess
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuwarden.processes import wait_until
from tests.deploy.test_helm_chart import CHART
from tests.deploy.test_helm_lab import install_operator_crds
from tests.kubelab import KubeLab, cleanup, helm_binary, start_lab
from tests.realcomp import free_port
from tests.remediation.helpers import alert, payload, start_service

pytestmark = pytest.mark.real
NS = "gpuwarden"
TOKEN = "helm-smoke-token-of-at-least-32-bytes"
GPU = {"nvidia.com/gpu.present": "true"}


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    lab = start_lab()
    try:
        lab.start_scheduler()
        install_operator_crds(lab, tmp_path_factory.mktemp("crds"))
        yield lab
    finally:
        cleanup(lab)


def helm(lab: KubeLab, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig()), "HELM_CACHE_HOME": str(lab.dir)}
    p = subprocess.run(
        [helm_binary(), *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    assert p.returncode == 0, f"helm {shlex.join(args)}:\n{p.stdout}\n{p.stderr}"
    return p


def storage(lab: KubeLab, d: Path) -> None:
    """What a site's cluster has and the lab has not: volumes for the two claims (a state
    volume, and the shared ack directory the job-namespace kit names)."""
    for name, mode, claim in (
        ("gpuwarden-state-smoke", "ReadWriteOnce", None),
        ("gpuwarden-acks", "ReadWriteMany", {"namespace": NS, "name": "gpuwarden-acks"}),
    ):
        spec: dict[str, Any] = {
            "capacity": {"storage": "1Gi"},
            "accessModes": [mode],
            "persistentVolumeReclaimPolicy": "Retain",
            "storageClassName": "",
            "hostPath": {"path": str(d / name)},
        }
        if claim:
            spec["claimRef"] = claim
        lab.http.post("/api/v1/persistentvolumes", {"metadata": {"name": name}, "spec": spec})


def deployment(lab: KubeLab, name: str) -> dict[str, Any]:
    return dict(lab.http.get(f"/apis/apps/v1/namespaces/{NS}/deployments/{name}"))


def pods(lab: KubeLab, selector: str) -> list[dict[str, Any]]:
    got = lab.http.get(f"/api/v1/namespaces/{NS}/pods?labelSelector={selector}")
    return list(got.get("items") or [])


def test_helm_install_schedules_the_exporter_on_gpu_nodes_and_the_webhook_answers_with_its_config(
    lab: KubeLab, tmp_path: Path
) -> None:
    gpu_nodes = {lab.add_node(labels=GPU) for _ in range(2)}
    control = lab.add_node(gpus=0)
    # docs/deploy.md's prerequisite: the NVIDIA runtime registered as RuntimeClass `nvidia`
    # (the GPU Operator or `nvidia-ctk runtime configure` does it); without it the
    # DaemonSet controller's every create is refused: RuntimeClass "nvidia" not found
    lab.http.post("/apis/node.k8s.io/v1/runtimeclasses",
                  {"metadata": {"name": "nvidia"}, "handler": "nvidia"})  # fmt: skip
    lab.http.post("/api/v1/namespaces", {"metadata": {"name": NS}})
    lab.http.post(
        f"/api/v1/namespaces/{NS}/secrets",
        {"metadata": {"name": "gpuwarden-remediation-webhook"}, "stringData": {"token": TOKEN}},
    )
    storage(lab, tmp_path)
    helm(lab, "install", "gw", str(CHART), "--namespace", NS, "--set", "createNamespace=false",
         "--wait", "--timeout", "150s")  # fmt: skip
    assert "deployed" in helm(lab, "status", "gw", "--namespace", NS).stdout

    [ds] = lab.http.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets").get("items")
    st = ds["status"]
    assert st["desiredNumberScheduled"] == 2 and st["numberReady"] == 2, st
    sel = ",".join(f"{k}%3D{v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
    assert {p["spec"]["nodeName"] for p in pods(lab, sel)} == gpu_nodes
    dep = deployment(lab, "gpuwarden-remediation")
    assert dep["status"].get("availableReplicas") == 1, dep["status"]
    [rem] = pods(lab, "app.kubernetes.io%2Fname%3Dgpuwarden-remediation")
    assert rem["spec"]["nodeName"] == control, "remediation prefers a node without GPUs"

    # the chart's own configuration, as the container would read it
    [c] = dep["spec"]["template"]["spec"]["containers"]
    policy = lab.http.get(f"/api/v1/namespaces/{NS}/configmaps/gpuwarden-remediation-policy")
    (tmp_path / "policy.yaml").write_text(policy["data"]["policy.yaml"])
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "token").chmod(0o600)  # the Secret's defaultMode 256 (0400), as mounted
    token = lab.http.post(
        f"/api/v1/namespaces/{NS}/serviceaccounts/{dep['spec']['template']['spec']['serviceAccountName']}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )["status"]["token"]  # fmt: skip
    kept = [a for a in c["args"] if a.split("=", 1)[0] in ("--backend", "--alertmanager")]
    assert "--backend=kubernetes" in kept, c["args"]
    port = free_port()
    env = {**os.environ, "KUBECONFIG": str(lab.kubeconfig(token, name="chart-sa"))}
    env.pop("GPUWARDEN_WEBHOOK_TOKEN", None)
    proc = start_service(
        tmp_path, port, env, *kept, "--webhook-token-file", str(tmp_path / "token")
    )
    try:
        node = sorted(gpu_nodes)[0]
        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/alertmanager", data=payload(alert(node)), method="POST",
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )  # fmt: skip
        with urllib.request.urlopen(req, timeout=10) as r:
            assert r.status == 200

        def decided() -> list[Any]:
            q = urllib.request.Request(
                f"http://127.0.0.1:{port}/api/v1/decisions?node={node}",
                headers={"Authorization": f"Bearer {TOKEN}"},
            )
            with urllib.request.urlopen(q, timeout=5) as r:
                return list(yaml.safe_load(r.read())["decisions"])

        [d] = wait_until(decided, 30, 0.3, "the alert decided")
        assert d["node"] == node and d["action"] in ("drain", "checkpoint_restart"), d
    finally:
        proc.terminate()
        proc.wait(10)
    assert lab.http.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable") is not True

    helm(lab, "uninstall", "gw", "--namespace", NS, "--wait", "--timeout", "60s")
    assert lab.http.get(f"/apis/apps/v1/namespaces/{NS}/daemonsets").get("items") == []
