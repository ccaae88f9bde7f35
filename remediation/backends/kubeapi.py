"""The Kubernetes API seam: the few calls the Kubernetes backend needs, as plain dicts.

``OfficialKubeApi`` wraps the official ``kubernetes`` client (CoreV1Api, responses read as
raw JSON so that no model validation stands between us and what the server said). Tests
run it against the kmock emulator over real HTTP.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

Obj = dict[str, Any]


class KubeApi(Protocol):
    def list_nodes(self) -> list[Obj]: ...

    def read_node(self, name: str) -> Obj | None: ...

    def patch_node(self, name: str, body: Obj | list[Obj]) -> None: ...

    def list_pods(self, node: str | None) -> list[Obj]:
        """Pods on ``node`` (every pod when None)."""
        ...

    def read_pod(self, namespace: str, name: str) -> Obj | None: ...

    def patch_pod(self, namespace: str, name: str, body: Obj) -> None: ...

    def evict(self, namespace: str, name: str) -> int:
        """POST a policy/v1 Eviction; returns the HTTP status (429: a PDB blocks it)."""
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
    def from_config(cls, host: str | None = None) -> OfficialKubeApi:
        import kubernetes

        if host is not None:
            cfg = kubernetes.client.Configuration()
            cfg.host = host
            return cls(kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(cfg)))
        try:
            kubernetes.config.load_incluster_config()
        except kubernetes.config.ConfigException:
            kubernetes.config.load_kube_config()
        return cls(kubernetes.client.CoreV1Api())

    def _raw(self, fn: Any, *args: Any, **kw: Any) -> Obj:
        resp = fn(*args, _preload_content=False, _request_timeout=self.timeout, **kw)
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

    def evict(self, namespace: str, name: str) -> int:
        from kubernetes.client import ApiException, V1Eviction, V1ObjectMeta

        body = V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=V1ObjectMeta(name=name, namespace=namespace),
        )
        try:
            self.core.create_namespaced_pod_eviction(
                name, namespace, body, _preload_content=False, _request_timeout=self.timeout
            )
        except ApiException as e:
            return int(e.status)
        return 201

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
            self.core.delete_namespaced_pod(
                name, namespace, _preload_content=False, _request_timeout=self.timeout
            )
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
        resp = self.core.read_namespaced_pod_log(
            name, namespace, _preload_content=False, _request_timeout=self.timeout
        )
        return bytes(resp.data or b"").decode(errors="replace")
