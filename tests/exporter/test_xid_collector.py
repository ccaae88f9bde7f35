"""The XID collector: a counter per (GPU, XID) that only grows, NVML events only as fallback."""

from __future__ import annotations

import random
from pathlib import Path

from exporter.catalog import (
    COLLECTOR_SUCCESS,
    GPU_INFO,
    GPU_XID_ERRORS,
    KMSG_LINES,
    KMSG_LOST,
    READ_ERRORS,
    Sample,
)
from exporter.collection import CollectionLoop
from exporter.collectors.xid import XidCollector
from exporter.exposition import render
from exporter.sources.kmsg import KernelLogReader, ListKernelLog
from exporter.sources.protocols import GpuIdentity
from tests.realcomp import promtool

NODE = "gpu-node-001"
GPUS = {
    "0000:18:00": GpuIdentity("0", "GPU-aaaa", "00000000:18:00.0", "NVIDIA H100 80GB HBM3"),
    "0000:db:00": GpuIdentity("7", "GPU-hhhh", "00000000:DB:00.0", "NVIDIA H100 80GB HBM3"),
}


def xid(bus: str, number: int, rest: str = "pid=1, name=python3, text") -> str:
    return f"[ 10.0] NVRM: Xid (PCI:0000:{bus}:00): {number}, {rest}"


class FakeXidEvents:
    """NVML XID events, scripted: ``pending`` is what the next poll returns."""

    def __init__(self) -> None:
        self.pending: list[tuple[str, int]] = []
        self.polls = 0
        self.error: Exception | None = None

    def poll(self) -> list[tuple[str, int]]:
        self.polls += 1
        if self.error is not None:
            raise self.error
        out, self.pending = self.pending, []
        return out


class RaisingLog(ListKernelLog):
    def read_new(self) -> list[str]:
        raise PermissionError(1, "Operation not permitted")


def xid_counts(samples: list[Sample] | tuple[Sample, ...]) -> dict[tuple[str, str, str], float]:
    out = {}
    for s in samples:
        if s.metric is GPU_XID_ERRORS:
            lab = s.labels
            out[(lab["gpu"], lab["uuid"], lab["xid"])] = s.value
    return out


def value(samples: list[Sample], metric: object) -> float:
    return next(s.value for s in samples if s.metric is metric)


def test_xids_are_counted_per_gpu_and_xid_with_index_and_uuid() -> None:
    log = ListKernelLog([xid("18", 13), xid("18", 13), xid("db", 48), "unrelated line"])
    samples = list(XidCollector(log, lambda: GPUS, NODE).collect())
    assert xid_counts(samples) == {("0", "GPU-aaaa", "13"): 2, ("7", "GPU-hhhh", "48"): 1}
    assert all(s.labels["node"] == NODE for s in samples)
    assert value(samples, KMSG_LINES) == 4 and value(samples, KMSG_LOST) == 0


def test_xid_on_a_pci_address_nvml_does_not_know_is_counted_under_its_pci_key() -> None:
    collector = XidCollector(ListKernelLog([xid("e1", 79)]), lambda: GPUS, NODE)
    assert xid_counts(list(collector.collect())) == {("0000:e1:00", "", "79"): 1}


def test_a_gpu_nvml_learns_about_later_keeps_the_same_counter_under_its_index() -> None:
    known: dict[str, GpuIdentity] = {}
    log = ListKernelLog([xid("18", 31)])
    collector = XidCollector(log, lambda: known, NODE)
    assert xid_counts(list(collector.collect())) == {("0000:18:00", "", "31"): 1}
    known.update(GPUS)
    log.append(xid("18", 31))
    assert xid_counts(list(collector.collect())) == {("0", "GPU-aaaa", "31"): 2}


def test_counters_never_decrease_and_series_never_disappear() -> None:
    rng = random.Random(7)
    log = ListKernelLog()
    collector = XidCollector(log, lambda: GPUS, NODE)
    before: dict[tuple[str, str, str], float] = {}
    for _ in range(30):
        for _ in range(rng.randrange(4)):
            log.append(xid(rng.choice(["18", "db"]), rng.choice([13, 31, 79, 94])))
        log.lost_records += rng.randrange(2)
        now = xid_counts(list(collector.collect()))
        assert set(before) <= set(now)
        assert all(now[k] >= v for k, v in before.items())
        before = now
    assert sum(before.values()) > 0


def test_lost_records_and_log_source_are_exported() -> None:
    log = ListKernelLog(["a", "b"])
    log.lost_records = 5
    samples = list(XidCollector(log, lambda: GPUS, NODE).collect())
    assert value(samples, KMSG_LOST) == 5
    lines = next(s for s in samples if s.metric is KMSG_LINES)
    assert lines.labels["source"] == "simulated" and lines.value == 2


def test_fallback_events_are_dropped_while_the_log_works() -> None:
    log, events = ListKernelLog(), FakeXidEvents()
    collector = XidCollector(log, lambda: GPUS, NODE, fallback=events)
    events.pending = [("0000:18:00", 13)]
    log.append(xid("18", 13))  # the same XID through both paths
    assert xid_counts(list(collector.collect())) == {("0", "GPU-aaaa", "13"): 1}
    assert events.polls == 1 and events.pending == []


