"""XID counting survives exporter restarts (issue 17): with a state file the counts and the
kernel-log position carry over, so old records are not counted again; without one, /dev/kmsg
records older than the backlog margin are skipped."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from exporter.catalog import GPU_XID_ERRORS, XID_STATE_RESTORED
from exporter.collectors.xid import XidCollector
from exporter.settings import ExporterSettings
from exporter.sources.kmsg import KernelLogReader
from exporter.sources.kmsg_state import XidStateFile
from exporter.sources.protocols import GpuIdentity

NODE = "gpu-node-001"
GPUS = {"0000:18:00": GpuIdentity("0", "GPU-aaaa", "00000000:18:00.0", "NVIDIA H100 80GB HBM3")}
CHAR_DEVICE = "/dev/null"  # a real character device; reads are scripted


def kmsg_xid(seq: int, number: int, seconds_since_boot: float) -> bytes:
    usec = int(seconds_since_boot * 1_000_000)
    return f"4,{seq},{usec},-;NVRM: Xid (PCI:0000:18:00): {number}, pid=1, name=p\n".encode()


class Ring:
    """A kmsg ring buffer: every fresh reader starts at the oldest record (as a reopen does)."""

    def __init__(self, records: list[bytes]) -> None:
        self.records = records

    def reader(self, boot_id: str = "boot-a") -> KernelLogReader:
        pending = list(self.records)

        def read(fd: int, n: int) -> bytes:
            if not pending:
                raise BlockingIOError(errno.EAGAIN, "again")
            return pending.pop(0)

        return KernelLogReader(CHAR_DEVICE, read=read, boot_id=lambda: boot_id)


def xid_counts(collector: XidCollector) -> dict[str, float]:
    return {s.labels["xid"]: s.value for s in collector.collect() if s.metric is GPU_XID_ERRORS}


def test_a_restarted_exporter_with_a_state_file_does_not_count_old_records_again(
    tmp_path: Path,
) -> None:
    ring = Ring([kmsg_xid(1, 48, 100.0)])
    state = tmp_path / "xid-state.json"
    first = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state))
    assert xid_counts(first) == {"48": 1}
    ring.records.append(kmsg_xid(2, 79, 200.0))  # logged while the exporter was down
    second = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state))
    assert xid_counts(second) == {"48": 1, "79": 1}  # 48 not twice; 79 counted once


def test_the_counter_goes_on_from_its_saved_value_so_a_restart_is_not_a_reset(
    tmp_path: Path,
) -> None:
    ring = Ring([kmsg_xid(1, 13, 10.0), kmsg_xid(2, 13, 11.0)])
    state = XidStateFile(tmp_path / "s.json")
    assert xid_counts(XidCollector(ring.reader(), lambda: GPUS, NODE, state=state)) == {"13": 2}
    ring.records.append(kmsg_xid(3, 13, 12.0))
    again = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state.path))
    assert xid_counts(again) == {"13": 3}


def test_after_a_reboot_the_saved_position_does_not_apply_and_new_records_count(
    tmp_path: Path,
) -> None:
    state = tmp_path / "s.json"
    XidCollector(Ring([kmsg_xid(900, 48, 50.0)]).reader("boot-a"), lambda: GPUS, NODE,
                 state=XidStateFile(state)).collect()  # fmt: skip
    rebooted = Ring([kmsg_xid(5, 48, 20.0)]).reader("boot-b")  # sequence numbers start over
    after = XidCollector(rebooted, lambda: GPUS, NODE, state=XidStateFile(state))
    assert xid_counts(after) == {"48": 2}


def test_without_a_state_file_records_older_than_the_backlog_margin_are_skipped() -> None:
    ring = Ring([kmsg_xid(1, 48, 100.0), kmsg_xid(2, 79, 4000.0)])
    reader = ring.reader()
    reader.skip_older_than(600, now=lambda: 4300.0)  # started 4300 s after boot
    collector = XidCollector(reader, lambda: GPUS, NODE)
    assert xid_counts(collector) == {"79": 1}  # 5 min before the start: counts; 70 min: not


def test_the_collector_applies_the_backlog_margin_only_without_a_usable_position(
    tmp_path: Path,
) -> None:
    state = tmp_path / "s.json"
    ring = Ring([kmsg_xid(1, 48, 1.0)])
    first = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state),
                         backlog_seconds=1e9)  # fmt: skip
    assert xid_counts(first) == {"48": 1}  # everything since boot is inside the margin
    ring.records.append(kmsg_xid(2, 79, 2.0))  # older than any margin, but after the position
    second = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state),
                          backlog_seconds=0.0)  # fmt: skip
    assert xid_counts(second) == {"48": 1, "79": 1}


def test_a_followed_file_resumes_at_its_saved_offset(tmp_path: Path) -> None:
    log, state = tmp_path / "kern.log", tmp_path / "s.json"
    log.write_text("[ 1.0] NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=p\n")
    XidCollector(KernelLogReader(log), lambda: GPUS, NODE, state=XidStateFile(state)).collect()
    with log.open("a") as f:
        f.write("[ 2.0] NVRM: Xid (PCI:0000:18:00): 48, pid=1, name=p\n")
    again = XidCollector(KernelLogReader(log), lambda: GPUS, NODE, state=XidStateFile(state))
    assert xid_counts(again) == {"48": 2}


def test_a_corrupt_state_file_is_reported_and_treated_as_a_first_start(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    state.write_text("{not json")
    collector = XidCollector(Ring([kmsg_xid(1, 48, 1.0)]).reader(), lambda: GPUS, NODE,
                             state=XidStateFile(state))  # fmt: skip
    assert xid_counts(collector) == {"48": 1}
    assert collector.read_errors.counts["xid_state"] == 1
    saved = json.loads(state.read_text())  # replaced by a good one
    assert saved["counts"] == [["0000:18:00", 48, 1]]
    assert saved["position"] == {"kind": "kmsg", "boot_id": "boot-a", "seq": 1}


def test_an_unwritable_state_file_costs_a_read_error_not_the_counts(tmp_path: Path) -> None:
    state = XidStateFile(tmp_path / "missing-dir" / "s.json")
    collector = XidCollector(Ring([kmsg_xid(1, 48, 1.0)]).reader(), lambda: GPUS, NODE,
                             state=state)  # fmt: skip
    assert xid_counts(collector) == {"48": 1}
    assert collector.read_errors.counts["xid_state"] == 1 and state.save_error


def test_a_state_file_in_a_missing_directory_or_a_negative_backlog_stops_the_start() -> None:
    with pytest.raises(ValueError, match="--kmsg-state"):
        ExporterSettings(node="n", kmsg_state="/nonexistent-gpuwarden-dir/xid-state.json")
    with pytest.raises(ValueError, match="--kmsg-backlog"):
        ExporterSettings(node="n", kmsg_backlog=-1)


def restored(collector: XidCollector) -> float:
    (s,) = [s for s in collector.collect() if s.metric is XID_STATE_RESTORED]
    return s.value


def test_the_exporter_says_whether_its_xid_counts_were_carried_over(tmp_path: Path) -> None:
    state = tmp_path / "s.json"
    ring = Ring([kmsg_xid(1, 48, 1.0)])
    first = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state))
    assert restored(first) == 0.0  # nothing saved yet: counts begin now
    again = XidCollector(ring.reader(), lambda: GPUS, NODE, state=XidStateFile(state))
    assert restored(again) == 1.0
    assert restored(XidCollector(ring.reader(), lambda: GPUS, NODE)) == 0.0  # no state file
