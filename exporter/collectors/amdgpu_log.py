"""amdgpu kernel-log collector: log lines -> ``gpuwarden_gpu_amdgpu_events_total{gpu,uuid,event}``.

On AMD nodes (``--source amdsmi``) this collector reads the kernel log in place of the XID
collector: the same :class:`~exporter.sources.protocols.KernelLog` (``/dev/kmsg`` or a followed
file), the events of :class:`~exporter.sources.amdgpu_lines.AmdgpuLineStream`, one counter per
(GPU, event) for the exporter's life (never a latched "last event" gauge). Counts are kept by PCI
key and named at each render through the AMD collector's identities, so a device amdsmi learns
of later gets its index and UUID on the same counter; one never named is labelled with its PCI
key (``uuid=""``), and a ring timeout no line attributed to a device with ``gpu=""``. As for
XIDs, ``/dev/kmsg`` records older than ``--kmsg-backlog`` before the start are skipped, so a
restart does not count old events again (``--kmsg-state`` is the XID collector's only).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from exporter.catalog import GPU_AMDGPU_EVENTS, KMSG_LINES, KMSG_LOST, Sample
from exporter.collectors.base import ReadErrors
from exporter.sources.amdgpu_lines import AmdgpuLineStream
from exporter.sources.protocols import GpuLookup, KernelLog


class AmdgpuLogCollector:
    name = "amdgpu_log"

    def __init__(
        self, log: KernelLog, gpus: GpuLookup, node: str, *, backlog_seconds: float | None = None
    ) -> None:
        self._log = log
        skip = getattr(log, "skip_older_than", None)
        if backlog_seconds is not None and skip is not None:  # a restart must not count old
            skip(backlog_seconds)  # events again (the XID collector's --kmsg-backlog rule)
        self._gpus = gpus
        self._node = node
        self._stream = AmdgpuLineStream()
        self._counts: Counter[tuple[str, str]] = Counter()  # (pci key, event) -> events
        self._lines = 0
        self.read_errors = ReadErrors()

    def collect(self) -> Sequence[Sample]:
        try:
            lines = self._log.read_new()
        except OSError:  # readers should not raise; a fake or a future one might
            self.read_errors.add("kmsg_read")
            lines = []
        self._lines += len(lines)
        for raw in lines:
            for event in self._stream.feed(raw):
                self._counts[(event.pci_key, event.event)] += 1
        if not getattr(self._log, "healthy", True):
            self.read_errors.add("kmsg_read")
        return self._samples()

    def counts(self) -> dict[tuple[str, str], int]:
        """(pci key, event) -> events counted so far (a copy)."""
        return dict(self._counts)

    def _samples(self) -> list[Sample]:
        gpus = self._gpus()
        out = []
        for (key, event), n in sorted(self._counts.items()):
            ident = gpus.get(key)
            gpu, uuid = (ident.index, ident.uuid) if ident else (key, "")
            out.append(GPU_AMDGPU_EVENTS.make(n, self._node, gpu, uuid, event))
        out.append(KMSG_LOST.make(self._log.lost_records, self._node))
        out.append(KMSG_LINES.make(self._lines, self._node, self._log.source_name))
        return out
