"""Membership on Kubernetes: Lease objects (coordination.k8s.io/v1), the API server's own
leader-election primitive (as kube-scheduler and kube-controller-manager use it).

Edge of the sharded analyzer; the same :class:`~analyzer.replicas.membership.Membership`
semantics as the bare-metal :mod:`analyzer.replicas.filedir`:

- one Lease per replica, ``<prefix>-<replica>`` (label ``gpuwarden.io/role: replica``):
  ``holderIdentity`` the replica, ``renewTime`` its heartbeat, annotation
  ``gpuwarden.io/cycle`` the cycle it is ready for;
- one leader Lease, ``<prefix>-leader``: ``holderIdentity`` the leader, ``renewTime`` /
  ``leaseDurationSeconds`` its term (exact end in annotation ``gpuwarden.io/until``), and
  the last plans in annotation ``gpuwarden.io/plans`` (JSON). Every change is a replace with
  the read ``resourceVersion``: a replica that lost a race gets 409 Conflict, never a
  second leader or a second plan for a cycle.

RBAC (deploy/): get, list, create, update, patch, delete on ``leases`` in the analyzer's
namespace.
"""

from __future__ import annotations

import datetime as dt
import json
import math
from typing import Any

from analyzer.replicas.membership import Beat, Plan

ROLE = "gpuwarden.io/role"
CYCLE = "gpuwarden.io/cycle"
UNTIL = "gpuwarden.io/until"
PLANS = "gpuwarden.io/plans"
KEEP_PLANS = 4


def _micro(t: float | dt.datetime) -> dt.datetime:
    """A MicroTime the API server can parse: it wants exactly six fraction digits, and the
    official client writes datetimes with ``isoformat``, which drops a zero fraction
    (``...T08:00:00+00:00`` is refused with 400), so a whole second is nudged by 1 µs."""
    when = t if isinstance(t, dt.datetime) else dt.datetime.fromtimestamp(t, dt.UTC)
    return when if when.microsecond else when.replace(microsecond=1)


