"""A real Kubernetes control plane on loopback for tests: etcd, kube-apiserver (RBAC, audit
log), kube-controller-manager and, on demand, kube-scheduler, plus a kubelet stand-in.

The servers are the ones ``tests/lab/servers.sh`` builds from Kubernetes' Go modules into a
cache outside the clone (``make test`` runs it); etcd is Debian unstable's. A missing server
skips the test on a developer machine and fails it under ``CI``, like the Debian servers.

What a real cluster has and this lab has not: a container runtime and a real kubelet. The
stand-in (``KubeletStandIn``) does the kubelet's part of the API: it moves pods bound to the
lab's nodes from Pending to Running (or to Succeeded/Failed with a scripted exit code and
log), finishes the deletion of pods marked for deletion, and serves their logs to the API
server's ``pods/log`` on the node's kubelet port. Nodes are created by ``KubeLab.add_node``
with GPU capacity. The controller-manager runs every controller except the node lifecycle
controller (no kubelet heartbeats here; it would taint every node unreachable) and the cloud
ones. Everything else, admission, RBAC, the disruption controller computing PDB status, the
Job and garbage-collection controllers, eviction semantics, is the real server's.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, NoReturn

from gpuwarden.processes import free_port, wait_until, world_readable_tmpdir
from tests.realcomp import lab_cache, unavailable, versions

Obj = dict[str, Any]
HERE = Path(__file__).resolve().parent
ADMIN_USER = "lab-admin"


def _missing(msg: str) -> NoReturn:
    unavailable(msg + " (`make test` builds it: tests/lab/servers.sh all)")


def kube_binary(name: str, version: str) -> str:
    path = lab_cache() / "kube" / version / "bin" / name
    if not os.access(path, os.X_OK):
        _missing(f"{name} {version} not built in {path.parent}")
    return str(path)


def sid_binary(name: str) -> str:
    """A Debian unstable binary the lab unpacked (etcd, kubectl, prometheus 3.5, ...)."""
    path = lab_cache() / "debian-sid" / "usr" / "bin" / name
    if not os.access(path, os.X_OK):
        _missing(f"{name} not unpacked in {path.parent}")
    return str(path)


def helm_binary() -> str:
    v = versions()["HELM_VERSION"]
    path = lab_cache() / "helm" / v / "helm"
    if not os.access(path, os.X_OK):
        _missing(f"helm {v} not built in {path.parent}")
    return str(path)


def crd_file(name: str) -> Path:
    """A CRD fixtures/crds records (committed, with its origin), else one its project
    publishes in its Go module (the lab cache, tests/lab/servers.sh crds). The committed
    copies come first: a cache may hold older copies put there by hand."""
    for p in (HERE.parent / "fixtures" / "crds" / name, lab_cache() / "crds" / name):
        if p.exists():
            return p
    _missing(f"CRD {name} not in {lab_cache() / 'crds'} nor fixtures/crds")


AUDIT_POLICY = """\
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: ["RequestReceived"]
rules:
- level: None
  users: ["system:kube-controller-manager", "system:kube-scheduler", "system:apiserver"]
- level: None
  userGroups: ["system:nodes"]
- level: None
  nonResourceURLs: ["/healthz*", "/readyz*", "/livez*", "/version", "/openapi*"]
