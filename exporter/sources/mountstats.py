"""NFS client statistics from ``/proc/self/mountstats`` for the probed checkpoint mounts.

Format (Linux ``fs/nfs/super.c`` ``nfs_show_stats``, documented in nfs-utils' mountstats(8)):
a ``device SERVER:/EXPORT mounted on MOUNT with fstype nfs4 statvers=1.1`` line opens each
mount; under ``per-op statistics`` each line is ``OP: ops transmissions major_timeouts
bytes_sent bytes_recv queue_ms rtt_ms execute_ms [errors]``. Major timeouts and growing RTT
are what a stalled NFS server looks like from the client before probes start to hang.
Lustre's ``llite/*/stats`` is read by exporter/sources/lustre.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

NFS_FSTYPES = ("nfs", "nfs4")
OP_FIELDS = ("ops", "transmissions", "major_timeouts", "bytes_sent", "bytes_recv",
             "queue_ms", "rtt_ms", "execute_ms", "errors")  # fmt: skip


@dataclass(frozen=True)
class NfsOpStats:
    mount: str
    op: str
    ops: int
    major_timeouts: int
    rtt_ms: int
    execute_ms: int
    errors: int


def parse_mountstats(text: str, mounts: Iterable[str] | None = None) -> list[NfsOpStats]:
    """Per-op stats of the NFS mounts (only ``mounts`` when given). Lines that do not parse
    are skipped: the file is the kernel's and gains fields across versions."""
    wanted = set(mounts) if mounts is not None else None
    out: list[NfsOpStats] = []
    mount: str | None = None
    in_ops = False
    for line in text.splitlines():
        if line.startswith("device "):
            parts = line.split()
            mount, in_ops = None, False
            if "mounted" in parts and "fstype" in parts:
                at = parts[parts.index("mounted") + 2]
                fstype = parts[parts.index("fstype") + 1]
                if fstype in NFS_FSTYPES and (wanted is None or at in wanted):
                    mount = at
            continue
        if mount is None:
            continue
        stripped = line.strip()
        if stripped == "per-op statistics":
            in_ops = True
            continue
        if not in_ops or ":" not in stripped:
            continue
        op, _, rest = stripped.partition(":")
        values = rest.split()
        if len(values) < 8 or not all(v.isdigit() for v in values):
            continue
        nums = [int(v) for v in values]
        out.append(
            NfsOpStats(
                mount, op, nums[0], nums[2], nums[6], nums[7], nums[8] if len(nums) > 8 else 0
            )
        )
    return out
