"""The remediation leader lease as a Lease on the real kube-apiserver
(remediation/leader/kube.py): its compare-and-swap is the server's 409, a standby takes over
only after a whole term of silence, and two ``python -m remediation`` processes with
``--leader-elect kubernetes`` hand over on kill -9 and on SIGTERM."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from remediation.leader.elector import Elector
from remediation.leader.kube import KubeLeaseStore
from tests.kubelab import KubeLab
from tests.realcomp import free_port, wait_until
from tests.remediation.helpers import (
    LIVE_POLICY,
    alert,
    get_status,
    payload,
    post_webhook,
    start_service,
)

pytestmark = pytest.mark.real
NAME = "gpuwarden-remediation"


def _store(lab: KubeLab, ns: str) -> KubeLeaseStore:
    import kubernetes

    api = kubernetes.client.CoordinationV1Api(lab.client())
    return KubeLeaseStore(api, ns, NAME, timeout=5)


def _lease(lab: KubeLab, ns: str) -> dict[str, Any]:
    got: dict[str, Any] = lab.http.get(
        f"/apis/coordination.k8s.io/v1/namespaces/{ns}/leases/{NAME}"
    )
    return got


def test_the_lease_is_created_once_replaced_only_at_its_version_and_released_by_its_holder(
    kube_lab: KubeLab,
) -> None:
    ns = kube_lab.namespace()
    s = _store(kube_lab, ns)
    assert s.read() is None
    assert s.write("a", 14.5, None)
    assert not s.write("b", 15, None)  # the server's 409 AlreadyExists
    first = s.read()
    assert first is not None and (first.holder, first.lease_s) == ("a", 15.0)
    assert s.write("a", 15, first.version)  # a renewal
    assert not s.write("b", 15, first.version)  # a stale version: the server's 409 Conflict
    renewed = s.read()
    assert renewed is not None and renewed.version != first.version
    lease = _lease(kube_lab, ns)
    assert lease["spec"]["holderIdentity"] == "a"
    assert lease["spec"]["leaseDurationSeconds"] == 15
    assert lease["spec"]["leaseTransitions"] == 0
    acquired = lease["spec"]["acquireTime"]
    assert s.write("b", 15, renewed.version)  # a takeover counts a transition
    lease = _lease(kube_lab, ns)
    assert lease["spec"]["leaseTransitions"] == 1 and lease["spec"]["acquireTime"] >= acquired
    took = s.read()
    assert took is not None
    assert s.write("", 15, took.version)  # released: no holder on the object
    assert "holderIdentity" not in _lease(kube_lab, ns)["spec"]
    released = s.read()
    assert released is not None and released.holder == ""
    out = kube_lab.kubectl("get", "lease", NAME, "-n", ns, "-o", "jsonpath={.spec.renewTime}")
    assert out.endswith("Z") and "." in out


def test_on_the_server_a_standby_takes_over_after_a_silent_term_and_the_old_leader_is_refused(
    kube_lab: KubeLab,
) -> None:
    ns = kube_lab.namespace()
    assert _store(kube_lab, ns).write("", 3, None)  # made and released: free to the first
    a = Elector(_store(kube_lab, ns), "a", lease_s=3, renew_deadline_s=2)
    b = Elector(_store(kube_lab, ns), "b", lease_s=3, renew_deadline_s=2)
    assert a.attempt()
    t0 = time.monotonic()
    for _ in range(6):  # a renews every 0.5 s: b never gets it
        time.sleep(0.5)
        assert a.attempt() and not b.attempt()
    t1 = time.monotonic()  # a falls silent
    wait_until(b.attempt, 10, 0.2, "b takes the lease")
    assert time.monotonic() - t1 >= 3.0 - 0.5  # a whole term after b last saw a write
    assert time.monotonic() - t0 > 5
    assert not a.attempt() and not a.held()
    assert _lease(kube_lab, ns)["spec"]["holderIdentity"] == "b"


# ----------------------------------------------------------------------- the service
def _get(url: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def _leading(port: int) -> bool:
    return get_status(f"http://127.0.0.1:{port}/readyz") == 200


def test_two_services_one_acts_the_other_stands_by_and_takes_over_on_kill_9_and_on_sigterm(
    kube_lab: KubeLab, tmp_path: Path
) -> None:
    ns = kube_lab.namespace()
    (tmp_path / "policy.yaml").write_text(LIVE_POLICY.replace("dry_run: false", "dry_run: true"))
    env = {**os.environ, "KUBECONFIG": str(kube_lab.kubeconfig())}
    flags = ["--leader-elect", "kubernetes", "--leader-namespace", ns, "--leader-lease-s", "4",
             "--leader-renew-deadline-s", "3", "--leader-retry-s", "0.5"]  # fmt: skip
    ports = [free_port(), free_port(), free_port()]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        procs.append(start_service(tmp_path, ports[0], env, *flags, "--leader-identity", "one"))
        wait_until(lambda: _leading(ports[0]), 20, 0.1, "the first instance leads")
        procs.append(start_service(tmp_path, ports[1], env, *flags, "--leader-identity", "two"))
        # it answers /healthz before its first read of the Lease
        wait_until(lambda: _get(f"http://127.0.0.1:{ports[1]}/healthz")[1].get("leader") == "one",
                   10, 0.1, "the standby names the leader")  # fmt: skip
        status, body = _get(f"http://127.0.0.1:{ports[1]}/healthz")
        assert (status, body) == (200, {"status": "standby", "leader": "one"})
        assert _get(f"http://127.0.0.1:{ports[1]}/readyz")[0] == 503
        hook = payload(alert("gpu-node-001"))
        assert post_webhook(ports[1], hook) == 503  # retried
        assert post_webhook(ports[0], hook) == 200
        assert _lease(kube_lab, ns)["spec"]["holderIdentity"] == "one"

        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(10)
        t0 = time.monotonic()
        wait_until(lambda: _leading(ports[1]), 30, 0.1, "the standby takes over")
        took = time.monotonic() - t0
        assert took >= 4 - 1  # not before the dead leader's term ran out
        assert _lease(kube_lab, ns)["spec"]["holderIdentity"] == "two"
        assert post_webhook(ports[1], payload(alert("gpu-node-002"))) == 200  # fmt: skip

        procs.append(start_service(tmp_path, ports[2], env, *flags, "--leader-identity", "three"))
        wait_until(lambda: _get(f"http://127.0.0.1:{ports[2]}/healthz")[1].get("leader") == "two",
                   10, 0.1, "the third names the leader")  # fmt: skip
        procs[1].send_signal(signal.SIGTERM)
        assert procs[1].wait(15) == 0
        t0 = time.monotonic()
        wait_until(lambda: _leading(ports[2]), 15, 0.05, "the third takes the released lease")
        assert time.monotonic() - t0 < 3  # released: no term to wait out
        assert _lease(kube_lab, ns)["spec"]["leaseTransitions"] == 2
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
    # one journal throughout: the alert the killed leader took, then the one its successor took
    db = sqlite3.connect(tmp_path / "state.db")
    nodes = [r[0] for r in db.execute("SELECT node FROM alerts ORDER BY seq")]
    assert nodes == ["gpu-node-001", "gpu-node-002"]


# ----------------------------------------------------------------------- the shipped overlay
def test_the_standby_overlay_runs_two_electing_replicas_on_shared_storage() -> None:
    from tests.kube.shipped import DEPLOY, kustomize

    shipped = kustomize(DEPLOY / "overlays" / "remediation-standby")
    dep = next(d for d in shipped if d["kind"] == "Deployment"
               and d["metadata"]["name"] == "gpuwarden-remediation")  # fmt: skip
    spec = dep["spec"]
    assert spec["replicas"] == 2
    assert spec["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    (c,) = spec["template"]["spec"]["containers"]
    assert "--leader-elect=kubernetes" in c["args"]
    # a standby is ready (its /healthz answers), or a rolling update would wait on it forever
    assert c["readinessProbe"]["httpGet"]["path"] == "/healthz"
    pvc = next(d for d in shipped if d["kind"] == "PersistentVolumeClaim"
               and d["metadata"]["name"] == "gpuwarden-remediation-state")  # fmt: skip
    assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]


def test_the_shipped_standby_role_allows_every_lease_call_and_no_more(kube_lab: KubeLab) -> None:
    import kubernetes

    from tests.kube.shipped import DEPLOY, kustomize, used

    ns = kube_lab.namespace("standby")
    shipped = kustomize(DEPLOY / "overlays" / "remediation-standby")
    mine = [d for d in shipped if d["kind"] in ("Role", "RoleBinding")
            and d["metadata"]["name"] == "gpuwarden-remediation-leader"]  # fmt: skip
    sa = next(d for d in shipped if d["kind"] == "ServiceAccount"
              and d["metadata"]["name"] == "gpuwarden-remediation")  # fmt: skip
    assert len(mine) == 2
    for d in [sa, *mine]:  # into a namespace of its own, as `kustomize edit set namespace` would
        d["metadata"]["namespace"] = ns
        for s in d.get("subjects") or []:
            s["namespace"] = ns
    kube_lab.apply_yaml([sa, *mine])
    token = kube_lab.service_account_token(ns, "gpuwarden-remediation")
    api = kubernetes.client.CoordinationV1Api(kube_lab.client(token))
    mark = kube_lab.audit_mark()
    assert KubeLeaseStore(api, ns, NAME).write("", 3, None)  # create (a first start's)
    a = Elector(KubeLeaseStore(api, ns, NAME), "a", lease_s=3, renew_deadline_s=2)
    b = Elector(KubeLeaseStore(api, ns, NAME), "b", lease_s=3, renew_deadline_s=2)
    assert a.attempt() and a.attempt()  # a take, then a renewal
    assert not b.attempt()
    assert a.release()
    assert b.attempt()  # a takeover of the released Lease
    user = f"system:serviceaccount:{ns}:gpuwarden-remediation"
    events = kube_lab.audit_since(mark, user=user)
    calls = used(events)
    # one GET a try: a write is built from the object the try's read returned
    gets = [
        e
        for e in events
        if e["verb"] == "get" and (e.get("objectRef") or {}).get("resource") == "leases"
    ]
    assert len(gets) == 5, len(gets)  # a's two tries, b's refused one, a's release, b's take
    assert not [k for k, codes in calls.items() if 403 in codes], calls
    role = next(d for d in mine if d["kind"] == "Role")
    granted = {(rule["apiGroups"][0] or "core", r, v) for rule in role["rules"]
               for r in rule["resources"] for v in rule["verbs"]}  # fmt: skip
    assert set(calls) == granted, (sorted(granted - set(calls)), sorted(set(calls) - granted))


def test_the_services_lease_calls_get_a_quarter_of_the_renew_deadline_each(
    kube_lab: KubeLab, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A renewal is two calls; with each bounded by the command timeout (10 s, the renew
    deadline itself) one slow call would cost the leader its lease."""
    from remediation.leader import run
    from remediation.settings import Settings

    monkeypatch.setenv("KUBECONFIG", str(kube_lab.kubeconfig()))
    s = Settings(leader_elect="kubernetes", leader_namespace=kube_lab.namespace(),
                 allow_unauthenticated=True)  # fmt: skip
    store = run.store(s)
    assert isinstance(store, KubeLeaseStore)
    assert store.timeout == s.leader_renew_deadline_s / 4 == 2.5
    assert store.write("", 15, None)  # and it reaches the server with the kubeconfig
