"""/dev/kmsg records: EAGAIN ends a read, EPIPE counts lost records, a reopen never re-counts.

The record logic runs against /dev/null (a real character device) with ``read`` injected, so
the test scripts what the kernel would return; /dev/kmsg itself is read only if readable.
"""

from __future__ import annotations

import errno
from collections.abc import Iterable

from exporter.sources.kmsg import KernelLogReader

CHAR_DEVICE = "/dev/null"


class ScriptedKmsg:
    """A read(fd, n) that returns scripted records and raises scripted errors, then EAGAIN."""

    def __init__(self, script: Iterable[bytes | OSError] = ()) -> None:
        self.script = list(script)
        self.sizes: list[int] = []

    def __call__(self, fd: int, n: int) -> bytes:
        self.sizes.append(n)
        if not self.script:
            raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
        item = self.script.pop(0)
        if isinstance(item, OSError):
            raise item
        return item


def rec(seq: int, message: str = "hello") -> bytes:
    return f"6,{seq},{seq * 1000},-;{message}\n SUBSYSTEM=pci\n".encode()


def epipe() -> BrokenPipeError:
    return BrokenPipeError(errno.EPIPE, "Broken pipe")


def test_records_are_read_until_eagain_one_line_per_record() -> None:
    kmsg = ScriptedKmsg([rec(1, "a"), rec(2, "b")])
    reader = KernelLogReader(CHAR_DEVICE, read=kmsg)
    assert reader.read_new() == ["6,1,1000,-;a", "6,2,2000,-;b"]
    assert (reader.source_name, reader.healthy, reader.lost_records) == ("kmsg", True, 0)
    assert min(kmsg.sizes) >= 8192  # smaller buffers make /dev/kmsg fail with EINVAL


def test_epipe_counts_the_overwritten_records_from_the_sequence_gap() -> None:
    reader = KernelLogReader(CHAR_DEVICE, read=ScriptedKmsg([rec(10), epipe(), rec(15)]))
    assert len(reader.read_new()) == 2
    assert reader.lost_records == 4  # 11, 12, 13, 14


def test_epipe_before_any_record_counts_one_lost_record() -> None:
    reader = KernelLogReader(CHAR_DEVICE, read=ScriptedKmsg([epipe(), rec(500)]))
    assert reader.read_new() == ["6,500,500000,-;hello"]
    assert reader.lost_records == 1


def test_epipe_with_nothing_after_it_still_counts_a_loss() -> None:
    reader = KernelLogReader(CHAR_DEVICE, read=ScriptedKmsg([rec(1), epipe()]))
    assert len(reader.read_new()) == 1 and reader.lost_records == 1


def test_sequence_gap_across_calls_is_counted_as_lost() -> None:
    kmsg = ScriptedKmsg([rec(1)])
    reader = KernelLogReader(CHAR_DEVICE, read=kmsg)
    reader.read_new()
    kmsg.script = [epipe(), rec(9)]
    reader.read_new()
    assert reader.lost_records == 7


def test_read_error_makes_the_log_unhealthy_and_a_reopen_skips_records_already_read() -> None:
    kmsg = ScriptedKmsg([rec(1, "a"), OSError(errno.EIO, "Input/output error")])
    reader = KernelLogReader(CHAR_DEVICE, read=kmsg)
    assert reader.read_new() == ["6,1,1000,-;a"]
    assert not reader.healthy and "Input/output error" in reader.last_error
    kmsg.script = [rec(1, "a"), rec(2, "b")]  # a fresh open starts at the oldest record again
    assert reader.read_new() == ["6,2,2000,-;b"]
    assert reader.healthy and reader.lost_records == 0


def test_missing_device_is_unhealthy_not_an_exception() -> None:
    reader = KernelLogReader("/dev/gpuwarden-no-such-kmsg", read=ScriptedKmsg())
    assert reader.read_new() == []
    assert not reader.healthy and reader.source_name == "kmsg"


def test_records_without_a_kmsg_header_still_come_through() -> None:
    reader = KernelLogReader(CHAR_DEVICE, read=ScriptedKmsg([b"\xff\xfe junk\n", rec(3)]))
    assert reader.read_new() == ["\ufffd\ufffd junk", "6,3,3000,-;hello"]


def test_a_flood_of_records_is_read_over_several_calls() -> None:
    kmsg = ScriptedKmsg([rec(i, "x" * 80) for i in range(1, 201)])
    reader = KernelLogReader(CHAR_DEVICE, read=kmsg, max_bytes=4000)
    first = reader.read_new()
    assert 0 < len(first) < 200
    total = len(first) + sum(len(reader.read_new()) for _ in range(10))
    assert total == 200 and reader.lost_records == 0


def test_the_real_dev_kmsg_reads_without_raising_or_says_why_not() -> None:
    reader = KernelLogReader("/dev/kmsg")
    try:
        lines = reader.read_new()
    finally:
        reader.close()
    assert len(lines) >= 0 and reader.source_name == "kmsg"
    # readable but refused (dmesg_restrict, a container) is fine too, as long as it says so
    assert reader.healthy or reader.last_error.startswith("/dev/kmsg: ")
    assert reader.healthy == (reader.last_error == "")