- level: Metadata
"""


class ApiError(Exception):
    def __init__(self, status: int, body: Obj | str) -> None:
        self.status, self.body = status, body
        super().__init__(f"HTTP {status}: {body}")


class Http:
    """Plain JSON over HTTPS with a bearer token: the lab's own calls (setup, stand-in)."""

    def __init__(self, url: str, token: str, ca: Path) -> None:
        self.url, self.token = url, token
        self.ctx = ssl.create_default_context(cafile=str(ca))

    def call(
        self,
        method: str,
        path: str,
        body: Obj | list[Obj] | None = None,
        content_type: str = "application/json",
        timeout: float = 10.0,
    ) -> Obj:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("Authorization", f"Bearer {self.token}")
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", content_type)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self.ctx) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            text = e.read().decode(errors="replace")
            try:
                raise ApiError(e.code, json.loads(text)) from None
            except json.JSONDecodeError:
                raise ApiError(e.code, text) from None
        if not raw:
            return {}
        try:
            return dict(json.loads(raw))
        except json.JSONDecodeError:
            return {"text": raw.decode(errors="replace")}

    def get(self, path: str) -> Obj:
        return self.call("GET", path)

    def get_or_none(self, path: str) -> Obj | None:
        try:
            return self.get(path)
        except ApiError as e:
            if e.status == 404:
                return None
            raise

    def post(self, path: str, body: Obj) -> Obj:
        return self.call("POST", path, body)

    def merge_patch(self, path: str, body: Obj) -> Obj:
        return self.call("PATCH", path, body, "application/merge-patch+json")

    def apply(self, path: str, body: Obj, manager: str = "lab", dry_run: bool = False) -> Obj:
        q = f"?fieldManager={manager}&force=true" + ("&dryRun=All" if dry_run else "")
        return self.call("PATCH", path + q, body, "application/apply-patch+yaml")

    def delete(self, path: str, body: Obj | None = None) -> Obj | None:
        try:
            return self.call("DELETE", path, body)
        except ApiError as e:
            if e.status == 404:
                return None
            raise


@dataclass
class Run:
    """What a stand-in container does: its log, and how it ends (``exit_code`` None: it runs
    until deleted); ``pending``: it never starts (an image that cannot be pulled)."""

    log: str = ""
    exit_code: int | None = None
    after_s: float = 0.0
    pending: bool = False


Script = Callable[[Obj], "Run | None"]


@dataclass
class _PodState:
    run: Run
    started: float
    done: bool = False


class KubeletStandIn:
    """The kubelet's part of the API for the lab's nodes (see the module docstring).

    ``scripts`` decide what each pod's containers do (first match wins; default: run until
    deleted). ``deletion_delay_s`` is how long a pod marked for deletion keeps its
    deletionTimestamp before the stand-in completes the deletion (a kubelet stopping
    containers).
    """

    def __init__(self, http: Http, nodes: set[str], port: int, cert: tuple[Path, Path]) -> None:
        self.http, self.nodes, self.port = http, nodes, port
        self.scripts: list[Script] = []
        self.deletion_delay_s = 0.0
        self.pods: dict[str, _PodState] = {}  # uid -> state
        self.deleting: dict[str, float] = {}  # uid -> when its deletionTimestamp was seen
        self.logs: dict[tuple[str, str], str] = {}  # (namespace, pod) -> log
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kubelet-stand-in", daemon=True)
        self._server = self._serve_logs(cert)

    @contextlib.contextmanager
    def scripted(self, script: Script) -> Iterator[None]:
        self.scripts.insert(0, script)
        try:
            yield
        finally:
            self.scripts.remove(script)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.shutdown()

    def _serve_logs(self, cert: tuple[Path, Path]) -> ThreadingHTTPServer:
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                m = re.match(r"^/containerLogs/([^/]+)/([^/]+)/([^/?]+)", self.path)
                text = stand_in.logs.get((m.group(1), m.group(2))) if m else None
                if text is None:
                    self.send_response(404)
                    self.end_headers()
                    return
                body = text.encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
        server.socket = ctx.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="kubelet-logs", daemon=True).start()
        return server

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.sync()
            except Exception as e:  # the server restarting, a pod gone meanwhile
                self.errors.append(repr(e))
            self._stop.wait(0.1)

    def _run_for(self, pod: Obj) -> Run:
        for script in list(self.scripts):
            run = script(pod)
            if run is not None:
                return run
        return Run()

    def sync(self) -> None:
        pods = self.http.get("/api/v1/pods").get("items") or []
        now = time.time()
        for pod in pods:
            meta, spec = pod["metadata"], pod.get("spec") or {}
            if spec.get("nodeName") not in self.nodes:
                continue
            ns, name, uid = meta["namespace"], meta["name"], meta["uid"]
            path = f"/api/v1/namespaces/{ns}/pods/{name}"
            if meta.get("deletionTimestamp"):
                since = self.deleting.setdefault(uid, now)
                if now - since >= self.deletion_delay_s:
                    self.http.delete(path, {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
                    self.pods.pop(uid, None)
                    self.deleting.pop(uid, None)
                continue
            phase = (pod.get("status") or {}).get("phase")
            known = self.pods.get(uid)
            if known is None:
                run = self._run_for(pod)
                state = self.pods[uid] = _PodState(run, now)
                if run.pending:
                    continue
                self.logs[(ns, name)] = run.log
                self.http.merge_patch(path + "/status", running_status(pod))
                continue
            state, run = known, known.run
            finishing = phase == "Running" and run.exit_code is not None and not state.done
            if finishing and now - state.started >= run.after_s:
                self.http.merge_patch(path + "/status", finished_status(pod, run))
                state.done = True


def _ts(t: float | None = None) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _conditions(ready: bool) -> list[Obj]:
    s = "True" if ready else "False"
    return [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": _ts()},
        {"type": "Initialized", "status": "True", "lastTransitionTime": _ts()},
        {"type": "ContainersReady", "status": s, "lastTransitionTime": _ts()},
        {"type": "Ready", "status": s, "lastTransitionTime": _ts()},
    ]


def running_status(pod: Obj) -> Obj:
    containers = pod["spec"].get("containers") or []
    return {
        "status": {
            "phase": "Running",
            "hostIP": "127.0.0.1",
            "podIP": "127.0.0.1",
            "startTime": _ts(),
            "conditions": _conditions(True),
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"lab://{uuid.uuid4().hex}",
                    "ready": True,
                    "started": True,
                    "restartCount": 0,
                    "state": {"running": {"startedAt": _ts()}},
                }
                for c in containers
            ],
        }
    }


