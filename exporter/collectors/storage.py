"""Checkpoint-storage health: the prober's last results and the NFS client's own counters.

Reads only memory (the prober's last results), ``/proc/self/mountstats`` (NFS) and the
Lustre client's llite stats (exporter/sources/lustre.py), which the kernel serves without
touching the servers, so a hung mount never blocks a collection.
A storage fault is a shared fault: the analyzer reports it once for the cluster when many
nodes see it, and remediation does not ask jobs to checkpoint into it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from exporter.catalog import (
    LUSTRE_BYTES,
    LUSTRE_LATENCY,
    LUSTRE_OPS,
    NFS_OP_MAJOR_TIMEOUTS,
    NFS_OP_RTT_SECONDS,
    NFS_OPS,
    STORAGE_PROBE_DURATION,
    STORAGE_PROBE_UP,
    STORAGE_PROBES,
    Sample,
)
from exporter.collectors.base import ReadErrors
from exporter.sources.lustre import LustreOpStats, read_lustre
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
        lustre: Callable[[Sequence[str]], list[LustreOpStats]] | None = None,
    ) -> None:
        self.prober = prober
        self.node = node
        self.read_errors = ReadErrors()
        self._mountstats = mountstats
        self._lustre = lustre if lustre is not None else (lambda mounts: read_lustre("/", mounts))

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
        out += self._lustre_samples()
        return out

    def _lustre_samples(self) -> list[Sample]:
        try:
            stats = self._lustre(self.prober.mounts)
        except OSError:
            self.read_errors.add("lustre")
            return []
        out: list[Sample] = []
        for s in stats:
            out.append(LUSTRE_OPS.make(s.ops, self.node, s.mount, s.op))
            if s.op in ("read", "write"):
                out.append(LUSTRE_BYTES.make(s.bytes, self.node, s.mount, s.op))
            if s.latency_s is not None:
                out.append(LUSTRE_LATENCY.make(s.latency_s, self.node, s.mount, s.op))
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
