"""Node health where Kubernetes tools look: gpuwarden's decisions about a node as Node
conditions and core/v1 Events on the Node, so Karpenter's node repair, medik8s
NodeHealthCheck and a plain ``kubectl describe node`` see what gpuwarden decided.

Sits beside the Kubernetes backend (remediation/backends/kubernetes.py), which calls it
after each decision it carries out. Two conditions, node-problem-detector's convention
(type, status, a CamelCase reason, a message, ``lastHeartbeatTime`` on every write,
``lastTransitionTime`` only when the status changes):

- ``GpuHealthy``: False while gpuwarden holds a GPU fault against the node (the node taken
  out, or one GPU taken out by a DRA DeviceTaintRule); True once released.
- ``GpuwardenQuarantined``: True while gpuwarden holds the node out of service (reason the
  state: ``Quarantined``, ``Inspection``, ...); False once released.

On release both stay, with their "all clear" status (as node-problem-detector leaves a
cleared problem: a condition that vanished reads as "unknown" to a watcher such as
NodeHealthCheck, which matches type, status and duration). A node gpuwarden never took out
gets no condition. Written to the status subresource with a strategic merge on
``conditions`` (merge key ``type``: the kubelet's own conditions are untouched), as field
manager ``gpuwarden``.

Events (``reportingController`` gpuwarden.io/remediation, ``source.component``
gpuwarden-remediation) name each decision: Quarantined, EvacuationBlocked, Released,
GpuIsolated, GpuReleased, GpuReset, and under observe-first WouldQuarantine. A repeat of
the same reason and message on the same node is aggregated as the kubelet's recorder does:
the first Event's ``count`` and ``lastTimestamp`` are patched (a new Event once the old one
expired), not one Event per tick. The involved object is the Node with ``uid`` = its name
(the kubelet's and node-problem-detector's reference, which ``kubectl describe node``
searches), in namespace ``default``.

Observability, not the action: a failure to write either is logged and never fails the
decision it reports (the cordon is what keeps jobs off a bad node).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import socket
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

from remediation.backends.kubeapi import KubeApi, Obj

log = logging.getLogger("gpuwarden.remediation")

HEALTHY = "GpuHealthy"
QUARANTINED = "GpuwardenQuarantined"
TYPES = (HEALTHY, QUARANTINED)
CONTROLLER = "gpuwarden.io/remediation"
COMPONENT = "gpuwarden-remediation"
EVENT_NAMESPACE = "default"  # where the kubelet and node-problem-detector put Node events
MAX_MESSAGE = 1024  # an Event's note is capped by the API server; conditions kept short too
REMEMBERED = 4096  # aggregation keys kept (least recently used dropped)


def camel(state: str) -> str:
    """``action_failed`` -> ``ActionFailed``: a condition reason is CamelCase."""
    return "".join(w[:1].upper() + w[1:] for w in state.replace("-", "_").split("_") if w)


def stamp(t: float) -> str:
    return dt.datetime.fromtimestamp(int(t), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(kind: str, status: bool, reason: str, message: str, now: float,
              before: Obj | None) -> Obj:  # fmt: skip
    """The condition to write; its transition time kept unless the status changes."""
    value = "True" if status else "False"
    kept = before is not None and before.get("status") == value and before.get("lastTransitionTime")
    return {
        "type": kind,
        "status": value,
        "reason": reason,
        "message": message[:MAX_MESSAGE],
        "lastHeartbeatTime": stamp(now),
        "lastTransitionTime": before["lastTransitionTime"] if kept else stamp(now),  # type: ignore[index]
    }


class NodeHealth:
    def __init__(self, api: KubeApi, clock: Callable[[], float] = time.time,
                 instance: str | None = None) -> None:  # fmt: skip
        self.api, self.clock = api, clock
        self.instance = instance or socket.gethostname()
        self._seen: OrderedDict[tuple[str, str, str, str], tuple[str, int]] = OrderedDict()
        self._lock = threading.Lock()  # actions run in parallel worker threads
        self._seq = itertools.count()

    # ------------------------------------------------------------------ conditions
    def conditions(self, node: str) -> dict[str, Obj]:
        n = self.api.read_node(node) or {}
        conds = (n.get("status") or {}).get("conditions") or []
        return {str(c.get("type")): c for c in conds if c.get("type") in TYPES}

    def set(self, node: str, wanted: dict[str, tuple[bool, str, str]],
            only_if_present: bool = False) -> None:  # fmt: skip
        """Write ``wanted`` (type -> (status, reason, message)); ``only_if_present``: only
        on a node that already carries gpuwarden's conditions (a release of a node never
        taken out adds none). Logged, never raised."""
        try:
            have = self.conditions(node)
            if only_if_present and not have:
                return
            now = self.clock()
            body = [condition(k, s, r, m, now, have.get(k)) for k, (s, r, m) in wanted.items()]
            self.api.patch_node_status(node, {"status": {"conditions": body}})
        except Exception as e:
            log.warning("node %s: conditions %s not written: %s: %s", node, sorted(wanted),
                        type(e).__name__, e)  # fmt: skip

    # ------------------------------------------------------------------ events
    def event(self, node: str, kind: str, reason: str, message: str) -> None:
        """An Event on the Node (``kind`` Normal or Warning), aggregated: the same reason
        and message again bumps the first one's count. Logged, never raised."""
        message = message[:MAX_MESSAGE]
        key = (node, kind, reason, message)
        try:
            with self._lock:
                seen = self._seen.get(key)
                if seen is not None:
                    self._seen.move_to_end(key)
            if seen is not None and self._bump(key, *seen):
                return
            self._create(key)
        except Exception as e:
            log.warning("node %s: event %s not recorded: %s: %s", node, reason,
                        type(e).__name__, e)  # fmt: skip

    def _bump(self, key: tuple[str, str, str, str], name: str, count: int) -> bool:
        body = {"count": count + 1, "lastTimestamp": stamp(self.clock())}
        status = self.api.patch_event(EVENT_NAMESPACE, name, body)
        if status != 200:
            return False  # expired (404) or refused: a new Event instead
        with self._lock:
            self._seen[key] = (name, count + 1)
        return True

    def _create(self, key: tuple[str, str, str, str]) -> None:
        node, kind, reason, message = key
        now = self.clock()
        # the kubelet's recorder names them <object>.<unix nanoseconds, hex>; + a sequence:
        # two decisions in one clock tick must not collide (409)
        name = f"{node}.{int(now * 1e9) + next(self._seq):x}"
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": EVENT_NAMESPACE},
            "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": node},
            "type": kind,
            "reason": reason,
            "message": message,
            "source": {"component": COMPONENT, "host": self.instance},
            "reportingComponent": CONTROLLER,
            "reportingInstance": self.instance,
            "action": reason,
            "count": 1,
            "firstTimestamp": stamp(now),
            "lastTimestamp": stamp(now),
        }
        status = self.api.create_event(EVENT_NAMESPACE, body)
        if status not in (200, 201):
            raise RuntimeError(f"create answered HTTP {status}")
        with self._lock:
            self._seen[key] = (name, 1)
            while len(self._seen) > REMEMBERED:
                self._seen.popitem(last=False)


def blocked_message(pods: Any) -> str:
    """One line for an EvacuationBlocked event: each pod and the server's words."""
    return "; ".join(f"{p.pod}: HTTP {p.status} {p.reason}: {p.message}" for p in pods)