def finished_status(pod: Obj, run: Run) -> Obj:
    code = int(run.exit_code or 0)
    containers = pod["spec"].get("containers") or []
    return {
        "status": {
            "phase": "Succeeded" if code == 0 else "Failed",
            "conditions": _conditions(False),
            "containerStatuses": [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "containerID": f"lab://{uuid.uuid4().hex}",
                    "ready": False,
                    "started": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": "Completed" if code == 0 else "Error",
                            "message": run.log[-4096:],
                            "startedAt": _ts(),
                            "finishedAt": _ts(),
                        }
                    },
                }
                for c in containers
            ],
        }
    }


@dataclass
class KubeLab:
    """One control plane; see the module docstring. ``http`` is the admin's plain client."""

    version: str
    url: str
    dir: Path
    ca: Path
    admin_token: str
    http: Http
    kubelet: KubeletStandIn
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    nodes: set[str] = field(default_factory=set)
    _audit_offset: int = 0

    # ----- clients
    def client(self, token: str | None = None) -> Any:
        """An official ``kubernetes`` ApiClient with ``token`` (default: the admin's)."""
        import kubernetes

        cfg = kubernetes.client.Configuration()
        cfg.host = self.url
        cfg.ssl_ca_cert = str(self.ca)
        cfg.api_key = {"authorization": f"Bearer {token or self.admin_token}"}
        return kubernetes.client.ApiClient(cfg)

    def kube_api(self, token: str | None = None) -> Any:
        """gpuwarden's own seam (``OfficialKubeApi``) on this server."""
        import kubernetes

        from remediation.backends.kubeapi import OfficialKubeApi

        return OfficialKubeApi(kubernetes.client.CoreV1Api(self.client(token)))

    def as_user(self, token: str) -> Http:
        return Http(self.url, token, self.ca)

    def kubeconfig(self, token: str | None = None, name: str = "admin") -> Path:
        """A kubeconfig file for kubectl / helm / the services under test."""
        path = self.dir / f"kubeconfig-{name}-{uuid.uuid4().hex[:6]}"
        path.write_text(
            json.dumps(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "lab",
                            "cluster": {
                                "server": self.url,
                                "certificate-authority": str(self.ca),
                            },
                        }
                    ],
                    "users": [{"name": name, "user": {"token": token or self.admin_token}}],
                    "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": name}}],
                    "current-context": "lab",
                }
            )
        )
        return path

    def kubectl(self, *args: str, token: str | None = None, check: bool = True) -> str:
        kc = self.kubeconfig(token)
        p = subprocess.run(
            [sid_binary("kubectl"), f"--kubeconfig={kc}", *args],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if check and p.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args)}: {p.stderr}")
        return p.stdout + (p.stderr if not check else "")

    # ----- objects
    def namespace(self, prefix: str = "t") -> str:
        """A fresh namespace (and wait for its default ServiceAccount: pods need it)."""
        name = f"{prefix}-{uuid.uuid4().hex[:8]}"
        self.http.post("/api/v1/namespaces", {"metadata": {"name": name}})
        wait_until(
            lambda: self.http.get_or_none(f"/api/v1/namespaces/{name}/serviceaccounts/default"),
            30,
            0.1,
            f"default ServiceAccount in {name}",
        )
        return name

    def add_node(
        self,
        name: str | None = None,
        gpus: int = 8,
        labels: dict[str, str] | None = None,
        taints: list[Obj] | None = None,
    ) -> str:
        """A Node with GPU capacity whose kubelet is the stand-in (Ready, on loopback)."""
        name = name or f"gpu-{uuid.uuid4().hex[:8]}"
        self.http.post(
            "/api/v1/nodes",
            {
                "metadata": {
                    "name": name,
                    "labels": {"kubernetes.io/hostname": name, **(labels or {})},
                },
                "spec": {"taints": taints or []},
            },
        )
        cap = {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        self.http.merge_patch(
            f"/api/v1/nodes/{name}/status",
            {
                "status": {
                    "capacity": cap,
                    "allocatable": cap,
                    "addresses": [
                        {"type": "InternalIP", "address": "127.0.0.1"},
                        {"type": "Hostname", "address": name},
                    ],
                    "daemonEndpoints": {"kubeletEndpoint": {"Port": self.kubelet.port}},
                    "conditions": [
                        {
                            "type": "Ready",
                            "status": "True",
                            "reason": "KubeletReady",
                            "message": "lab kubelet stand-in",
                            "lastHeartbeatTime": _ts(),
                            "lastTransitionTime": _ts(),
                        }
                    ],
                    "nodeInfo": {
                        "kubeletVersion": self.version,
                        "architecture": "amd64",
                        "operatingSystem": "linux",
                        "osImage": "lab",
                        "kernelVersion": "",
                        "containerRuntimeVersion": "lab://0",
                        "kubeProxyVersion": "",
                        "machineID": "",
                        "systemUUID": "",
                        "bootID": "",
                    },
                }
            },
        )
        # TaintNodesByCondition admission taints a new node not-ready; the node lifecycle
        # controller (not run here) lifts it once the node reports Ready: lifted here.
        self.http.merge_patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})
        self.nodes.add(name)
        return name

    def run_pod(
        self,
        namespace: str,
        node: str | None,
        name: str | None = None,
        labels: dict[str, str] | None = None,
        gpus: int = 0,
        owner: Obj | None = None,
        wait_running: bool = True,
        extra_spec: Obj | None = None,
    ) -> Obj:
        """A pod bound to ``node`` (None: left to the scheduler); waits until the stand-in
        runs it unless a script keeps it Pending or ``wait_running`` is False."""
        name = name or f"p-{uuid.uuid4().hex[:8]}"
        container: Obj = {"name": "main", "image": "lab/none:0"}
        if gpus:
            container["resources"] = {"limits": {"nvidia.com/gpu": str(gpus)}}
        spec: Obj = {"containers": [container], **(extra_spec or {})}
        if node:
            spec["nodeName"] = node
        meta: Obj = {"name": name, "labels": labels or {}}
        if owner:
            meta["ownerReferences"] = [owner]
        pod = self.http.post(
            f"/api/v1/namespaces/{namespace}/pods", {"metadata": meta, "spec": spec}
        )
        if wait_running:
            return self.wait_phase(namespace, name, "Running")
        return pod

    def wait_phase(self, namespace: str, name: str, phase: str, timeout: float = 30) -> Obj:
        path = f"/api/v1/namespaces/{namespace}/pods/{name}"

        def ready() -> Obj | None:
            pod = self.http.get(path)
            return pod if (pod.get("status") or {}).get("phase") == phase else None

        return dict(wait_until(ready, timeout, 0.1, f"pod {namespace}/{name} {phase}"))

    def pdb(self, namespace: str, selector: dict[str, str], **spec: Any) -> Obj:
        """A policy/v1 PodDisruptionBudget; ``spec``: minAvailable / maxUnavailable /
        unhealthyPodEvictionPolicy. Waits until the disruption controller computed it."""
        name = f"pdb-{uuid.uuid4().hex[:6]}"
        self.http.post(
            f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets",
            {"metadata": {"name": name}, "spec": {"selector": {"matchLabels": selector}, **spec}},
        )
        path = f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets/{name}"

        def computed() -> Obj | None:
            pdb = self.http.get(path)
            st = pdb.get("status") or {}
            gen = (pdb.get("metadata") or {}).get("generation")
            return pdb if st.get("observedGeneration") == gen else None

        return dict(wait_until(computed, 30, 0.1, f"PDB {namespace}/{name} computed"))

    def apply_yaml(self, docs: list[Obj], manager: str = "lab", dry_run: bool = False) -> None:
        """Server-side apply each object (CRDs, the shipped manifests)."""
        for doc in docs:
            self.http.apply(object_path(self.http, doc), doc, manager, dry_run)

    def install_crd(self, file: Path) -> list[str]:
        """Apply a CRD file and wait until every CRD in it is Established."""
        import yaml

        docs = [d for d in yaml.safe_load_all(file.read_text()) if d]
        self.apply_yaml(docs)
        names = [d["metadata"]["name"] for d in docs]
        for n in names:
            path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{n}"

            def established(path: str = path) -> bool:
                crd = self.http.get(path)
                conds = (crd.get("status") or {}).get("conditions") or []
                return any(c["type"] == "Established" and c["status"] == "True" for c in conds)

            wait_until(established, 30, 0.1, f"CRD {n} established")
        return names

    def service_account_token(
        self, namespace: str, name: str, rules: list[Obj] | None = None
    ) -> str:
        """A ServiceAccount's token (TokenRequest); with ``rules``, a Role and RoleBinding in
        ``namespace`` granting them first."""
        if not self.http.get_or_none(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"):
            self.http.post(
                f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}}
            )
        if rules is not None:
            rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
            self.http.apply(
                f"{rbac}/roles/{name}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "Role",
                    "metadata": {"name": name, "namespace": namespace},
                    "rules": rules,
                },
            )
            self.http.apply(
                f"{rbac}/rolebindings/{name}",
                {
                    "apiVersion": "rbac.authorization.k8s.io/v1",
                    "kind": "RoleBinding",
                    "metadata": {"name": name, "namespace": namespace},
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "Role",
                        "name": name,
                    },
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
                },
            )
        tr = self.http.post(
            f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": 3600}},
        )  # fmt: skip
        return str(tr["status"]["token"])

    # ----- audit
    def audit_mark(self) -> int:
        """The audit log's current end: ``audit_since(mark)`` reads what came after."""
        path = self.dir / "audit.log"
        return path.stat().st_size if path.exists() else 0

    def audit_since(self, mark: int, user: str | None = None) -> list[Obj]:
        """Audit events (Metadata level) after ``mark``, of ``user`` when given. The server
        writes them asynchronously (batch backend off: ``--audit-log-mode=blocking``)."""
        path = self.dir / "audit.log"
        with path.open("rb") as f:
            f.seek(mark)
            lines = f.read().splitlines()
        events = [json.loads(line) for line in lines if line.strip()]
        if user is not None:
            events = [e for e in events if (e.get("user") or {}).get("username") == user]
        return events

    # ----- scheduler
    def start_scheduler(self) -> None:
        if "kube-scheduler" in self.procs:
            return
        kc = self.kubeconfig(name="scheduler")
        self.procs["kube-scheduler"] = _spawn(
            self.dir,
            "kube-scheduler",
            [
                kube_binary("kube-scheduler", self.version),
                f"--kubeconfig={kc}",
                f"--authentication-kubeconfig={kc}",
                f"--authorization-kubeconfig={kc}",
                "--leader-elect=false",
                "--bind-address=127.0.0.1",
                f"--secure-port={free_port()}",
                "--v=1",
            ],
        )

    def stop(self) -> None:
        """Kill the control plane outright: its state is a scratch directory that nobody reads
        again. A graceful stop cost 17 s per lab (etcd takes 7 s; kube-apiserver, its etcd
        gone, does not exit within 30 s of SIGTERM), about 20 labs a suite."""
        self.kubelet.stop()
        for p in self.procs.values():
            p.kill()
        for p in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(10)


