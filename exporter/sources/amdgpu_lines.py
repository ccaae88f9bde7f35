"""amdgpu kernel-log events: pure parsing, no I/O. AMD's counterpart of :mod:`xid_lines`.

The amdgpu driver has no XID numbers; the lines an operator acts on are few and read by their
words. Each shape below is taken from a public report (fixtures/kmsg/amdgpu_corpus.yaml names
each line's origin); the envelope (kmsg, dmesg, journal, syslog) is removed by
:func:`~exporter.sources.xid_lines.split_envelope` first. The device prefix is the kernel's
``dev_*`` one, ``amdgpu dddd:bb:dd.f: `` (newer kernels add ``amdgpu: `` and, for
rate-limited hardware errors, a ``{N}`` sequence tag):

- RAS poison consumed: ``poison is consumed by client 12, kick off gpu reset flow``;
- RAS poison created: ``Poison is created``, ``Poison detected in VCN0, sub_block0``;
- an uncorrectable hardware error: ``uncorrectable hardware error(ERREVENT_ATHUB_INTERRUPT)
  detected!``;
- a ring timeout (a hang): ``ring gfx_0.0.0 timeout, signaled seq=..., emitted seq=...``; before
  about kernel 6.12 the line came from ``[drm:amdgpu_job_timedout [amdgpu]] *ERROR*`` without
  the device, which the driver's next device line (``GPU reset begin!``) names;
- a GPU reset: ``GPU reset begin!`` (``GPU reset begin!. Source:  1`` on newer kernels).

Meaning and action are the analyzer's and the AMD fault catalogue's business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.sources.protocols import pci_key
from exporter.sources.xid_lines import split_envelope

CONTEXT_LINES = 5  # a device-less ring timeout waits this many lines for its device

_DEVICE = re.compile(
    r"\bamdgpu (?P<pci>[0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]):\s+"
    r"(?:amdgpu:\s+)?(?:\{\d+\})?"
)
_EVENTS = (
    ("ras_poison_consumed", re.compile(r"^poison is consumed by client \d+", re.I)),
    ("ras_poison_created", re.compile(r"^Poison (?:is created|detected in \S+)", re.I)),
    (
        "ras_uncorrectable",
        re.compile(r"^uncorrectable hardware error\((?P<detail>[^)]*)\) detected"),
    ),
    ("ring_timeout", re.compile(r"^ring (?P<detail>\S+) timeout, signaled seq=")),
    ("gpu_reset", re.compile(r"^GPU reset begin!")),
)
_JOB_TIMEDOUT = re.compile(r"\*ERROR\* ring (?P<detail>\S+) timeout, signaled seq=")


@dataclass(frozen=True)
class AmdgpuEvent:
    """One event the driver logged: ``pci_key`` ("" when no line named the device)."""

    pci_key: str
    event: str
    detail: str = ""  # the ring, or the RAS error event name


def parse_amdgpu(message: str) -> AmdgpuEvent | None:
    """The event one device-prefixed kernel message reports, or None."""
    m = _DEVICE.search(message)
    if m is None:
        return None
    body = message[m.end() :]
    for event, pattern in _EVENTS:
        hit = pattern.search(body)
        if hit:
            detail = hit.groupdict().get("detail") or ""
            return AmdgpuEvent(pci_key(m["pci"]), event, detail)
    return None


class AmdgpuLineStream:
    """Feeds raw log lines in order; returns the events they complete. Pure state, no I/O.

    A device-less ring timeout (older kernels) is held until the next device-prefixed amdgpu
    line names the device (the driver logs ``GPU reset begin!`` right after it), at most
    ``CONTEXT_LINES`` lines; unnamed by then, it is counted with ``pci_key`` "" rather than
    dropped.
    """

    def __init__(self) -> None:
        self._line = 0
        self._pending: list[tuple[int, str]] = []  # (line, ring) of device-less timeouts

    def feed(self, raw: str) -> list[AmdgpuEvent]:
        _, body = split_envelope(raw)
        out: list[AmdgpuEvent] = []
        for message in body.split("\n"):
            self._line += 1
            out += self._expire()
            device = _DEVICE.search(message)
            if device is not None and self._pending:
                key = pci_key(device["pci"])
                out += [AmdgpuEvent(key, "ring_timeout", ring) for _, ring in self._pending]
                self._pending = []
            event = parse_amdgpu(message)
            if event is not None:
                out.append(event)
            elif (hang := _JOB_TIMEDOUT.search(message)) is not None and device is None:
                self._pending.append((self._line, hang["detail"]))
        return out

    def flush(self) -> list[AmdgpuEvent]:
        """Held timeouts whose device never came (end of a batch that will not continue)."""
        out = [AmdgpuEvent("", "ring_timeout", ring) for _, ring in self._pending]
        self._pending = []
        return out

    def _expire(self) -> list[AmdgpuEvent]:
        old = [p for p in self._pending if self._line - p[0] > CONTEXT_LINES]
        if not old:
            return []
        self._pending = [p for p in self._pending if p not in old]
        return [AmdgpuEvent("", "ring_timeout", ring) for _, ring in old]
