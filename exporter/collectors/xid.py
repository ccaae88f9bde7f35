"""XID collector: kernel log lines -> ``gpuwarden_gpu_xid_errors_total{gpu,uuid,xid}``.

Sits between a :class:`~exporter.sources.protocols.KernelLog` (``/dev/kmsg``, a followed file,
or the simulator's list) and the exposition. Each cycle reads the new lines, parses them with
:class:`~exporter.sources.xid_lines.XidLineStream` and adds to one counter per (GPU, XID) that
lives as long as the exporter: never reset, never a latched "last XID" gauge (ARCHITECTURE
decision 4). ``last_xid()`` feeds only dcgm-exporter's latched gauge in ``--compat dcgm``.

A GPU whose PCI address is not in the lookup (not yet, or no longer, known to NVML) is still
counted, labelled ``gpu=<pci key>`` (e.g. ``0000:3b:00``) and ``uuid=""``: an XID must never be
dropped for want of a name. Counts are kept by PCI key and named at each render, so a GPU that
NVML learns about later gets its index and UUID on the same counter.

When the log is unreadable (``healthy`` False on the reader) the NVML XID event source is
counted instead; while the log is healthy the events are drained and dropped, because the same
XIDs arrive through the log and would count twice. A log unreadable for a single cycle is
not yet broken (logrotate between rename and create, a file replaced): that cycle's events are
held, counted if the next cycle still cannot read the log, and dropped if the log is back (it
then delivers those XIDs itself). So nothing is lost and nothing counts twice.

With a state file (``--kmsg-state``, :mod:`exporter.sources.kmsg_state`) the counts and the
log position survive a restart; without one, or when the saved position no longer applies, a
``/dev/kmsg`` reader skips records older than ``backlog_seconds`` before the start
(``--kmsg-backlog``), so an exporter restart does not count old XIDs as new (issue 17).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from exporter.catalog import (
    GPU_MIG_XID_ERRORS,
    GPU_XID_ERRORS,
    GPU_XID_NVLINK5_ERRORS,
    KMSG_LINES,
    KMSG_LOST,
    XID_STATE_RESTORED,
    Sample,
)
from exporter.collectors.base import ReadErrors
from exporter.sources.kmsg_state import XidState, XidStateFile
from exporter.sources.protocols import (
    GpuIdentity,
    GpuLookup,
    KernelLog,
    XidEventSource,
    pci_key,
)
from exporter.sources.xid_lines import XidLineStream, nvlink5_detail

FALLBACK_AFTER_CYCLES = 2
SAVE_POSITION_EVERY = 30.0  # seconds: a position-only change is saved at most this often
REPLACEMENT_CHAR = "\ufffd"  # what a non-UTF-8 byte decodes to (errors="replace")


class XidCollector:
    """Counts XIDs per (GPU, XID) from the kernel log, with NVML events as fallback."""

    name = "xid"

    def __init__(
        self,
        log: KernelLog,
        gpus: GpuLookup,
        node: str,
        *,
        fallback: XidEventSource | None = None,
        state: XidStateFile | None = None,
        backlog_seconds: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = log
        self._gpus = gpus
        self._node = node
        self._fallback = fallback
        self._stream = XidLineStream()
        self._counts: Counter[tuple[str, int]] = Counter()  # (pci key, xid) -> events
        self._mig: Counter[tuple[str, str, str, int]] = Counter()  # (key, GPU-I, GPU-CI, xid)
        # (key, xid, unit, error status, sub-code) of decoded NVLink5 lines; like the MIG
        # counts, not carried over a restart by --kmsg-state (the rules treat them as fresh)
        self._nvl5: Counter[tuple[str, int, str, str, str]] = Counter()
        self._last: dict[str, int] = {}  # pci key -> last xid, in log order
        self._lines = 0
        self._held: list[tuple[str, int]] = []  # fallback events of a first unreadable cycle
        self._down_cycles = 0
        self.read_errors = ReadErrors()
        self._state, self._clock, self._saved_at = state, clock, clock()
        self._restore(backlog_seconds)

    def collect(self) -> Sequence[Sample]:
        before = dict(self._counts)
        log_ok = self._read_log()
        self._use_fallback(self._poll_fallback(), log_ok=log_ok)
        self._save(changed=before != self._counts)
        return self._samples(self._gpus())

    def last_xid(self) -> dict[str, int]:
        """GPU label (NVML index, or PCI key when unknown) -> last XID seen, for dcgm compat."""
        gpus = self._gpus()
        return {_gpu_label(key, gpus.get(key)): xid for key, xid in self._last.items()}

    def counts(self) -> dict[tuple[str, int], int]:
        """(pci key, xid) -> events counted so far (a copy)."""
        return dict(self._counts)

    def _restore(self, backlog_seconds: float | None) -> None:
        restored = False
        self._carried_over = False  # exported: the rules treat a fresh counter as fresh
        if self._state is not None:
            saved = self._state.load()
            if self._state.load_error:
                self.read_errors.add("xid_state")
            self._counts.update(saved.counts)
            self._carried_over = bool(saved.counts or saved.position)
            restore = getattr(self._log, "restore", None)
            restored = bool(saved.position) and restore is not None and restore(saved.position)
        skip = getattr(self._log, "skip_older_than", None)
        if not restored and backlog_seconds is not None and skip is not None:
            skip(backlog_seconds)

    def _save(self, *, changed: bool) -> None:
        now = self._clock()
        if self._state is None or not (changed or now - self._saved_at >= SAVE_POSITION_EVERY):
            return
        position: dict[str, object] = getattr(self._log, "position", dict)()
        if not self._state.save(XidState(position, dict(self._counts))):
            self.read_errors.add("xid_state")
        self._saved_at = now

    def _read_log(self) -> bool:
        try:
            lines = self._log.read_new()
        except OSError:  # readers should not raise; a fake or a future one might
            self.read_errors.add("kmsg_read")
            return False
        self._lines += len(lines)
        for raw in lines:
            if REPLACEMENT_CHAR in raw:
                self.read_errors.add("kmsg_undecodable")
            result = self._stream.feed(raw)
            for _ in range(result.malformed):
                self.read_errors.add("xid_line")
            for event in result.events:
                self._count(event.pci_key, event.xid)
                if event.gpu_instance is not None:  # MIG: the instance too, not instead
                    ci = "" if event.compute_instance is None else str(event.compute_instance)
                    self._mig[(event.pci_key, str(event.gpu_instance), ci, event.xid)] += 1
                if (d := nvlink5_detail(event.xid, event.text)) is not None:
                    status = f"0x{d.error_status:08x}"
                    self._nvl5[(event.pci_key, event.xid, d.unit, status, str(d.subcode))] += 1
        healthy = bool(getattr(self._log, "healthy", True))
        if not healthy:
            self.read_errors.add("kmsg_read")
        return healthy

    def _poll_fallback(self) -> list[tuple[str, int]]:
        if self._fallback is None:
            return []
        try:
            return list(self._fallback.poll())
        except Exception:  # NVML event wait can fail in many ways; observe softly
            self.read_errors.add("xid_fallback")
            return []

    def _use_fallback(self, events: list[tuple[str, int]], *, log_ok: bool) -> None:
        if log_ok:  # the log has delivered, or will deliver, these XIDs itself
            self._held, self._down_cycles = [], 0
            return
        self._down_cycles += 1
        self._held += events
        if self._down_cycles < FALLBACK_AFTER_CYCLES:
            return
        held, self._held = self._held, []
        for address, xid in held:
            try:
                self._count(pci_key(address), int(xid))
            except ValueError:
                self.read_errors.add("xid_fallback")

    def _count(self, key: str, xid: int) -> None:
        self._counts[(key, xid)] += 1
        self._last[key] = xid

    def _samples(self, gpus: Mapping[str, GpuIdentity]) -> list[Sample]:
        out = []
        for (key, xid), n in sorted(self._counts.items()):
            ident = gpus.get(key)
            uuid = ident.uuid if ident else ""
            out.append(GPU_XID_ERRORS.make(n, self._node, _gpu_label(key, ident), uuid, str(xid)))
        for (key, gi, ci, xid), n in sorted(self._mig.items()):
            ident = gpus.get(key)
            label, uuid = _gpu_label(key, ident), ident.uuid if ident else ""
            out.append(GPU_MIG_XID_ERRORS.make(n, self._node, label, uuid, gi, ci, str(xid)))
        for (key, xid, unit, status, sub), n in sorted(self._nvl5.items()):
            ident = gpus.get(key)
            label, uuid = _gpu_label(key, ident), ident.uuid if ident else ""
            out.append(
                GPU_XID_NVLINK5_ERRORS.make(n, self._node, label, uuid, str(xid), unit, status, sub)
            )
        out.append(KMSG_LOST.make(self._log.lost_records, self._node))
        out.append(KMSG_LINES.make(self._lines, self._node, self._log.source_name))
        out.append(XID_STATE_RESTORED.make(float(self._carried_over), self._node))
        return out


def _gpu_label(key: str, ident: GpuIdentity | None) -> str:
    return ident.index if ident else key