_CORE = {"Namespace": "namespaces", "Node": "nodes", "PersistentVolume": "persistentvolumes"}


def object_path(http: Http, doc: Obj) -> str:
    """The REST path of ``doc`` (by discovery of its kind's resource name)."""
    api_version, kind = doc["apiVersion"], doc["kind"]
    meta = doc["metadata"]
    base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
    resources = http.get(base).get("resources") or []
    match = [r for r in resources if r.get("kind") == kind and "/" not in r["name"]]
    if not match:
        raise LookupError(f"{api_version} {kind} is not served")
    r = match[0]
    ns = meta.get("namespace")
    if r.get("namespaced"):
        return f"{base}/namespaces/{ns or 'default'}/{r['name']}/{meta['name']}"
    return f"{base}/{r['name']}/{meta['name']}"


def _spawn(d: Path, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
    log = open(d / f"{name}.log", "ab")  # noqa: SIM115 - owned by the process
    return subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def _tail(path: Path, n: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def _wait_daemon(
    d: Path,
    procs: dict[str, subprocess.Popen[bytes]],
    name: str,
    ready: Callable[[], bool],
    what: str,
    timeout: float = 90,
) -> None:
    """Poll ``ready`` until true; a daemon that exits (any of ``procs``) or a timeout raises
    with the tail of that daemon's log."""
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        for n, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{n} exited ({p.returncode}):\n{_tail(d / f'{n}.log')}")
        try:
            if ready():
                return
        except Exception as e:  # still starting
            last = e
        time.sleep(0.2)
    raise RuntimeError(f"{name}: no {what} in {timeout} s ({last!r}):\n{_tail(d / f'{name}.log')}")


def start_lab(
    version: str | None = None,
    kcm_controllers: str | None = None,
    apiserver_args: list[str] | None = None,
) -> KubeLab:
    """Start a control plane of ``version`` (default: versions.env's KUBE_VERSION);
    ``apiserver_args``: more flags (feature gates, runtime-config)."""
    version = version or versions()["KUBE_VERSION"]
    apiserver = kube_binary("kube-apiserver", version)
    kcm = kube_binary("kube-controller-manager", version)
    etcd = sid_binary("etcd")
    d = world_readable_tmpdir("gpuwarden-kube-")
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        return _start(d, version, apiserver, kcm, etcd, procs, kcm_controllers, apiserver_args)
    except BaseException:
        for p in procs.values():
            p.kill()
        raise


def _start(
    d: Path,
    version: str,
    apiserver: str,
    kcm: str,
    etcd: str,
    procs: dict[str, subprocess.Popen[bytes]],
    kcm_controllers: str | None,
    apiserver_args: list[str] | None,
) -> KubeLab:
    from tests.realcomp import self_signed_cert

    subprocess.run(
        ["openssl", "genrsa", "-out", str(d / "sa.key"), "2048"], check=True, capture_output=True
    )
    subprocess.run(
        ["openssl", "rsa", "-in", str(d / "sa.key"), "-pubout", "-out", str(d / "sa.pub")],
        check=True,
        capture_output=True,
    )
    admin_token = uuid.uuid4().hex
    (d / "tokens.csv").write_text(f'{admin_token},{ADMIN_USER},{ADMIN_USER},"system:masters"\n')
    (d / "audit-policy.yaml").write_text(AUDIT_POLICY)
    (d / "certs").mkdir()
    ep, pp, ap = free_port(), free_port(), free_port()
    data = Path("/dev/shm") if Path("/dev/shm").is_dir() else d
    etcd_dir = Path(world_readable_tmpdir("gpuwarden-etcd-") if data == d else data)
    etcd_data = etcd_dir / f"gpuwarden-etcd-{uuid.uuid4().hex[:8]}"
    procs["etcd"] = _spawn(
        d,
        "etcd",
        [
            etcd,
            f"--data-dir={etcd_data}",
            f"--listen-client-urls=http://127.0.0.1:{ep}",
            f"--advertise-client-urls=http://127.0.0.1:{ep}",
            f"--listen-peer-urls=http://127.0.0.1:{pp}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{pp}",
            f"--initial-cluster=default=http://127.0.0.1:{pp}",
            "--unsafe-no-fsync",
            "--log-level=warn",
        ],
    )
    (d / "etcd-data").write_text(str(etcd_data))
    procs["kube-apiserver"] = _spawn(
        d,
        "kube-apiserver",
        [
            apiserver,
            f"--etcd-servers=http://127.0.0.1:{ep}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            # the `kubernetes` Service's endpoints may not be loopback; nothing here needs them
            "--endpoint-reconciler-type=none",
            f"--secure-port={ap}",
            f"--cert-dir={d / 'certs'}",
            f"--token-auth-file={d / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            "--service-account-issuer=https://kubernetes.default.svc",
            f"--service-account-key-file={d / 'sa.pub'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            f"--audit-policy-file={d / 'audit-policy.yaml'}",
            f"--audit-log-path={d / 'audit.log'}",
            "--audit-log-mode=blocking",
            "--audit-log-format=json",
            "--kubelet-preferred-address-types=InternalIP",
            "--profiling=false",
            "--v=1",
            *(apiserver_args or []),
        ],
    )
    url = f"https://127.0.0.1:{ap}"
    crt = d / "certs" / "apiserver.crt"

    def readyz() -> bool:
        if not crt.exists():
            return False
        return Http(url, admin_token, crt).get("/readyz").get("text") == "ok"

    _wait_daemon(d, procs, "kube-apiserver", readyz, "/readyz")
    http = Http(url, admin_token, crt)
    kubelet_cert = self_signed_cert(d)
    kubelet = KubeletStandIn(http, set(), free_port(), kubelet_cert)
    lab = KubeLab(version, url, d, crt, admin_token, http, kubelet, procs)
    kubelet.nodes = lab.nodes
    kc = lab.kubeconfig(name="controller-manager")
    procs["kube-controller-manager"] = _spawn(
        d,
        "kube-controller-manager",
        [
            kcm,
            f"--kubeconfig={kc}",
            f"--authentication-kubeconfig={kc}",
            f"--authorization-kubeconfig={kc}",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}",
            "--controllers="
            + (kcm_controllers or "*,-node-lifecycle-controller,-node-ipam-controller"),
            f"--service-account-private-key-file={d / 'sa.key'}",
            f"--root-ca-file={crt}",
            "--use-service-account-credentials=false",
            "--concurrent-gc-syncs=5",
            "--v=1",
        ],
    )

    def kcm_up() -> bool:
        return http.get_or_none("/api/v1/namespaces/default/serviceaccounts/default") is not None

    _wait_daemon(d, procs, "kube-controller-manager", kcm_up, "the default ServiceAccount")
    kubelet.start()
    return lab


def cleanup(lab: KubeLab) -> None:
    lab.stop()
    with contextlib.suppress(OSError):
        shutil.rmtree(Path((lab.dir / "etcd-data").read_text()), ignore_errors=True)
    shutil.rmtree(lab.dir, ignore_errors=True)
