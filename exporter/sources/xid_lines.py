"""XID events from kernel log lines: pure parsing, no I/O.

Sits between a :class:`~exporter.sources.protocols.KernelLog` (raw lines) and the XID
collector (counters). :func:`split_envelope` removes the kmsg / dmesg / journal prefix,
:func:`parse_xid` reads one message, and :class:`XidLineStream` adds what needs memory of
earlier lines: the fallen-off-the-bus message spread over several lines, and its dedupe against
an XID 79 line for the same incident.

Line shapes: kernel Documentation/ABI/testing/dev-kmsg (``prio,seq,usec,flags;message``, then
continuation lines `` KEY=value``); util-linux dmesg (``[ 1843.308145] message``); journalctl
``short`` / ``short-iso`` and syslog (``Feb 14 05:03:41 host kernel: message``). The XID line
itself is NVIDIA's (https://docs.nvidia.com/deploy/xid-errors/): ``NVRM: Xid (PCI:dddd:bb:dd):
<xid>, pid=<pid>, name=<process>, <text>``, where older drivers omit ``name=`` or ``pid=``.
On a MIG GPU the parenthesis also names the instance, ``(PCI:dddd:bb:dd GPU-I:05)`` or
``(PCI:dddd:bb:dd GPU-I:05 GPU-CI:01)`` (open-gpu-kernel-modules, kernel_rc_notification.c,
``"PCI:%04x:%02x:%02x GPU-I:%02u GPU-CI:%02u"``); drivers before about 2010 printed a bare
``bus:device`` without domain or ``PCI:``, e.g. ``NVRM: Xid (0001:00): 8, Channel 00000002``.
A line cut short after the code (``NVRM: Xid (PCI:0000:01:00): 154 (``) still counts that
XID for that GPU; one cut before the code or inside the address names nothing and is dropped.
fixtures/kmsg/xid_corpus.yaml holds the shapes seen in public reports, each with its origin.

NVLink5 XIDs (144-150, Blackwell) carry more after the number: ``<unit> Fatal|Nonfatal XC0|XC1
i<n> Link <nn> (<intrinfo> <error status> ...)``, e.g. ``NVRM: Xid (PCI:0000:04:00): 145,
RLW_REMAP Fatal XC0 i0 Link 00 (0x00000004 0x00000040 0x00000000 0x00000000)``
(fixtures/xid/nvlink5_xid.log; its origin in fixtures/xid/README.md). :func:`nvlink5_detail` reads the unit, the
link, the error status and the sub-code NVIDIA's decode table keys on: bits 20-25 of intrinfo
(NVIDIA, "XID 144-150 Decode"; gpud's kmsg parser reads the same bits). Its meaning is the
analyzer's and the alerts' business.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

from exporter.sources.protocols import pci_key

XID_FALLEN_OFF_BUS = 79
DEDUPE_SECONDS = 10.0
DEDUPE_LINES = 50
CONTEXT_LINES = 5


NVLINK5_XIDS = range(144, 151)


@dataclass(frozen=True)
class Nvlink5Detail:
    """The decode key of an NVLink5 XID line (XIDs 144-150)."""

    unit: str
    link: int
    intrinfo: int
    error_status: int

    @property
    def subcode(self) -> int:
        return (self.intrinfo >> 20) & 0x3F


_NVLINK5 = re.compile(
    r"^(?P<unit>[A-Z0-9_]+(?:/[A-Z0-9_]+)?)\s+(?:Nonfatal|Fatal)\s+XC[01]\s+i\d+\s+"
    r"Link\s+(?P<link>-?\d+)\s+\((?P<intr>0x[0-9a-fA-F]{1,8})\s+(?P<status>0x[0-9a-fA-F]{1,8})\b"
)


def nvlink5_detail(xid: int, text: str) -> Nvlink5Detail | None:
    """The unit, link, intrinfo and error status of an NVLink5 XID's text, or None when the
    XID is not one of 144-150 or the driver printed the short form."""
    if xid not in NVLINK5_XIDS:
        return None
    m = _NVLINK5.match(text)
    if m is None:
        return None
    return Nvlink5Detail(m["unit"], int(m["link"]), int(m["intr"], 16), int(m["status"], 16))


@dataclass(frozen=True)
class XidEvent:
    """One XID the driver reported for one GPU.

    ``fallen_off`` is True when the log had no XID number and the event was inferred from the
    "GPU has fallen off the bus" message (always XID 79).
    """

    pci_key: str
    xid: int
    pid: int | None
    process: str | None
    text: str
    fallen_off: bool = False
    gpu_instance: int | None = None  # MIG: GPU-I, the GPU instance the fault is attributed to
    compute_instance: int | None = None  # MIG: GPU-CI within that instance


_KMSG = re.compile(r"^\d+,(\d+),(\d+),[^;]*;(.*)$", re.S)
_CONTINUATION = re.compile(r"^ [A-Za-z0-9_.-]+=")
_SYSLOG = re.compile(r"^([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d(?:\.\d+)?) \S+ ")
_ISO = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d)?) \S+ ")
_TAG = re.compile(r"^kernel(?:\[\d+\])?: ")
_BRACKET = re.compile(r"^\[\s*([^\]]*)\] ?")
_MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
_HEX_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def split_envelope(line: str) -> tuple[float | None, str]:
    """(log time in seconds or None, message) for one raw line; continuation lines give "".

    Times are only comparable within one log: kmsg and dmesg count from boot, syslog's
    ``Feb 14 05:03:41`` has no year (seconds within a leap year), ISO times are Unix time.
    """
    line = line.rstrip("\r\n")
    if _CONTINUATION.match(line):
        return None, ""
    m = _KMSG.match(line)
    if m:  # dev-kmsg escapes newlines and other control bytes in the message as \xNN
        return int(m.group(2)) / 1e6, _HEX_ESCAPE.sub(lambda h: chr(int(h.group(1), 16)), m[3])
    when: float | None = None
    m = _SYSLOG.match(line)
    if m and m[1] in _MONTHS:
        when = _syslog_seconds(m[1], int(m[2]), int(m[3]), int(m[4]), float(m[5]))
        line = line[m.end() :]
    elif m := _ISO.match(line):
        when = _iso_seconds(m[1])
        line = line[m.end() :]
    if t := _TAG.match(line):
        line = line[t.end() :]
    if b := _BRACKET.match(line):
        line = line[b.end() :]
        when = when if when is not None else _float_or(b[1])
    return when, line


def strip_envelope(line: str) -> str:
    """The kernel message of one raw kmsg, dmesg or journal line ("" for continuations)."""
    return split_envelope(line)[1]


def _syslog_seconds(month: str, day: int, h: int, mi: int, s: float) -> float | None:
    try:  # UTC, not local time: only differences matter, and DST must not shift them
        start = datetime(2000, _MONTHS.index(month) + 1, day, h, mi, tzinfo=UTC).timestamp()
    except ValueError:
        return None
    return start + s


def _iso_seconds(text: str) -> float | None:
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def _float_or(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:  # dmesg -T: "[Fri Feb 14 05:03:41 2025]"
        return None


_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?"
    r"(?P<pci>(?:[0-9a-fA-F]{1,8}:)?[0-9a-fA-F]{2,4}:[0-9a-fA-F]{2}(?:\.\d)?)"
    r"(?: GPU-I:(?P<gi>\d+))?(?: GPU-CI:(?P<ci>\d+))?\):"
    # after the code: ", " (every driver), or the line's end, or a space where a log line was
    # cut short after the code ("...): 154 ("): the code and the GPU are still named, so count it
    r" (?P<xid>\d+)(?:, |,?$|\s+(?!\d))"
    r"(?:pid=(?P<pid>'<unknown>'|<unknown>|\d+)(?:, |,?$))?"
    r"(?:name=(?P<name>[^,]*)(?:, |,?$))?"
    r"(?P<text>.*)$"
)
_LOOKS_LIKE_XID = re.compile(r"NVRM: Xid\b")
_PCI = r"(?:PCI:)?([0-9a-fA-F]{4,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}(?:\.[0-7])?)"
_FALLEN = re.compile(r"fallen off the bus")
# Lines that name the GPU a following fallen-off-the-bus line talks about (nv.c prints the
# message over three lines: "The NVIDIA GPU <addr>", "(PCI ID: ...) installed ...",
# "fallen off the bus and is not responding to commands.").
_GPU_NAMED = re.compile(r"NVRM: (?:The NVIDIA GPU |GPU at |GPU )" + _PCI)


def looks_like_xid(message: str) -> bool:
    """True for lines the driver meant as an XID report (parse failures there are errors)."""
    return bool(_LOOKS_LIKE_XID.search(message))


def parse_xid(message: str) -> XidEvent | None:
    """The XID in one kernel message, or None when it carries none.

    Handles the ``NVRM: Xid`` line in all its driver variants and the single-line forms of the
    fallen-off-the-bus message (read as XID 79, NVIDIA's number for it).
    """
    m = _XID.search(message)
    if m:
        pid = m["pid"]
        name = m["name"]
        return XidEvent(
            pci_key=pci_key(m["pci"]),
            xid=int(m["xid"]),
            pid=int(pid) if pid and pid.isdigit() else None,
            process=None if name is None or name.strip() in ("", "<unknown>") else name.strip(),
            text=m["text"].strip(),
            gpu_instance=None if m["gi"] is None else int(m["gi"]),
            compute_instance=None if m["ci"] is None else int(m["ci"]),
        )
    if looks_like_xid(message) or not _FALLEN.search(message):
        return None
    named = _GPU_NAMED.search(message)
    if named is None:
        return None
    return _fallen_off(pci_key(named[1]), message)


def _fallen_off(key: str, message: str) -> XidEvent:
    text = message.split("NVRM: ", 1)[-1].strip()
    return XidEvent(key, XID_FALLEN_OFF_BUS, None, None, text, fallen_off=True)


@dataclass(frozen=True)
class LineResult:
    events: tuple[XidEvent, ...] = ()
    malformed: int = 0  # messages that look like an XID line but do not parse


@dataclass
class _Mark:
    fallen_off: bool
    when: float | None
    line: int


class XidLineStream:
    """Feeds raw log lines in order; returns the XID events they complete. Pure state, no I/O.

    Dedupe: the same incident logged as an ``Xid ...: 79`` line and as the fallen-off-the-bus
    message counts once. The two are one incident when they name the same GPU and lie within
    ``DEDUPE_SECONDS`` of log time (both lines carry a time) or else within ``DEDUPE_LINES``
    lines of each other. Two ``Xid 79`` lines are always two events (the driver meant both);
    repeats of the fallen-off message for one incident collapse the same way.
    """

    def __init__(self) -> None:
        self._line = 0
        self._named: tuple[str, int] | None = None  # (pci key, line) of "The NVIDIA GPU <addr>"
        self._last79: dict[str, _Mark] = {}

    def feed(self, raw: str) -> LineResult:
        when, body = split_envelope(raw)
        events: list[XidEvent] = []
        malformed = 0
        for message in body.split("\n"):
            self._line += 1
            try:
                event = parse_xid(message) or self._from_context(message)
            except ValueError:  # an address pci_key refuses
                event = None
            if event is None:
                malformed += looks_like_xid(message)
                self._remember_named(message)
            elif self._keep(event, when):
                events.append(event)
        return LineResult(tuple(events), malformed)

    def _remember_named(self, message: str) -> None:
        named = _GPU_NAMED.search(message)
        if named:
            self._named = (pci_key(named[1]), self._line)

    def _from_context(self, message: str) -> XidEvent | None:
        if self._named is None or not _FALLEN.search(message) or looks_like_xid(message):
            return None
        key, line = self._named
        if self._line - line > CONTEXT_LINES:
            return None
        self._named = None
        return _fallen_off(key, message)

    def _keep(self, event: XidEvent, when: float | None) -> bool:
        if event.xid != XID_FALLEN_OFF_BUS:
            return True
        mark = _Mark(event.fallen_off, when, self._line)
        prev = self._last79.get(event.pci_key)
        if prev is not None and (prev.fallen_off or mark.fallen_off) and _near(prev, mark):
            return False
        self._last79[event.pci_key] = mark
        return True


def _near(a: _Mark, b: _Mark) -> bool:
    if a.when is not None and b.when is not None:
        return abs(b.when - a.when) <= DEDUPE_SECONDS
    return b.line - a.line <= DEDUPE_LINES
