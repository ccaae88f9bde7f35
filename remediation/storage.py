"""Checkpoint storage health as remediation sees it: which mounts are unhealthy right now.

Fed by the storage alerts (``fault_class="storage"``, alerts/storage.rules.yml): a firing
alert marks its ``mount`` unhealthy, its resolve clears it. A checkpoint into an unhealthy
mount stalls every rank of the job at the same step and makes things worse, so while the
job's checkpoint mount is unhealthy remediation does not ask for a checkpoint: it takes the
policy's fallback (``checkpoint.on_storage_unhealthy``: requeue without a checkpoint, or
wait for the job to end) and records why. Storage alerts never drain a node: a shared file
system fault is not a node fault.

Pure and in memory: the webhook replays firing alerts (Alertmanager repeats them every
``repeat_interval``), so after a restart the state is back within one repeat; until then a
mount counts as healthy only if no alert says otherwise, which is what the alert rules say.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

STORAGE_CLASS = "storage"


@dataclass
class StorageHealth:
    unhealthy: dict[str, str] = field(default_factory=dict)  # mount -> why (alert + summary)

    def observe(self, status: str, labels: Mapping[str, str], summary: str = "") -> bool:
        """Take one alert; True when it was a storage alert (and so needs no node action)."""
        if labels.get("fault_class") != STORAGE_CLASS:
            return False
        mount = labels.get("mount", "")
        if not mount:
            return True
        if status == "firing":
            self.unhealthy[mount] = f"{labels.get('alertname', 'storage alert')}: {summary}".strip()
        else:
            self.unhealthy.pop(mount, None)
        return True

    def checkpoint_blocked(self, mount: str | None) -> str | None:
        """Why a checkpoint into ``mount`` must not be asked for now, or None when it may.
        ``mount`` None (the policy names no checkpoint mount): any unhealthy mount blocks,
        since remediation cannot tell where the job writes."""
        if mount:
            for m, why in self.unhealthy.items():
                if mount == m or mount.startswith(m.rstrip("/") + "/"):
                    return f"checkpoint storage {m} unhealthy ({why})"
            return None
        if self.unhealthy:
            m = sorted(self.unhealthy)[0]
            return f"checkpoint storage {m} unhealthy ({self.unhealthy[m]})"
        return None
