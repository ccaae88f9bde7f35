"""Rolling maintenance on the real Kubernetes API server of the lab (tests/kubelab.py): the
issue's shape on Kubernetes. 4 GPU nodes each running a pod, one drained for a fault (the xid_fatal ladder), a
wave of 2 under a fleet budget of 2, a kill -9 of the service mid-run. The test plays the
pods' side of the checkpoint protocol: a pod annotated ``gpuwarden.io/checkpoint-requested``
writes its ack a second later (remediation/checkpoint.py).

Checked: no pod is evicted before its ack; the unschedulable nodes (sampled every 0.1 s)
never exceed the budget; the run, resumed after the kill, finishes and every maintained node
is schedulable again while the faulty one stays cordoned. The validation suite after the
operation runs as a Job per node whose pod the kubelet stand-in plays (its framed log), in its
own test below.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuwarden.processes import wait_until
from remediation.backends.kubernetes import CHECKPOINT_ANNOTATION
from remediation.executor import ack_path
from tests.kube.shipped import NAMESPACE, apply_remediation_rbac
from tests.kubelab import KubeLab, Obj, Run, cleanup, start_lab
from tests.realcomp import free_port
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, payload, start_service
from tests.remediation.test_maintenance_slurm_real import FIX, api, run_state

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def lab() -> Iterator[KubeLab]:
    lab = start_lab()
    try:
        yield lab
    finally:
        cleanup(lab)


class Pods(threading.Thread):
    """The pods' side: ack a checkpoint request; and the sampler: unschedulable nodes, and
    any pod gone without its ack."""

    def __init__(self, lab: KubeLab, ns: str, nodes: list[str], ack_dir: Path) -> None:
        super().__init__(daemon=True)
        self.lab, self.ns, self.nodes, self.ack_dir = lab, ns, nodes, ack_dir
        self.stop, self.max_out, self.samples = threading.Event(), 0, 0
        self.asked: dict[str, float] = {}
        self.gone_without_ack: list[str] = []
        self.seen: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            with contextlib.suppress(Exception):  # a slow answer: the next sample counts
                self.once()
            time.sleep(0.1)

    def once(self) -> None:
        nodes = self.lab.http.get("/api/v1/nodes").get("items") or []
        out = [n for n in nodes if (n.get("spec") or {}).get("unschedulable")]
        self.samples += 1
        self.max_out = max(self.max_out, len(out))
        pods = self.lab.http.get(f"/api/v1/namespaces/{self.ns}/pods").get("items") or []
        live = set()
        for p in pods:
            meta = p["metadata"]
            jid = f"{self.ns}/{meta['name']}"
            live.add(jid)
            if CHECKPOINT_ANNOTATION in (meta.get("annotations") or {}):
                self.asked.setdefault(jid, time.monotonic())
                if time.monotonic() - self.asked[jid] > 1.0:
                    ack_path(str(self.ack_dir), jid).write_text(json.dumps({"job": jid}))
        for jid in self.seen - live:
            if not ack_path(str(self.ack_dir), jid).exists() and jid not in self.gone_without_ack:
                self.gone_without_ack.append(jid)
        self.seen |= live


def test_a_rolling_wave_on_the_real_api_server_keeps_the_budget_and_evicts_only_acked_pods(
    lab: KubeLab, tmp_path: Path
) -> None:
    ns = lab.namespace("maint")  # a job namespace: its RoleBinding lets gpuwarden annotate pods
    kubeconfig = lab.kubeconfig(apply_remediation_rbac(lab, [ns]), name="remediation")
    nodes = [lab.add_node() for _ in range(4)]
    for i, node in enumerate(nodes):
        lab.run_pod(ns, node, f"trainer-{i}", gpus=8)
    acks = tmp_path / "acks"
    acks.mkdir()
    (tmp_path / "policy.yaml").write_text(
        LIVE_POLICY.replace("ack_dir: /tmp", f"ack_dir: {acks}").replace(
            "fleet: {max_fraction: 0.5, max_nodes: 100}", "fleet: {max_fraction: 1.0, max_nodes: 2}"
        )
    )
    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    port = free_port()
    proc = start_service(tmp_path, port, env, "--backend", "kubernetes")
    pods = Pods(lab, ns, nodes, acks)
    faulty, todo = nodes[3], nodes[:3]
    try:
        req_body = payload(alert(faulty, action="cordon"))
        urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{port}/alertmanager", data=req_body, headers=AUTH, method="POST"),
            timeout=10).close()  # fmt: skip
        wait_until(lambda: bool(lab.http.get(f"/api/v1/nodes/{faulty}")["spec"].get(
            "unschedulable")), 30, 0.2, "faulty node cordoned")  # fmt: skip
        pods.start()
        body = {"select": {"nodes": todo}, "wave_size": 2, "drain_deadline_s": 120,
                "operation": {"kind": "command", "argv": ["sh", "-c", "sleep 1"]}}  # fmt: skip
        status, run = api(port, "POST", "/api/v1/maintenance", body)
        assert status == 201, run
        wait_until(lambda: "operating" in run_state(tmp_path / "state.db")[1].values(), 90, 0.1,
                   "operating")  # fmt: skip
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        proc = start_service(tmp_path, free_port(), env, "--backend", "kubernetes")
        wait_until(lambda: run_state(tmp_path / "state.db")[0] == "done", 120, 0.3, "run done")
    finally:
        pods.stop.set()
        proc.kill()
        proc.wait(10)
    state, states = run_state(tmp_path / "state.db")
    assert state == "done"
    print(json.dumps({"final": states, "max_out": pods.max_out, "samples": pods.samples,
                      "acked": len(list(acks.iterdir()))}))  # fmt: skip
    assert set(states.values()) == {"done"}
    assert pods.samples > 20 and pods.max_out <= 2, pods.max_out
    # trainer-3 ran on the faulty node: the fault path's drain (the xid_fatal ladder's first
    # rung) evicts it, as faults do; the run's own nodes lose no pod without its ack
    assert [p for p in pods.gone_without_ack if not p.endswith("/trainer-3")] == []
    assert len(list(acks.iterdir())) == 3  # each maintained node's pod checkpointed
    for node in todo:
        assert not lab.http.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable"), node
    assert lab.http.get(f"/api/v1/nodes/{faulty}")["spec"].get("unschedulable")


UPGRADE_JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "driver-upgrade"},
    "spec": {"template": {"spec": {
        "hostPID": True,
        "containers": [{
            "name": "upgrade", "image": "registry.example/driver-upgrade:570",
            "command": ["nsenter", "-t", "1", "-m", "--", "/opt/upgrade-driver.sh", "{node}"],
            "securityContext": {"privileged": True},
        }],
    }}},
}  # fmt: skip


def test_a_wave_whose_operation_is_a_job_per_node_releases_the_nodes_whose_job_completed(
    lab: KubeLab, tmp_path: Path
) -> None:
    """The kube_job operation on the real Job controller, as the shipped ServiceAccount in
    the base's namespace (validation.kubernetes.namespace's default; its Role grants the Job
    calls): each node's Job is made once, bound to the cordoned node; the kubelet stand-in
    ends the pods (exit 0, and exit 1 on one node); the Job controller's Complete releases
    the node, its Failed (backoffLimit 0: BackoffLimitExceeded) keeps the node out with the
    reason. A kill -9 while the Jobs run: the restarted service finds them (no second Job).
    Before that, a manifest the API server refuses (no image) stops the plan."""
    kubeconfig = lab.kubeconfig(apply_remediation_rbac(lab, []), name="remediation-jobs")
    nodes = [lab.add_node() for _ in range(3)]
    bad = nodes[2]
    (tmp_path / "policy.yaml").write_text(
        LIVE_POLICY.replace(
            "fleet: {max_fraction: 0.5, max_nodes: 100}", "fleet: {max_fraction: 1.0, max_nodes: 6}"
        )
    )

    def script(pod: Obj) -> Run | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        node = labels.get("gpuwarden.io/node")
        if labels.get("app.kubernetes.io/name") != "gpuwarden-maintenance" or node not in nodes:
            return None
        return Run(log=f"upgraded {node}\n", exit_code=1 if node == bad else 0, after_s=4)

    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    port = free_port()
    proc = start_service(tmp_path, port, env, "--backend", "kubernetes")
    ns = NAMESPACE
    try:
        with lab.kubelet.scripted(script):
            wait_until(lambda: api(port, "GET", "/api/v1/maintenance")[0] == 200, 30, 0.2, "up")
            no_image = json.loads(json.dumps(UPGRADE_JOB))
            del no_image["spec"]["template"]["spec"]["containers"][0]["image"]
            status, body = api(port, "POST", "/api/v1/maintenance", {
                "select": {"nodes": nodes}, "operation": {"kind": "kube_job", "job": no_image}})  # fmt: skip
            assert status == 400 and "HTTP 422" in body["error"], body
            assert "image" in body["error"] and run_state(tmp_path / "state.db")[0] == ""
            req = {"select": {"nodes": nodes}, "wave_size": 3, "max_failures": 1,
                   "drain_deadline_s": 60, "operation": {"kind": "kube_job", "job": UPGRADE_JOB,
                                                         "timeout_s": 120}}  # fmt: skip
            status, run = api(port, "POST", "/api/v1/maintenance", req)
            assert status == 201, run
            wait_until(lambda: list(run_state(tmp_path / "state.db")[1].values()).count(
                "operating") == 3, 60, 0.1, "operating")  # fmt: skip
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(5)
            port = free_port()
            proc = start_service(tmp_path, port, env, "--backend", "kubernetes")
            wait_until(lambda: run_state(tmp_path / "state.db")[0] == "done", 120, 0.3, "done")
            status, shown = api(port, "GET", f"/api/v1/maintenance/{run['id']}")
    finally:
        proc.kill()
        proc.wait(10)
    reasons = {n["node"]: (n["state"], n["reason"]) for n in shown["nodes"]}
    print(json.dumps(reasons))
    jobs = lab.http.get(f"/apis/batch/v1/namespaces/{ns}/jobs?labelSelector="
                        f"gpuwarden.io/maintenance-run={run['id']}")["items"]  # fmt: skip
    by_node = {j["metadata"]["labels"]["gpuwarden.io/node"]: j for j in jobs}
    assert len(jobs) == 3 and set(by_node) == set(nodes)  # one Job per node, none twice
    for node, job in by_node.items():
        pod = job["spec"]["template"]["spec"]
        assert pod["nodeName"] == node and job["spec"]["backoffLimit"] == 0
        assert pod["containers"][0]["command"][-1] == node
        assert job["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpuwarden"
    for node in nodes[:2]:
        assert reasons[node][0] == "done", reasons
        assert not lab.http.get(f"/api/v1/nodes/{node}")["spec"].get("unschedulable"), node
    assert reasons[bad][0] == "failed" and "BackoffLimitExceeded" in reasons[bad][1], reasons
    assert lab.http.get(f"/api/v1/nodes/{bad}")["spec"].get("unschedulable")  # kept out


def test_a_wave_validates_each_node_with_a_job_and_keeps_the_one_that_fails_out(
    lab: KubeLab, tmp_path: Path
) -> None:
    """The post-maintenance suite on Kubernetes: after the operation, a validation Job per
    node, bound to the cordoned node, made by the real Job controller's rules as the shipped
    ServiceAccount; the kubelet stand-in plays the suite's pod (its framed log: the step's rc
    0 and a recorded all_reduce_perf on one node, 1 and an NCCL error on the other). The passing node is released (schedulable again); the
    failing one stays cordoned, its maintenance node ``failed`` with the reason, and is held
    in the fault path (quarantined in the journal)."""
    kubeconfig = lab.kubeconfig(apply_remediation_rbac(lab, []), name="remediation-validate")
    good, bad = lab.add_node(), lab.add_node()
    (tmp_path / "policy.yaml").write_text(
        LIVE_POLICY.replace(
            "fleet: {max_fraction: 0.5, max_nodes: 100}", "fleet: {max_fraction: 1.0, max_nodes: 6}"
        )
        + "validation:\n  suites:\n    post-maintenance:\n"
        "      - {name: nccl, command: [all_reduce_perf], timeout_s: 60, parser: nccl-tests,\n"
        "         min: {busbw_at_max_size_gbps: 100}}\n"
        "  kubernetes: {namespace: gpuwarden, image: registry.local/gpu-validate:1}\n"
    )

    played: list[str] = []

    def script(pod: Obj) -> Run | None:
        labels = (pod.get("metadata") or {}).get("labels") or {}
        node = str((pod.get("spec") or {}).get("nodeName"))
        validation = labels.get("app.kubernetes.io/name") == "gpuwarden-validation"
        if not validation or node not in (good, bad):
            return None
        played.append(node)
        rc = 1 if node == bad else 0
        out = FIX.read_text() if node == good else "NCCL error: unhandled cuda error\n"
        log = f"===gpuwarden-step 0 begin===\n{out}\n===gpuwarden-step 0 rc={rc}===\n"
        return Run(log=log, exit_code=rc, after_s=2)

    env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
    port = free_port()
    proc = start_service(tmp_path, port, env, "--backend", "kubernetes")
    try:
        with lab.kubelet.scripted(script):
            wait_until(lambda: api(port, "GET", "/api/v1/maintenance")[0] == 200, 30, 0.2, "up")
            req = {"select": {"nodes": [good, bad]}, "wave_size": 2, "max_failures": 1,
                   "drain_deadline_s": 60, "suite": "post-maintenance",
                   "operation": {"kind": "command", "argv": ["true"]}}  # fmt: skip
            status, run = api(port, "POST", "/api/v1/maintenance", req)
            assert status == 201, run
            wait_until(lambda: run_state(tmp_path / "state.db")[0] == "done", 120, 0.3, "done")
            status, shown = api(port, "GET", f"/api/v1/maintenance/{run['id']}")
            _, shown_bad = api(port, "GET", f"/api/v1/nodes/{bad}")
    finally:
        proc.kill()
        proc.wait(10)
    reasons = {n["node"]: (n["state"], n["reason"]) for n in shown["nodes"]}
    held = shown_bad["node"]
    print(json.dumps({"nodes": reasons, "held": held}))
    assert reasons[good][0] == "done" and reasons[bad][0] == "failed", reasons
    assert "validation" in reasons[bad][1], reasons
    assert not lab.http.get(f"/api/v1/nodes/{good}")["spec"].get("unschedulable")
    assert lab.http.get(f"/api/v1/nodes/{bad}")["spec"].get("unschedulable")  # kept out
    assert held["state"] == "quarantined" and "validation failed" in held["reason"], held
    # each node's suite ran once, as a pod the Job controller made on that node
    assert sorted(played) == sorted([good, bad]), played