def test_fallback_events_count_once_the_log_stays_unreadable() -> None:
    log, events = ListKernelLog(), FakeXidEvents()
    log.healthy = False
    collector = XidCollector(log, lambda: GPUS, NODE, fallback=events)
    events.pending = [("00000000:DB:00.0", 79)]
    assert xid_counts(list(collector.collect())) == {}  # held: one bad cycle may be logrotate
    events.pending = [("0000:18:00", 48)]
    assert xid_counts(list(collector.collect())) == {
        ("7", "GPU-hhhh", "79"): 1,
        ("0", "GPU-aaaa", "48"): 1,
    }
    events.pending = [("0000:18:00", 48)]
    assert xid_counts(list(collector.collect()))[("0", "GPU-aaaa", "48")] == 2
    assert collector.read_errors.counts["kmsg_read"] == 3


def test_events_held_during_a_one_cycle_log_gap_are_left_to_the_log() -> None:
    log, events = ListKernelLog(), FakeXidEvents()
    collector = XidCollector(log, lambda: GPUS, NODE, fallback=events)
    log.healthy = False  # the file was renamed and not yet recreated
    events.pending = [("0000:18:00", 31)]
    collector.collect()
    log.healthy = True
    log.append(xid("18", 31))  # the new file carries the same XID
    collector.collect()
    log.healthy = False
    collector.collect()
    assert xid_counts(list(collector.collect())) == {("0", "GPU-aaaa", "31"): 1}


def test_a_failing_or_nonsense_fallback_is_a_read_error_not_a_failed_collector() -> None:
    log, events = ListKernelLog(), FakeXidEvents()
    log.healthy = False
    collector = XidCollector(log, lambda: GPUS, NODE, fallback=events)
    events.pending = [("not-a-pci-address", 13)]
    collector.collect()
    events.error = RuntimeError("NVML event wait failed")
    assert xid_counts(list(collector.collect())) == {}
    assert collector.read_errors.counts["xid_fallback"] == 2


def test_a_log_that_raises_is_counted_and_the_fallback_takes_over() -> None:
    events = FakeXidEvents()
    events.pending = [("0000:18:00", 48)]
    collector = XidCollector(RaisingLog(), lambda: GPUS, NODE, fallback=events)
    collector.collect()
    assert xid_counts(list(collector.collect())) == {("0", "GPU-aaaa", "48"): 1}
    assert collector.read_errors.counts["kmsg_read"] == 2


def test_broken_xid_lines_are_read_errors_and_other_lines_are_not() -> None:
    log = ListKernelLog(["NVRM: Xid (PCI:0000:18:0", "eth0: link up", "NVRM: loading module"])
    collector = XidCollector(log, lambda: GPUS, NODE)
    collector.collect()
    assert dict(collector.read_errors.counts) == {"xid_line": 1}


def test_last_xid_names_the_latest_xid_per_gpu_for_dcgm_compat() -> None:
    log = ListKernelLog([xid("18", 13), xid("18", 48), xid("db", 31), xid("e1", 79)])
    collector = XidCollector(log, lambda: GPUS, NODE)
    collector.collect()
    assert collector.last_xid() == {"0": 48, "7": 31, "0000:e1:00": 79}
    info = GPU_INFO.make(1, NODE, "0", "GPU-aaaa", "H100", "00000000:18:00.0", "s", "v", "d")
    body = render([info, *collector.collect()], dcgm=True, last_xid=collector.last_xid())
    assert any(line.endswith(" 48") and 'UUID="GPU-aaaa"' in line for line in _dcgm(body))


def _dcgm(body: bytes) -> list[str]:
    return [line for line in body.decode().splitlines() if line.startswith("DCGM_")]


def _loop_for(path: Path) -> CollectionLoop:
    collector = XidCollector(KernelLogReader(path), lambda: GPUS, NODE)
    return CollectionLoop([collector], NODE, source="nvml", interval=1.0)


def _series(body: bytes, metric: object, **labels: str) -> float | None:
    name = getattr(metric, "name", "")
    for line in body.decode().splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


def test_empty_kmsg_file_scrapes_fine_with_zero_lines(tmp_path: Path) -> None:
    (tmp_path / "kern.log").write_bytes(b"")
    body = _loop_for(tmp_path / "kern.log").run_once().body
    assert _series(body, COLLECTOR_SUCCESS, collector="xid") == 1
    assert _series(body, KMSG_LINES, source="file") == 0


def test_binary_kmsg_file_scrapes_fine_and_shows_in_the_self_metrics(tmp_path: Path) -> None:
    (tmp_path / "kern.log").write_bytes(bytes(range(256)) * 20)  # every byte value, \n too
    body = _loop_for(tmp_path / "kern.log").run_once().body
    assert _series(body, COLLECTOR_SUCCESS, collector="xid") == 1
    assert (_series(body, KMSG_LINES, source="file") or 0) > 0
    assert (_series(body, READ_ERRORS, what="kmsg_undecodable") or 0) > 0


def test_missing_kmsg_file_scrapes_fine_and_shows_as_a_read_error(tmp_path: Path) -> None:
    body = _loop_for(tmp_path / "absent.log").run_once().body
    assert _series(body, COLLECTOR_SUCCESS, collector="xid") == 1
    assert _series(body, READ_ERRORS, collector="xid", what="kmsg_read") == 1


def test_rendered_xid_metrics_pass_promtool_check_metrics() -> None:
    log = ListKernelLog([xid("18", 13), xid("db", 79), xid("e1", 94), "NVRM: Xid (PCI:0000:1"])
    log.lost_records = 2
    collector = XidCollector(log, lambda: GPUS, NODE)
    body = render(collector.collect())
    assert _series(body, GPU_XID_ERRORS, gpu="0000:e1:00", xid="94") == 1
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stderr.decode()
