"""Lustre client (llite) statistics for the probed checkpoint mounts.

Each mounted Lustre file system has one llite instance, ``llite/FSNAME-SBIHEX/stats``,
under ``/proc/fs/lustre`` (older clients) or ``/sys/kernel/debug/lustre`` (newer ones, when
debugfs is mounted). Lines (``lprocfs_stats_seq_show()`` in Lustre's
lustre/obdclass/lprocfs_status.c; fixtures/proc/lustre-README.md):
``NAME COUNT samples [UNIT] MIN MAX SUM [SUMSQ]``. ``read_bytes``/``write_bytes`` count
operations and sum bytes; since Lustre 2.12-2.15 the metadata and data operations are
``[usec]`` latency counters whose sum is the total time spent in them, which is what a
stalled OST or MDS looks like from the client before probes hang. The file system name
comes from the mount table (device ``MGSNID:/FSNAME``, type ``lustre``); a probed mount
inside a Lustre mount point reports that file system's counters. Reading these files never
touches the servers, so a hung file system does not block a collection.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable
from dataclasses import dataclass

STATS_DIRS = ("proc/fs/lustre/llite", "sys/kernel/debug/lustre/llite")
OPS = ("read", "write", "open", "close", "fsync", "getattr", "setattr", "statfs")


@dataclass(frozen=True)
class LliteCounter:
    count: int
    unit: str
    total: float  # the SUM column (0 when the counter keeps none)


@dataclass(frozen=True)
class LustreOpStats:
    mount: str
    op: str
    ops: int
    bytes: int  # read/write only
    latency_s: float | None  # None: this client keeps no latency for the op


def parse_llite_stats(text: str) -> dict[str, LliteCounter]:
    """The counters of one stats file; lines that do not parse are skipped (the set of
    counters differs across Lustre versions)."""
    out: dict[str, LliteCounter] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 4 or parts[2] != "samples" or not parts[1].isdigit():
            continue
        unit = parts[3].strip("[]")
        total = 0.0
        if len(parts) >= 7:
            try:
                total = float(parts[6])
            except ValueError:
                continue
        out[parts[0]] = LliteCounter(int(parts[1]), unit, total)
    return out


def lustre_mounts(mounts_text: str) -> dict[str, str]:
    """File system name -> mount point, from a ``/proc/self/mounts`` text."""
    out: dict[str, str] = {}
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == "lustre" and ":/" in parts[0]:
            fsname = parts[0].rsplit(":/", 1)[1].split("/")[0]
            out.setdefault(fsname, parts[1].replace("\\040", " "))
    return out


def _under(probed: str, point: str) -> bool:
    return probed == point or probed.startswith(point.rstrip("/") + "/")


def op_stats(mount: str, counters: dict[str, LliteCounter]) -> list[LustreOpStats]:
    out = []
    for op in OPS:
        data = counters.get(f"{op}_bytes") if op in ("read", "write") else None
        lat = counters.get(op)
        if data is None and lat is None:
            continue
        n = (data or lat).count  # type: ignore[union-attr]
        seconds = lat.total / 1e6 if lat is not None and lat.unit == "usec" else None
        out.append(LustreOpStats(mount, op, n, int(data.total) if data else 0, seconds))
    return out


def read_lustre(root: str, probed: Iterable[str]) -> list[LustreOpStats]:
    """Per probed mount on Lustre, its file system's client counters (none when no probed
    mount is on Lustre). OSError when the mount table cannot be read."""
    with open(os.path.join(root, "proc/self/mounts")) as f:
        fs = lustre_mounts(f.read())
    wanted = {m: name for m in probed for name, point in fs.items() if _under(m, point)}
    if not wanted:
        return []
    stats: dict[str, str] = {}  # fsname -> stats file
    for d in STATS_DIRS:
        for found in sorted(glob.glob(os.path.join(root, d, "*", "stats"))):
            name = os.path.basename(os.path.dirname(found)).rsplit("-", 1)[0]
            stats.setdefault(name, found)
    out: list[LustreOpStats] = []
    for mount, name in sorted(wanted.items()):
        path = stats.get(name)
        if path is None:
            continue
        with open(path) as f:
            out += op_stats(mount, parse_llite_stats(f.read()))
    return out
