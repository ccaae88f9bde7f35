"""The Kubernetes API seam: the few calls the Kubernetes backend needs, as plain dicts.

``OfficialKubeApi`` wraps the official ``kubernetes`` client (CoreV1Api, responses read as
raw JSON so that no model validation stands between us and what the server said). Tests
run it against the kmock emulator over real HTTP.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from remediation.backends.base import Unavailable

Obj = dict[str, Any]
FIELD_MANAGER = "gpuwarden"  # the field manager of every status write (nodes/status)
RETRIES = 1  # resends of one call after a connection error or a GET's read timeout


def bounded_retry(retries: int) -> Any:
    """urllib3's Retry for the API client: connection errors and reads of idempotent calls
    (urllib3 never re-reads a POST or PATCH) at most ``retries`` times, no pause between,
    HTTP statuses returned as they are (a 429 or 5xx is the caller's to judge)."""
    from urllib3.util.retry import Retry

    if retries < 0:
        raise ValueError(f"Kubernetes client retries must be >= 0, got {retries}")
    return Retry(
        total=retries, connect=retries, read=retries, status=0, other=0, redirect=0,
        backoff_factor=0, raise_on_status=False,
    )  # fmt: skip


@dataclass(frozen=True)
class Eviction:
    """The server's answer to one policy/v1 Eviction: the HTTP status and, when refused, the
    Status body's ``reason``, ``message`` and the messages of its ``details.causes`` (the
    budget's name and why: "The disruption budget train is still being processed by the
    server." when no disruption controller computed its status)."""

    status: int
    reason: str = ""
    message: str = ""
    causes: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        """The pod is gone or going (201 evicted, 200 deleted, 404 already gone)."""
        return self.status in (200, 201, 404)

    def why(self) -> str:
        """One line for the log and the node API: status, reason, message, causes."""
        text = " ".join(t.strip() for t in (self.message, *self.causes) if t.strip())
        return f"HTTP {self.status} {self.reason}".rstrip() + (f": {text}" if text else "")

    @classmethod
    def from_status(cls, status: int, body: Any) -> Eviction:
        """From an answer's HTTP status and body (a metav1.Status, or anything: a proxy's
        HTML page is kept as the message, cut short)."""
        raw = body.decode(errors="replace") if isinstance(body, bytes) else str(body or "")
        try:
            st = json.loads(raw) if raw else {}
        except ValueError:
            return cls(status, "", raw.strip()[:300])
        if not isinstance(st, dict):
            return cls(status, "", raw.strip()[:300])
        causes = ((st.get("details") or {}).get("causes")) or []
        return cls(
            status,
            str(st.get("reason") or ""),
            str(st.get("message") or ""),
            tuple(
                str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("message")
            ),
        )


class KubeApi(Protocol):
    def list_nodes(self) -> list[Obj]: ...

    def read_node(self, name: str) -> Obj | None: ...

    def patch_node(self, name: str, body: Obj | list[Obj]) -> None: ...

    def list_pods(self, node: str | None) -> list[Obj]:
        """Pods on ``node`` (every pod when None)."""
        ...

    def read_pod(self, namespace: str, name: str) -> Obj | None: ...

    def patch_pod(self, namespace: str, name: str, body: Obj) -> None: ...

    def evict(self, namespace: str, name: str) -> Eviction:
        """POST a policy/v1 Eviction; the answer with the Status body's reason and message
        (429: a PodDisruptionBudget blocks it now, or its status is not computed yet)."""
        ...

    def served_versions(self, group: str, plural: str) -> list[str]:
        """API discovery: the versions of ``group`` whose resource list has ``plural``, in
        the server's order ([] when the group or the resource is not served)."""
        ...

    def patch_node_status(self, name: str, body: Obj) -> None:
        """Strategic-merge patch of the node's status subresource (conditions merge by
        type: the kubelet's stay), as field manager ``gpuwarden``."""
        ...

    # core/v1 Events (a decision about a node, as ``kubectl describe node`` shows it)
    def create_event(self, namespace: str, body: Obj) -> int:
        """Create an Event; returns the HTTP status."""
        ...

    def patch_event(self, namespace: str, name: str, body: Obj) -> int:
        """Merge-patch an Event (its count and lastTimestamp); returns the HTTP status
        (404: it expired, create a new one)."""
        ...

    def list_custom(self, group: str, version: str, plural: str) -> list[Obj]:
        """Custom objects in every namespace; [] when the API is not installed (404)."""
        ...

    def create_custom(
        self, group: str, version: str, namespace: str, plural: str, body: Obj
    ) -> int:
        """Create a custom object; returns the HTTP status (409: it exists)."""
        ...

    def delete_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> None: ...

    def delete_pod(self, namespace: str, name: str) -> int:
        """DELETE a pod (gang restarts only); returns the HTTP status (404: already gone)."""
        ...

    # cluster-scoped custom objects: DRA DeviceTaintRules (one GPU out, not the node)
    def create_cluster_custom(self, group: str, version: str, plural: str, body: Obj) -> int:
        """Create a cluster-scoped object; returns the HTTP status (409: it exists)."""
        ...

    def read_cluster_custom(self, group: str, version: str, plural: str, name: str) -> Obj | None:
        """One cluster-scoped object; None when it does not exist (404)."""
        ...

    def patch_cluster_custom(
        self, group: str, version: str, plural: str, name: str, body: Obj
    ) -> int:
        """JSON merge patch; returns the HTTP status (409: its ``resourceVersion`` is stale)."""
        ...

    def delete_cluster_custom(
        self, group: str, version: str, plural: str, name: str, resource_version: str = ""
    ) -> None:
        """Delete (404: already gone); ``resource_version``: only that version of it (409 if
        it changed since)."""
        ...

    # batch/v1 Jobs and pod logs: validation suites run as a Job pinned to the node.
    def create_job(self, namespace: str, body: Obj) -> int: ...

    def read_job(self, namespace: str, name: str) -> Obj | None: ...

    def delete_job(self, namespace: str, name: str) -> None: ...

    def list_pods_by_label(self, namespace: str, selector: str) -> list[Obj]: ...

    def read_pod_log(self, namespace: str, name: str) -> str: ...


class OfficialKubeApi:
    def __init__(self, core: Any, timeout: float = 10.0) -> None:
        self.core, self.timeout = core, timeout

    @classmethod
    def from_config(
        cls, host: str | None = None, timeout: float = 10.0, retries: int = RETRIES
    ) -> OfficialKubeApi:
        """The client of the pod's service account, else of $KUBECONFIG, bounded: each call
        gives up after ``timeout`` seconds of silence, and is retried at most ``retries``
        times (a connection refused or reset, or a GET whose answer timed out; a write that
        may have reached the server is never resent). The official client's default is
        urllib3's three retries, so one GET to a stalled API server held a worker for four
        timeouts; at most ``(retries + 1) * timeout`` now (tests/remediation/
        test_kube_service_real.py stops the real API server to show it)."""
        import kubernetes

        from common.kubeconfig import client_configuration

        if host is not None:
            cfg = kubernetes.client.Configuration()
            cfg.host = host
        else:
            cfg = client_configuration()
        cfg.retries = bounded_retry(retries)
        api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg))
        return cls(api, timeout)

    def _send(
        self, fn: Any, *args: Any, what: str = "", preload: bool | None = False, **kw: Any
    ) -> Any:
        """One call of the official client, bounded by the timeout; no answer (a timeout, a
        refused or reset connection, after the one retry) is ``Unavailable``, so the
        caller can tell a server that did not answer from one that said no."""
        import urllib3

        if preload is not None:  # None: ApiClient.call_api, which takes no such flag
            kw["_preload_content"] = preload
        try:
            return fn(*args, _request_timeout=self.timeout, **kw)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            cause = getattr(e, "reason", None) or e
            what = what or getattr(fn, "__name__", "call")
            raise Unavailable(
                f"Kubernetes API server did not answer {what} within {self.timeout:g} s: "
                f"{type(cause).__name__}: {cause}"
            ) from None

    def _raw(self, fn: Any, *args: Any, **kw: Any) -> Obj:
        resp = self._send(fn, *args, **kw)
        return dict(json.loads(resp.data or b"{}"))

    def _or_none(self, fn: Any, *args: Any) -> Obj | None:
        from kubernetes.client import ApiException

        try:
            return self._raw(fn, *args)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def list_nodes(self) -> list[Obj]:
        return list(self._raw(self.core.list_node).get("items") or [])

    def read_node(self, name: str) -> Obj | None:
        return self._or_none(self.core.read_node, name)

    def patch_node(self, name: str, body: Obj | list[Obj]) -> None:
        self._raw(self.core.patch_node, name, body)

    def list_pods(self, node: str | None) -> list[Obj]:
        selector = {} if node is None else {"field_selector": f"spec.nodeName={node}"}
        items = self._raw(self.core.list_pod_for_all_namespaces, **selector).get("items") or []
        if node is None:
            return list(items)
        # Filtered here as well: a selector the server ignores must not widen the blast radius.
        return [p for p in items if (p.get("spec") or {}).get("nodeName") == node]

    def read_pod(self, namespace: str, name: str) -> Obj | None:
        return self._or_none(self.core.read_namespaced_pod, name, namespace)

    def patch_pod(self, namespace: str, name: str, body: Obj) -> None:
        self._raw(self.core.patch_namespaced_pod, name, namespace, body)

    def evict(self, namespace: str, name: str) -> Eviction:
        from kubernetes.client import ApiException, V1Eviction, V1ObjectMeta

        body = V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=V1ObjectMeta(name=name, namespace=namespace),
        )
        try:
            self._send(self.core.create_namespaced_pod_eviction, name, namespace, body)
        except ApiException as e:
            return Eviction.from_status(int(e.status), e.body)
        return Eviction(201)

    def _get(self, path: str) -> Obj | None:
        """GET a path of the API (discovery); None on 404."""
        client = self.core.api_client
        method, url, headers, _, _ = client.param_serialize(
            "GET", path, header_params={"Accept": "application/json"},
            auth_settings=["BearerToken"],
        )  # fmt: skip
        resp = self._send(client.call_api, method, url, headers, what=f"GET {path}", preload=None)
        resp.read()
        if resp.status == 404:
            return None
        if not 200 <= resp.status < 300:
            from kubernetes.client import ApiException

            raise ApiException(status=resp.status, reason=f"GET {path}: {resp.data[:200]!r}")
        return dict(json.loads(resp.data or b"{}"))

    def served_versions(self, group: str, plural: str) -> list[str]:
        found = self._get(f"/apis/{group}") or {}
        out = []
        for v in found.get("versions") or []:
            version = str(v.get("version") or "")
            listing = self._get(f"/apis/{group}/{version}") if version else None
            if any(r.get("name") == plural for r in (listing or {}).get("resources") or []):
                out.append(version)
        return out

    def patch_node_status(self, name: str, body: Obj) -> None:
        self._raw(self.core.patch_node_status, name, body, field_manager=FIELD_MANAGER,
                  _content_type="application/strategic-merge-patch+json")  # fmt: skip

    def create_event(self, namespace: str, body: Obj) -> int:
        from kubernetes.client import ApiException

        try:
            self._raw(self.core.create_namespaced_event, namespace, body,
                      field_manager=FIELD_MANAGER)  # fmt: skip
        except ApiException as e:
            return int(e.status)
        return 201

    def patch_event(self, namespace: str, name: str, body: Obj) -> int:
        from kubernetes.client import ApiException

        try:
            self._raw(self.core.patch_namespaced_event, name, namespace, body,
                      field_manager=FIELD_MANAGER,
                      _content_type="application/merge-patch+json")  # fmt: skip
        except ApiException as e:
            return int(e.status)
        return 200

    # custom resources (the reboot operator's, remediation/backends/noderemediation.py)
    def _custom(self) -> Any:
        from kubernetes.client import CustomObjectsApi

        return CustomObjectsApi(self.core.api_client)

    def list_custom(self, group: str, version: str, plural: str) -> list[Obj]:
        from kubernetes.client import ApiException

        try:
            body = self._raw(self._custom().list_cluster_custom_object, group, version, plural)
        except ApiException as e:
            if e.status == 404:
                return []
            raise
        return list(body.get("items") or [])

    def create_custom(
        self, group: str, version: str, namespace: str, plural: str, body: Obj
    ) -> int:
        from kubernetes.client import ApiException

        try:
            self._raw(self._custom().create_namespaced_custom_object, group, version, namespace,
                      plural, body)  # fmt: skip
        except ApiException as e:
            return int(e.status)
        return 201

    def delete_custom(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> None:
        from kubernetes.client import ApiException

        try:
            self._raw(self._custom().delete_namespaced_custom_object, group, version, namespace,
                      plural, name)  # fmt: skip
        except ApiException as e:
            if e.status != 404:
                raise

    def create_cluster_custom(self, group: str, version: str, plural: str, body: Obj) -> int:
        from kubernetes.client import ApiException

        try:
            self._raw(self._custom().create_cluster_custom_object, group, version, plural, body)
        except ApiException as e:
            return int(e.status)
        return 201

    def read_cluster_custom(self, group: str, version: str, plural: str, name: str) -> Obj | None:
        return self._or_none(self._custom().get_cluster_custom_object, group, version, plural,
                             name)  # fmt: skip

    def patch_cluster_custom(
        self, group: str, version: str, plural: str, name: str, body: Obj
    ) -> int:
        from kubernetes.client import ApiException

        try:
            self._raw(self._custom().patch_cluster_custom_object, group, version, plural, name,
                      body, _content_type="application/merge-patch+json")  # fmt: skip
        except ApiException as e:
            return int(e.status)
        return 200

    def delete_cluster_custom(
        self, group: str, version: str, plural: str, name: str, resource_version: str = ""
    ) -> None:
        from kubernetes.client import ApiException, V1DeleteOptions, V1Preconditions

        pre = V1Preconditions(resource_version=resource_version) if resource_version else None
        try:
            self._raw(self._custom().delete_cluster_custom_object, group, version, plural, name,
                      body=V1DeleteOptions(preconditions=pre))  # fmt: skip
        except ApiException as e:
            if e.status != 404:
                raise

    def delete_pod(self, namespace: str, name: str) -> int:
        from kubernetes.client import ApiException

        try:
            self._send(self.core.delete_namespaced_pod, name, namespace)
        except ApiException as e:
            return int(e.status)
        return 200

    def _batch(self) -> Any:
        from kubernetes.client import BatchV1Api

        return BatchV1Api(self.core.api_client)

    def create_job(self, namespace: str, body: Obj) -> int:
        from kubernetes.client import ApiException

        try:
            self._raw(self._batch().create_namespaced_job, namespace, body)
        except ApiException as e:
            return int(e.status)
        return 201

    def dry_run_create_job(self, namespace: str, body: Obj) -> tuple[int, str]:
        """Create ``body`` with dryRun=All: nothing is stored, but the namespace, RBAC and
        admission are checked as a real create would be. (status, the server's message)."""
        from kubernetes.client import ApiException

        try:
            self._raw(self._batch().create_namespaced_job, namespace, body, dry_run="All")
        except ApiException as e:
            try:
                message = str(json.loads(e.body or b"{}").get("message") or e.reason)
            except ValueError:
                message = str(e.reason)
            return int(e.status), message
        return 201, ""

    def read_job(self, namespace: str, name: str) -> Obj | None:
        return self._or_none(self._batch().read_namespaced_job, name, namespace)

    def delete_job(self, namespace: str, name: str) -> None:
        from kubernetes.client import ApiException

        try:
            self._raw(
                self._batch().delete_namespaced_job, name, namespace,
                propagation_policy="Background",
            )  # fmt: skip
        except ApiException as e:
            if e.status != 404:
                raise

    def list_pods_by_label(self, namespace: str, selector: str) -> list[Obj]:
        raw = self._raw(self.core.list_namespaced_pod, namespace, label_selector=selector)
        return list(raw.get("items") or [])

    def read_pod_log(self, namespace: str, name: str) -> str:
        resp = self._send(self.core.read_namespaced_pod_log, name, namespace)
        return bytes(resp.data or b"").decode(errors="replace")
