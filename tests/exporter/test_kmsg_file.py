"""A regular log file is followed like ``tail -F``: appends, partial lines, truncation, rotation."""

from __future__ import annotations

import os
from pathlib import Path

from exporter.sources.kmsg import MAX_LINE_BYTES, KernelLogReader, ListKernelLog


def _append(path: Path, data: bytes) -> None:
    with path.open("ab") as f:
        f.write(data)


def test_file_is_read_from_the_beginning_then_only_new_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"one\ntwo\n")
    reader = KernelLogReader(log, clock=lambda: 42.0)
    assert reader.read_new() == ["one", "two"]
    assert reader.read_new() == []
    _append(log, b"three\n")
    assert reader.read_new() == ["three"]
    assert (reader.source_name, reader.healthy, reader.last_ok_at) == ("file", True, 42.0)


def test_partial_last_line_waits_for_its_newline(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"whole\nhal")
    reader = KernelLogReader(log)
    assert reader.read_new() == ["whole"]
    _append(log, b"f a line")
    assert reader.read_new() == []
    _append(log, b"\r\n")
    assert reader.read_new() == ["half a line"]


def test_truncated_file_is_read_again_from_the_start(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"old line one\nold line two\n")
    reader = KernelLogReader(log)
    assert len(reader.read_new()) == 2
    log.write_bytes(b"new\n")  # open with O_TRUNC: same inode, smaller size
    assert reader.read_new() == ["new"]
    assert reader.truncations == 1


def test_rotated_file_finishes_the_old_file_then_reads_the_new_one(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"a\n")
    reader = KernelLogReader(log)
    assert reader.read_new() == ["a"]
    _append(log, b"b\nlast words")
    os.rename(log, tmp_path / "kern.log.1")
    log.write_bytes(b"c\n")
    assert reader.read_new() == ["b", "last words", "c"]
    assert reader.rotations == 1
    _append(log, b"d\n")
    assert reader.read_new() == ["d"]


def test_deleted_file_is_unhealthy_until_it_comes_back(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"a\n")
    reader = KernelLogReader(log)
    assert reader.read_new() == ["a"]
    _append(log, b"written just before removal\n")
    log.unlink()
    assert reader.read_new() == ["written just before removal"]
    assert not reader.healthy and "kern.log" in reader.last_error
    assert reader.read_new() == [] and not reader.healthy
    log.write_bytes(b"back\n")
    assert reader.read_new() == ["back"]
    assert reader.healthy and reader.last_error == ""


def test_missing_file_from_the_start_is_unhealthy_not_an_exception(tmp_path: Path) -> None:
    reader = KernelLogReader(tmp_path / "absent.log")
    assert reader.read_new() == []
    assert not reader.healthy and "No such file" in reader.last_error


def test_unreadable_file_is_unhealthy_with_the_reason(tmp_path: Path) -> None:
    reader = KernelLogReader(tmp_path)  # a directory: open() works, read() fails EISDIR
    assert reader.read_new() == []
    assert not reader.healthy and reader.last_error


def test_empty_file_is_healthy_with_no_lines(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"")
    reader = KernelLogReader(log)
    assert reader.read_new() == [] and reader.healthy


def test_binary_file_decodes_with_replacement_and_never_raises(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(bytes(range(256)) * 4 + b"\n")
    lines = KernelLogReader(log).read_new()
    assert lines and all(isinstance(line, str) for line in lines)
    assert any("\ufffd" in line for line in lines)


def test_a_huge_backlog_is_read_over_several_calls(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes((b"x" * 99 + b"\n") * 100)  # 10,000 bytes
    reader = KernelLogReader(log, max_bytes=4000)
    sizes = [len(reader.read_new()) for _ in range(4)]
    assert sizes == [40, 40, 20, 0]


def test_a_line_without_newline_longer_than_the_limit_is_cut_not_hoarded(tmp_path: Path) -> None:
    log = tmp_path / "kern.log"
    log.write_bytes(b"\xff" * (MAX_LINE_BYTES + 10))
    lines = KernelLogReader(log).read_new()
    assert len(lines) == 1 and len(lines[0]) == MAX_LINE_BYTES + 10


def test_list_kernel_log_hands_out_each_appended_line_once() -> None:
    log = ListKernelLog(["a"])
    log.append("b")
    assert log.read_new() == ["a", "b"]
    assert log.read_new() == []
    log.lost_records = 3
    assert (log.lost_records, log.source_name, log.healthy) == (3, "simulated", True)
