"""Checkpoint storage health as remediation sees it: which mounts are unhealthy right now.

Fed by the storage alerts (``fault_class="storage"``, alerts/storage.rules.yml): a firing
alert marks its ``mount`` unhealthy, its resolve clears it. A cluster alert
(``scope="cluster"``, no ``node``: CheckpointStorageDegraded / CheckpointStorageSlow) marks
the mount unhealthy for everyone; a node alert (CheckpointStorageProbeFailing) only for the
jobs that run on that node. A checkpoint into an unhealthy mount stalls every rank of the
job at the same step and makes things worse, so while the job's checkpoint mount is
unhealthy the engine does not ask for a checkpoint: it takes the policy's fallback
(``checkpoint.on_storage_unhealthy``, :data:`FALLBACKS`) and records why. Storage alerts
never drain a node and never count toward the storm breaker: a shared file system fault is
not a node fault.

The engine keeps this state in the journal (:func:`load` / :func:`save`), so a restart
does not forget a mount that is still failing (Alertmanager does not repeat an alert to a
receiver that already accepted it with the same key). Pure otherwise: no I/O here.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

STORAGE_CLASS = "storage"
KV_KEY = "storage_unhealthy"
# checkpoint.on_storage_unhealthy: what checkpoint_restart becomes while its storage is
# unhealthy. requeue: restart without a checkpoint (progress since the job's last checkpoint
# is lost, nothing stalls); cordon: no new work on the node, its jobs run on untouched;
# drain: take the node out and evict; hold: no action now, the alert's next repeat is
# decided again (a transient denial) once the storage may have recovered.
FALLBACKS = ("requeue", "cordon", "drain", "hold")


class KV(Protocol):
    def get(self, key: str, default: str | None = None) -> str | None: ...
    def put(self, key: str, value: str | None) -> None: ...


def normalize(mount: str) -> str:
    """One spelling per mount: ``/mnt/ckpt/``, ``/mnt//ckpt`` and ``/mnt/./ckpt`` are all
    ``/mnt/ckpt`` (labels come from probes and humans; health is looked up by this)."""
    if not mount:
        return ""
    return posixpath.normpath(re.sub(r"/+", "/", mount.strip()))


def _covers(unhealthy: str, mount: str) -> bool:
    unhealthy, mount = normalize(unhealthy), normalize(mount)
    return mount == unhealthy or mount.startswith(unhealthy.rstrip("/") + "/")


@dataclass
class StorageHealth:
    # mount -> {alertname: summary} of the storage alerts firing about it, cluster-wide
    unhealthy: dict[str, dict[str, str]] = field(default_factory=dict)
    # node -> the same, for alerts about one node's view of a mount
    on_node: dict[str, dict[str, dict[str, str]]] = field(default_factory=dict)

    def observe(self, status: str, labels: Mapping[str, str], summary: str = "") -> bool:
        """Take one alert; True when it was a storage alert (and so needs no node action).
        A mount stays unhealthy while any storage alert about it fires."""
        if labels.get("fault_class") != STORAGE_CLASS:
            return False
        mount, node = normalize(labels.get("mount", "")), labels.get("node", "")
        if not mount:
            return True
        cluster = labels.get("scope") == "cluster" or not node
        table = self.unhealthy if cluster else self.on_node.setdefault(node, {})
        firing = table.setdefault(mount, {})
        name = labels.get("alertname", "storage alert")
        if status == "firing":
            firing[name] = summary
        else:
            firing.pop(name, None)
        if not firing:
            table.pop(mount, None)
        if not cluster and not table:
            self.on_node.pop(node, None)
        return True

    def unhealthy_mount(self, mount: str, node: str = "") -> bool:
        return normalize(mount) in (self.on_node.get(node, {}) if node else self.unhealthy)

    def checkpoint_blocked(self, mount: str | None, nodes: Iterable[str] = ()) -> str | None:
        """Why a checkpoint into ``mount`` (by a job on ``nodes``) must not be asked for now,
        or None when it may. ``mount`` None (the policy names no checkpoint mount): any
        unhealthy mount blocks, since remediation cannot tell where the job writes."""
        scopes = [("", self.unhealthy)] + [
            (f" on {n}", self.on_node[n]) for n in sorted(set(nodes)) if n in self.on_node
        ]
        for where, table in scopes:
            for m in sorted(table):
                if not mount or _covers(m, mount):
                    why = "; ".join(f"{a}: {t}".rstrip(": ") for a, t in sorted(table[m].items()))
                    return f"storage {m} unhealthy{where} ({why})"
        return None

    def to_json(self) -> str:
        return json.dumps({"cluster": self.unhealthy, "nodes": self.on_node}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str | None) -> StorageHealth:
        try:
            data: Any = json.loads(text or "{}")
        except json.JSONDecodeError:
            data = {}
        if not isinstance(data, dict):
            data = {}
        cluster, nodes = data.get("cluster") or {}, data.get("nodes") or {}
        return cls(_merged(cluster), {n: _merged(t) for n, t in nodes.items()})


def _merged(table: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, str]]:
    """A stored table with its mounts normalized (a journal written before they were)."""
    out: dict[str, dict[str, str]] = {}
    for m, alerts in table.items():
        out.setdefault(normalize(m), {}).update(alerts)
    return out


def load(kv: KV) -> StorageHealth:
    return StorageHealth.from_json(kv.get(KV_KEY))


def save(kv: KV, health: StorageHealth) -> None:
    kv.put(KV_KEY, health.to_json() if health.unhealthy or health.on_node else None)


HELD_BACK = "checkpoint held back"


def held_back(kv: KV, mount: str | None, nodes: Iterable[str]) -> str | None:
    """Why no checkpoint may be asked of a job on ``nodes`` now (the state in the journal),
    or None. Read by the engine when it decides and by the executor before it signals."""
    why = load(kv).checkpoint_blocked(mount or None, nodes)
    return None if why is None else f"{HELD_BACK}: {why}"


def alert_reason(status: str, labels: Mapping[str, str], incident: int | None) -> str:
    """The decision text for a storage alert itself (it is recorded, never acted on)."""
    mount = labels.get("mount", "")
    where = f"cluster incident #{incident}" if incident is not None else "no incident"
    if not mount:
        return "storage alert without a mount label: recorded; no checkpoint is held back"
    if status != "firing":
        return f"storage {mount} healthy again ({where} closed): checkpoints into it allowed"
    scope = "" if labels.get("scope") == "cluster" or not labels.get("node") else " on one node"
    return (
        f"storage {mount} unhealthy{scope} ({where}): checkpoint requests into it are held "
        "back; a shared storage fault drains no node"
    )
