"""The remediation lease as a Kubernetes Lease (coordination.k8s.io/v1), the API server's own
leader-election object (kube-scheduler's and kube-controller-manager's).

One Lease, ``gpuwarden-remediation`` by default, in the service's namespace: ``holderIdentity``
the leader (absent once released), ``leaseDurationSeconds`` its term, ``renewTime`` and
``acquireTime`` for ``kubectl get lease`` (never read back: terms run on each reader's own
clock, :mod:`remediation.leader.elector`). The version is the object's ``resourceVersion``:
every write is a create or a replace naming it, so a lost race is 409 Conflict. A renewal is
one GET and one PUT (the PUT built from the object the GET returned).

RBAC: get, create, update on ``leases`` in that namespace.
"""

from __future__ import annotations

import datetime as dt
import math
from typing import Any

from remediation.leader.elector import Record


def _micro(when: dt.datetime) -> str:
    """A MicroTime the API server takes (exactly six fraction digits)."""
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubeLeaseStore:
    def __init__(self, api: Any, namespace: str, name: str, timeout: float = 10.0) -> None:
        """``api``: a ``kubernetes.client.CoordinationV1Api``; ``timeout``: each call's."""
        self.api, self.namespace, self.name, self.timeout = api, namespace, name, timeout
        self._last: Any = None  # the object the last read returned

    @classmethod
    def from_config(cls, namespace: str, name: str, timeout: float = 10.0) -> KubeLeaseStore:
        """The pod's service account, else ``$KUBECONFIG``."""
        import kubernetes

        from common.kubeconfig import client_configuration
        from remediation.backends.kubeapi import bounded_retry

        cfg = client_configuration()
        cfg.retries = bounded_retry(0)  # a renewal is tried again on the next period instead
        api = kubernetes.client.CoordinationV1Api(kubernetes.client.ApiClient(cfg))
        return cls(api, namespace, name, timeout)

    def describe(self) -> str:
        return f"Lease {self.namespace}/{self.name}"

    def _get(self) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.read_namespaced_lease(
                self.name, self.namespace, _request_timeout=self.timeout
            )
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def read(self) -> Record | None:
        lease = self._last = self._get()
        if lease is None:
            return None
        spec = lease.spec
        return Record(
            spec.holder_identity or "",
            str(lease.metadata.resource_version),
            float(spec.lease_duration_seconds or 0),
        )

    def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
        from kubernetes.client.exceptions import ApiException

        now = _micro(dt.datetime.now(dt.UTC))
        spec: dict[str, Any] = {
            "holderIdentity": holder or None,
            "leaseDurationSeconds": math.ceil(lease_s),
            "renewTime": now,
        }
        meta: dict[str, Any] = {"name": self.name, "labels": {"gpuwarden.io/role": "remediation"}}
        try:
            if expect is None:
                spec |= {"acquireTime": now, "leaseTransitions": 0}
                body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                        "metadata": meta, "spec": spec}  # fmt: skip
                made = self.api.create_namespaced_lease(
                    self.namespace, body, _request_timeout=self.timeout
                )
                return str(made.metadata.resource_version)
            old = self._last
            if old is None or str(old.metadata.resource_version) != expect:
                old = self._get()  # not the object last read: read it for its history
            if old is None or str(old.metadata.resource_version) != expect:
                return None
            transitions = old.spec.lease_transitions or 0
            if holder and holder != (old.spec.holder_identity or ""):
                spec |= {"acquireTime": now, "leaseTransitions": transitions + 1}
            else:
                acquired = old.spec.acquire_time
                spec |= {"leaseTransitions": transitions}
                if isinstance(acquired, dt.datetime):
                    spec["acquireTime"] = _micro(acquired)
            meta["resourceVersion"] = expect
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": meta, "spec": spec}  # fmt: skip
            done = self.api.replace_namespaced_lease(
                self.name, self.namespace, body, _request_timeout=self.timeout
            )
            return str(done.metadata.resource_version)
        except ApiException as e:
            if e.status == 409:  # another instance wrote first
                return None
            raise
