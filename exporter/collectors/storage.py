"""Checkpoint-storage health: the prober's last results and the NFS client's own counters.

Reads only memory (the prober's last results) and ``/proc/self/mountstats``, which the
kernel serves without touching the server, so a hung mount never blocks a collection.
A storage fault is a shared fault: the analyzer reports it once for the cluster when many
nodes see it, and remediation does not ask jobs to checkpoint into it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exporter.catalog import (
    NFS_OP_MAJOR_TIMEOUTS,
    NFS_OP_RTT_SECONDS,
    NFS_OPS,
    STORAGE_PROBE_DURATION,
    STORAGE_PROBE_UP,
    STORAGE_PROBES,
    Sample,
)
from exporter.collectors.base import ReadErrors
from exporter.sources.mountstats import parse_mountstats
from exporter.sources.storage_probe import OUTCOMES, ProbeResults


def _read_mountstats() -> str:
    with open("/proc/self/mountstats") as f:
        return f.read()


class StorageCollector:
    name = "storage"

    def __init__(
        self,
        prober: ProbeResults,
        node: str,
        *,
        mountstats: Callable[[], str] = _read_mountstats,
    ) -> None:
        self.prober = prober
        self.node = node
        self.read_errors = ReadErrors()
        self._mountstats = mountstats

    def collect(self) -> Sequence[Sample]:
        self.prober.start()  # idempotent: the probe loop runs beside collection, never in it
        out: list[Sample] = []
        last, counts = self.prober.last(), self.prober.counts()
        for mount in self.prober.mounts:
            r = last.get(mount)
            if r is None:
                continue  # not probed yet: no value rather than a guess
            out.append(STORAGE_PROBE_UP.make(1.0 if r.outcome == "ok" else 0.0, self.node, mount))
            for op, secs in r.seconds.items():
                out.append(STORAGE_PROBE_DURATION.make(secs, self.node, mount, op))
            for outcome in OUTCOMES:
                n = counts.get((mount, outcome), 0)
                out.append(STORAGE_PROBES.make(n, self.node, mount, outcome))
        out += self._nfs()
        return out

    def _nfs(self) -> list[Sample]:
        try:
            text = self._mountstats()
        except OSError:
            self.read_errors.add("mountstats")
            return []
        out: list[Sample] = []
        for s in parse_mountstats(text, self.prober.mounts):
            if s.op not in ("READ", "WRITE", "COMMIT", "GETATTR", "OPEN", "CLOSE"):
                continue
            out.append(NFS_OPS.make(s.ops, self.node, s.mount, s.op))
            out.append(NFS_OP_MAJOR_TIMEOUTS.make(s.major_timeouts, self.node, s.mount, s.op))
            out.append(NFS_OP_RTT_SECONDS.make(s.rtt_ms / 1000.0, self.node, s.mount, s.op))
        return out
