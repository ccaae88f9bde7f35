"""Kernel log readers: ``/dev/kmsg`` records, or a log file followed like ``tail -F``.

Sits at the edge of the XID path: readers hand raw lines to
:class:`exporter.sources.xid_lines.XidLineStream` via the XID collector. They never raise on
I/O: a failed read sets ``healthy = False`` and ``last_error`` (the collector then falls back to
NVML XID events) and the next call tries again.

``/dev/kmsg`` (kernel Documentation/ABI/testing/dev-kmsg): one ``read()`` returns one record;
a fresh open starts at the *oldest* record still in the ring buffer, so XIDs logged before the
exporter started still count. ``EAGAIN`` means no more records now; ``EPIPE`` means the ring
buffer overwrote records we had not read: the next read returns the oldest record left, and the
gap in sequence numbers is what we lost.

Restarts (issue 17): ``position()`` / ``restore()`` let the XID collector persist where it
stopped (kmsg: the boot id and the last sequence number; a file: device, inode and offset), so a
restarted exporter does not count old records again. Without a usable saved position,
``skip_older_than(seconds)`` makes a ``/dev/kmsg`` reader skip records stamped more than that
long before its start (the kernel's timestamp is time since boot, compared with
``CLOCK_MONOTONIC``); XIDs from just before the start still count.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from collections.abc import Callable, Iterable

MAX_BYTES_PER_CALL = 4 << 20  # a huge backlog is read over several cycles, never in one
RECORD_BYTES = 16384  # > CONSOLE_EXT_LOG_MAX (8 KiB): a smaller buffer makes read() fail EINVAL
MAX_LINE_BYTES = 64 << 10  # a "line" without a newline (binary junk) is cut here
BOOT_ID = "/proc/sys/kernel/random/boot_id"

ReadFn = Callable[[int, int], bytes]


class KernelLogReader:
    """:class:`~exporter.sources.protocols.KernelLog` over a kmsg device or a regular file.

    ``read`` (``os.read`` by default) is injectable so the EPIPE and overrun logic is tested
    without a kernel; ``clock`` stamps ``last_ok_at``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Callable[[], float] = time.time,
        read: ReadFn = os.read,
        max_bytes: int = MAX_BYTES_PER_CALL,
        boot_id: Callable[[], str] | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self._clock = clock
        self._read = read
        self._max_bytes = max_bytes
        self._fd: int | None = None
        self._kind = "kmsg" if self.path.startswith("/dev/") else "file"
        self.lost_records = 0
        self.healthy = True
        self.last_error = ""
        self.last_ok_at: float | None = None
        self.truncations = 0
        self.rotations = 0
        self._last_seq: int | None = None  # kmsg: survives a reopen, so nothing counts twice
        self._overrun = False
        self._file_id: tuple[int, int] | None = None
        self._offset = 0
        self._pending = b""
        self._min_usec: int | None = None  # kmsg records stamped earlier are skipped
        self._boot_id = boot_id or _boot_id

    @property
    def source_name(self) -> str:
        return self._kind

    def read_new(self) -> list[str]:
        """Complete lines (kmsg: one per record) that arrived since the last call."""
        lines: list[str] = []
        try:
            st = os.stat(self.path)
            self._kind = "kmsg" if stat.S_ISCHR(st.st_mode) else "file"
            if self._kind == "kmsg":
                self._read_device(lines)
            else:
                self._read_file(st, lines)
        except OSError as e:
            if self._kind == "file" and self._fd is not None:
                self._finish_old_file(lines)  # deleted or unreadable: keep what was written
            self._fail(e)
            return lines
        self.healthy, self.last_error, self.last_ok_at = True, "", self._clock()
        return lines

    def position(self) -> dict[str, object]:
        """Where reading stopped, for :mod:`exporter.sources.kmsg_state` (empty: nowhere yet)."""
        if self._kind == "kmsg":
            if self._last_seq is None:
                return {}
            return {"kind": "kmsg", "boot_id": self._boot_id(), "seq": self._last_seq}
        if self._file_id is None:
            return {}
        dev, ino = self._file_id
        return {"kind": "file", "dev": dev, "ino": ino, "offset": self._offset - len(self._pending)}

    def restore(self, pos: dict[str, object]) -> bool:
        """Go on after a saved ``position()``; False (nothing changed) when it does not apply:
        another boot, another file, or a file now shorter than the saved offset."""
        try:
            if pos.get("kind") == "kmsg":
                if self._kind != "kmsg" or pos.get("boot_id") != self._boot_id():
                    return False
                self._last_seq = int(str(pos["seq"]))
                return True
            if pos.get("kind") == "file":
                st = os.stat(self.path)
                offset = int(str(pos["offset"]))
                if (st.st_dev, st.st_ino) != (
                    pos.get("dev"),
                    pos.get("ino"),
                ) or st.st_size < offset:
                    return False
                self._fd = os.open(self.path, os.O_RDONLY)
                self._file_id, self._offset, self._pending = (st.st_dev, st.st_ino), offset, b""
                return True
        except (OSError, KeyError, ValueError):
            return False
        return False

    def skip_older_than(self, seconds: float, *, now: Callable[[], float] | None = None) -> None:
        """Skip kmsg records stamped more than ``seconds`` before now (monotonic, since boot)."""
        mono = now() if now else time.clock_gettime(time.CLOCK_MONOTONIC)
        self._min_usec = int(max(0.0, mono - seconds) * 1_000_000)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _fail(self, e: OSError) -> None:
        self.close()
        self.healthy = False
        self.last_error = f"{self.path}: {e.strerror or e}"

    # ------------------------------------------------------------------ /dev/kmsg
    def _read_device(self, out: list[str]) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        budget = self._max_bytes
        for _ in range(self._max_bytes // 32 + 1):  # bounded even if read() misbehaves
            if budget <= 0:
                break
            try:
                record = self._read(self._fd, RECORD_BYTES)
            except BlockingIOError:  # EAGAIN: nothing more right now
                break
            except BrokenPipeError:  # EPIPE: the ring buffer overwrote unread records
                self._overrun = True
                continue
            except InterruptedError:
                continue
            if not record:
                break
            budget -= len(record)
            line = self._record_line(record)
            if line is not None:
                out.append(line)
        if self._overrun:  # lost records but saw no later one to measure the gap by
            self.lost_records += 1
            self._overrun = False

    def _record_line(self, record: bytes) -> str | None:
        """The record's first line, or None for one already read before a reopen."""
        line = record.decode("utf-8", errors="replace").split("\n", 1)[0]
        seq = _sequence(line)
        if seq is None:
            return line
        if self._last_seq is not None:
            if seq <= self._last_seq:
                return None
            gap = seq - self._last_seq - 1
            self.lost_records += gap if gap > 0 else int(self._overrun)
        elif self._overrun:
            self.lost_records += 1
        self._overrun = False
        self._last_seq = seq
        if self._min_usec is not None and _stamp(line) < self._min_usec:
            return None  # logged long before this start, with no saved position: not new
        return line

    # ------------------------------------------------------------------ regular file, tail -F
    def _read_file(self, st: os.stat_result, out: list[str]) -> None:
        if self._fd is not None and self._file_id != (st.st_dev, st.st_ino):
            self._finish_old_file(out)  # rotated: the old file's tail, then the new file
            self.rotations += 1
        if self._fd is None:
            self._fd = os.open(self.path, os.O_RDONLY)
            self._file_id, self._offset, self._pending = (st.st_dev, st.st_ino), 0, b""
        if st.st_size < self._offset:  # truncated (copytruncate, `> file`): start over
            self._offset, self._pending = 0, b""
            self.truncations += 1
        self._read_chunk(out, final=False)

    def _read_chunk(self, out: list[str], *, final: bool) -> None:
        assert self._fd is not None
        data = os.pread(self._fd, self._max_bytes, self._offset)
        self._offset += len(data)
        *complete, rest = (self._pending + data).split(b"\n")
        if final or len(rest) > MAX_LINE_BYTES:
            complete, rest = [*complete, rest] if rest else complete, b""
        self._pending = rest
        out.extend(_decode(complete))

    def _finish_old_file(self, out: list[str]) -> None:
        with contextlib.suppress(OSError):
            self._read_chunk(out, final=True)
        self.close()
        self._file_id = None


def _sequence(line: str) -> int | None:
    head = line.split(";", 1)[0].split(",")
    try:
        return int(head[1]) if len(head) >= 4 and ";" in line else None
    except ValueError:
        return None


def _stamp(line: str) -> int:
    head = line.split(";", 1)[0].split(",")
    try:
        return int(head[2])
    except (IndexError, ValueError):
        return 1 << 62  # no stamp: keep the record


def _boot_id() -> str:
    try:
        with open(BOOT_ID, encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _decode(chunks: Iterable[bytes]) -> list[str]:
    return [c.rstrip(b"\r").decode("utf-8", errors="replace") for c in chunks]


class ListKernelLog:
    """The fake kernel log: tests and the fleet simulator append lines; ``read_new`` drains."""

    source_name = "simulated"

    def __init__(self, lines: Iterable[str] = ()) -> None:
        self._lines = list(lines)
        self.lost_records = 0
        self.healthy = True
        self.last_error = ""

    def append(self, line: str) -> None:
        self._lines.append(line)

    def extend(self, lines: Iterable[str]) -> None:
        self._lines.extend(lines)

    def read_new(self) -> list[str]:
        out, self._lines = self._lines, []
        return out
