"""The marginal scores exchange on Kubernetes: one ConfigMap per replica.

Edge of the sharded analyzer, the Kubernetes twin of
:class:`analyzer.replicas.exchange.DirectoryExchange` (the same
:class:`~analyzer.replicas.exchange.Exchange` contract). A Lease's annotations hold 256 KB in
all, too little for a replica's scores (a few hundred KB compressed at 12,500 nodes), so each
replica keeps its latest scores in its own ConfigMap ``<prefix>-scores-<replica>``:

- ``binaryData.scores``: the compressed blob of :func:`~analyzer.replicas.exchange.encode`;
- label ``gpuwarden.io/role: scores`` (one list call finds every member's), annotations
  ``gpuwarden.io/replica`` and ``gpuwarden.io/cycle`` (a blob of another cycle is not
  returned for this one).

The leader of a cycle leaves the fleet topology it read (:mod:`analyzer.replicas.sharing`)
in ``<prefix>-topology`` (label ``gpuwarden.io/role: topology``, the same cycle annotation),
found by a list call like the scores (the RBAC grants list, not get). After judging a cycle,
each replica leaves what its detectors remember of its nodes in ``<prefix>-memory-<replica>``
(label ``gpuwarden.io/role: memory``, the same annotations; :mod:`analyzer.replicas.handover`).
It stays when its replica leaves (the replicas that take the nodes over read it next cycle)
and is removed by the readers once it is a few cycles old.

Only its replica writes a scores ConfigMap, and only a cycle's leader the topology, so a put
is a create, or on 409 an unconditional replace. A blob over what a ConfigMap holds (1 MiB of data, less the object's own) is refused
before it is sent. Every API failure is raised as an ``OSError`` with the server's status, so
the replica judges marginal on its part alone that cycle and counts the missing scores, never
a crashed cycle. Members are read at most once a second while a replica waits for them.

RBAC (deploy/): list, create, update and delete on ``configmaps`` in the analyzer's namespace.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from typing import Any

from analyzer.replicas.exchange import KEEP_CYCLES

ROLE = "gpuwarden.io/role"
REPLICA = "gpuwarden.io/replica"
CYCLE = "gpuwarden.io/cycle"
KEY = "scores"
MEMORY = "memory"
TOPOLOGY = "topology"
# a ConfigMap holds 1 MiB of data (the API server refuses more); base64 grows a blob by 4/3
MAX_BLOB = (1024 * 1024 - 16 * 1024) * 3 // 4


class ConfigMapExchange:
    poll_s = 1.0  # how often a waiting replica lists the members' scores
    max_blob: int | None = MAX_BLOB

    def __init__(self, api: Any, namespace: str, prefix: str = "gpuwarden-analyzer") -> None:
        """``api``: a ``kubernetes.client.CoreV1Api``."""
        self.api, self.namespace, self.prefix = api, namespace, prefix

    @classmethod
    def from_config(cls, namespace: str, prefix: str = "gpuwarden-analyzer") -> ConfigMapExchange:
        """The pod's service account, else ``$KUBECONFIG``."""
        import kubernetes

        from common.kubeconfig import client_configuration

        api = kubernetes.client.CoreV1Api(kubernetes.client.ApiClient(client_configuration()))
        return cls(api, namespace, prefix)

    def name(self, replica: str) -> str:
        return f"{self.prefix}-scores-{replica}"

    def memory_name(self, replica: str) -> str:
        return f"{self.prefix}-memory-{replica}"

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        _fits(blob, f"marginal scores of {replica}", "; fewer nodes per replica would fit")
        notes = {REPLICA: replica, CYCLE: str(cycle)}
        self._put(self.name(replica), "scores", notes, KEY, blob, "leaving the marginal scores")

    def get(self, cycle: int) -> dict[str, bytes]:
        def mine(notes: dict[str, str]) -> bool:
            return notes.get(CYCLE) == str(cycle) and bool(notes.get(REPLICA))

        got = self._list("scores", KEY, mine, "reading the marginal scores")
        return {notes[REPLICA]: data for notes, data in got}

    def put_memory(self, cycle: int, replica: str, blob: bytes) -> None:
        _fits(blob, f"detector memory of {replica}")
        notes = {REPLICA: replica, CYCLE: str(cycle)}
        self._put(self.memory_name(replica), "memory", notes, MEMORY, blob,
                  "leaving the detector memory")  # fmt: skip

    def get_memory(self, cycle: int) -> dict[str, bytes]:
        """Every replica's memory of ``cycle``; a departed replica's older than the last few
        cycles is removed on the way (a Deployment's pods are named anew on every rollout,
        so nothing else would)."""
        stale: list[str] = []

        def mine(notes: dict[str, str]) -> bool:
            at = notes.get(CYCLE, "")
            if at.lstrip("-").isdigit() and int(at) < cycle - KEEP_CYCLES and notes.get(REPLICA):
                stale.append(notes[REPLICA])
            return at == str(cycle) and bool(notes.get(REPLICA))

        got = self._list("memory", MEMORY, mine, "reading the detector memory")
        for replica in stale:
            with contextlib.suppress(OSError):  # another replica removed it first, or cannot
                self._delete(self.memory_name(replica), "removing old detector memory")
        return {notes[REPLICA]: data for notes, data in got}

    def put_topology(self, cycle: int, blob: bytes) -> None:
        _fits(blob, "topology")
        name = f"{self.prefix}-topology"
        self._put(name, "topology", {CYCLE: str(cycle)}, TOPOLOGY, blob, "leaving the topology")

    def get_topology(self, cycle: int) -> bytes | None:
        def mine(notes: dict[str, str]) -> bool:
            return notes.get(CYCLE) == str(cycle)

        got = self._list("topology", TOPOLOGY, mine, "reading the topology")
        return got[0][1] if got else None

    def _put(self, name: str, role: str, notes: dict[str, str], key: str, blob: bytes,
             what: str) -> None:  # fmt: skip
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "labels": {ROLE: role}, "annotations": notes},
            "binaryData": {key: base64.b64encode(blob).decode()},
        }
        try:
            self.api.create_namespaced_config_map(self.namespace, body)
        except Exception as e:
            if getattr(e, "status", None) != 409:
                raise _said(what, e) from None
            try:  # one writer: replaced whole, without a resourceVersion
                self.api.replace_namespaced_config_map(name, self.namespace, body)
            except Exception as again:
                raise _said(what, again) from None

    def _list(self, role: str, key: str, want: Callable[[dict[str, str]], bool],
              what: str) -> list[tuple[dict[str, str], bytes]]:  # fmt: skip
        """The annotations and decoded ``key`` of every ConfigMap labelled ``role`` whose
        annotations ``want`` (one not base64 is left out: missing, counted by the role)."""
        try:
            got = self.api.list_namespaced_config_map(
                self.namespace, label_selector=f"{ROLE}={role}"
            )
        except Exception as e:
            raise _said(what, e) from None
        out = []
        for cm in got.items:
            notes = dict(cm.metadata.annotations or {})
            data = (cm.binary_data or {}).get(key)
            if data is None or not want(notes):  # another cycle's is not decoded
                continue
            try:
                out.append((notes, base64.b64decode(data, validate=True)))
            except ValueError:
                continue
        return out

    def leave(self, replica: str) -> None:
        """Remove this replica's scores (it is going away). Its memory stays: the replicas
        that take its nodes over read it next cycle (removed once old, by :meth:`get_memory`)."""
        self._delete(self.name(replica), "removing the marginal scores")

    def _delete(self, name: str, what: str) -> None:
        try:
            self.api.delete_namespaced_config_map(name, self.namespace)
        except Exception as e:
            if getattr(e, "status", None) != 404:
                raise _said(what, e) from None


def _fits(blob: bytes, what: str, hint: str = "") -> None:
    """OSError naming ``what`` when ``blob`` is over what a ConfigMap holds (refused before
    it is sent)."""
    if len(blob) > MAX_BLOB:
        raise OSError(f"{what}: {len(blob)} bytes compressed, more than a ConfigMap holds "
                      f"({MAX_BLOB}){hint}")  # fmt: skip


def _said(what: str, e: Exception) -> OSError:
    status = getattr(e, "status", None)
    reason = getattr(e, "reason", "") or ""
    said = f"HTTP {status} {reason}".strip() if status else f"{type(e).__name__}: {e}"
    return OSError(f"{what}: {said}")