class LeaseMembership:
    def __init__(self, api: Any, namespace: str, prefix: str = "gpuwarden-analyzer") -> None:
        """``api``: a ``kubernetes.client.CoordinationV1Api``."""
        self.api, self.namespace, self.prefix = api, namespace, prefix
        self.leader_name = f"{prefix}-leader"

    @classmethod
    def from_config(cls, namespace: str, prefix: str = "gpuwarden-analyzer",
                    timeout: float = 10.0) -> LeaseMembership:  # fmt: skip
        """The pod's service account, else ``$KUBECONFIG``."""
        import kubernetes

        from common.kubeconfig import client_configuration

        api = kubernetes.client.CoordinationV1Api(
            kubernetes.client.ApiClient(client_configuration())
        )
        return cls(api, namespace, prefix)

    # ----- heartbeats
    def heartbeat(self, replica: str, cycle: int, now: float) -> None:
        from kubernetes.client.exceptions import ApiException

        name = f"{self.prefix}-{replica}"
        body = {"metadata": {"annotations": {CYCLE: str(cycle)}},
                "spec": {"renewTime": _micro(now).isoformat()}}  # fmt: skip
        try:
            self.api.patch_namespaced_lease(name, self.namespace, body)
        except ApiException as e:
            if e.status != 404:
                raise
            self.api.create_namespaced_lease(self.namespace, self._lease(name, replica, cycle, now))

    def _lease(self, name: str, replica: str, cycle: int, now: float) -> dict[str, Any]:
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": name, "labels": {ROLE: "replica"},
                             "annotations": {CYCLE: str(cycle)}},
                "spec": {"holderIdentity": replica, "renewTime": _micro(now),
                         "acquireTime": _micro(now)}}  # fmt: skip

    def beats(self) -> list[Beat]:
        got = self.api.list_namespaced_lease(self.namespace, label_selector=f"{ROLE}=replica")
        out = []
        for lease in got.items:
            ann = lease.metadata.annotations or {}
            renew = lease.spec.renew_time
            if lease.spec.holder_identity and CYCLE in ann and renew is not None:
                try:
                    cycle = int(ann[CYCLE])
                except ValueError:
                    continue
                at = renew.timestamp() if isinstance(renew, dt.datetime) else 0.0
                out.append(Beat(lease.spec.holder_identity, cycle, at))
        return sorted(out, key=lambda b: b.replica)

    def leave(self, replica: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.api.delete_namespaced_lease(f"{self.prefix}-{replica}", self.namespace)
        except ApiException as e:
            if e.status != 404:
                raise
        lease = self._leader()
        if lease is not None and lease.spec.holder_identity == replica:
            lease.spec.holder_identity = None
            lease.metadata.annotations = {**(lease.metadata.annotations or {}), UNTIL: "0"}
            self._replace(lease)

    # ----- the leader lease and its plans
    def _leader(self) -> Any:
        from kubernetes.client.exceptions import ApiException

        try:
            return self.api.read_namespaced_lease(self.leader_name, self.namespace)
        except ApiException as e:
            if e.status == 404:
                return None
            raise

    def _replace(self, lease: Any) -> bool:
        """Write back what was read; False when another replica wrote first (409)."""
        from kubernetes.client.exceptions import ApiException

        for attr in ("renew_time", "acquire_time"):
            value = getattr(lease.spec, attr)
            if isinstance(value, dt.datetime):
                setattr(lease.spec, attr, _micro(value))
        try:
            self.api.replace_namespaced_lease(self.leader_name, self.namespace, lease)
        except ApiException as e:
            if e.status == 409:
                return False
            raise
        return True

    @staticmethod
    def _until(lease: Any) -> float:
        ann = lease.metadata.annotations or {}
        try:
            return float(ann[UNTIL])
        except (KeyError, ValueError):
            renew = lease.spec.renew_time
            if renew is None:
                return 0.0
            return float(renew.timestamp() + (lease.spec.lease_duration_seconds or 0))

    def lead(self, replica: str, now: float, ttl: float) -> bool:
        from kubernetes.client.exceptions import ApiException

        lease = self._leader()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.leader_name, "labels": {ROLE: "leader"},
                                 "annotations": {UNTIL: str(now + ttl), PLANS: "{}"}},
                    "spec": {"holderIdentity": replica, "renewTime": _micro(now),
                             "acquireTime": _micro(now), "leaseTransitions": 0,
                             "leaseDurationSeconds": math.ceil(ttl)}}  # fmt: skip
            try:
                self.api.create_namespaced_lease(self.namespace, body)
            except ApiException as e:
                if e.status == 409:  # another replica created it first
                    return False
                raise
            return True
        holder = lease.spec.holder_identity or ""
        if holder not in ("", replica) and now < self._until(lease):
            return False
        if holder != replica:
            lease.spec.acquire_time = _micro(now)
            lease.spec.lease_transitions = (lease.spec.lease_transitions or 0) + 1
        lease.spec.holder_identity = replica
        lease.spec.renew_time = _micro(now)
        lease.spec.lease_duration_seconds = math.ceil(ttl)
        lease.metadata.annotations = {**(lease.metadata.annotations or {}), UNTIL: str(now + ttl)}
        return self._replace(lease)

    def publish(self, replica: str, plan: Plan, now: float) -> Plan | None:
        lease = self._leader()
        if lease is None or lease.spec.holder_identity != replica or now >= self._until(lease):
            return None
        plans = _plans(lease)
        key = str(plan.cycle)
        if key not in plans:
            plans[key] = {"members": list(plan.members), "leader": plan.leader}
            for old in sorted(plans, key=int)[:-KEEP_PLANS]:
                del plans[old]
            lease.metadata.annotations = {**(lease.metadata.annotations or {}),
                                          PLANS: json.dumps(plans, sort_keys=True)}  # fmt: skip
            if not self._replace(lease):  # someone else wrote: theirs stands
                return self.plan(plan.cycle)
        return _plan(plan.cycle, plans[key])

    def plan(self, cycle: int) -> Plan | None:
        lease = self._leader()
        got = _plans(lease).get(str(cycle)) if lease is not None else None
        return _plan(cycle, got) if isinstance(got, dict) else None


def _plans(lease: Any) -> dict[str, Any]:
    try:
        doc = json.loads((lease.metadata.annotations or {}).get(PLANS, "{}"))
    except ValueError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _plan(cycle: int, doc: dict[str, Any]) -> Plan:
    return Plan(cycle, tuple(doc.get("members", ())), str(doc.get("leader", "")))
