"""amdgpu kernel-log lines from public reports parse to the events an operator acts on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import catalog as c
from exporter.collectors.amdgpu_log import AmdgpuLogCollector
from exporter.sources.amdgpu_lines import CONTEXT_LINES, AmdgpuLineStream, parse_amdgpu
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.protocols import GpuIdentity

CORPUS = Path(__file__).resolve().parents[2] / "fixtures" / "kmsg" / "amdgpu_corpus.yaml"
ENTRIES: list[dict[str, Any]] = yaml.safe_load(CORPUS.read_text())["entries"]


def _parse(lines: list[str]) -> list[dict[str, str]]:
    stream = AmdgpuLineStream()
    events = [e for line in lines for e in stream.feed(line)] + stream.flush()
    return [{"pci": e.pci_key, "event": e.event, "detail": e.detail} for e in events]


def test_every_corpus_entry_names_a_public_origin_and_each_event_kind_is_covered() -> None:
    assert all(e["origin"].strip() and not e["origin"].startswith("constructed") for e in ENTRIES)
    kinds = {ev["event"] for e in ENTRIES for ev in e["events"]}
    assert kinds == {"ras_poison_consumed", "ras_poison_created", "ras_uncorrectable",
                     "ring_timeout", "gpu_reset"}  # fmt: skip


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda e: e["origin"][:60])
def test_a_recorded_line_parses_to_exactly_its_events(entry: dict[str, Any]) -> None:
    assert _parse(entry["lines"]) == entry["events"]


def test_a_ring_timeout_whose_device_never_comes_is_counted_unattributed_not_dropped() -> None:
    stream = AmdgpuLineStream()
    first = stream.feed("[drm:amdgpu_job_timedout [amdgpu]] *ERROR* ring gfx timeout, "
                        "signaled seq=1, emitted seq=3")  # fmt: skip
    assert first == []
    late = [e for _ in range(CONTEXT_LINES + 1) for e in stream.feed("[drm] something else")]
    assert [(e.pci_key, e.event) for e in late] == [("", "ring_timeout")]
    assert stream.flush() == []


def test_a_line_of_another_driver_or_without_a_device_is_not_an_event() -> None:
    assert parse_amdgpu("nvme 0000:01:00.0: GPU reset begin!") is None
    assert parse_amdgpu("drmn0: GPU reset begin!") is None


class _Kmsg(ListKernelLog):
    def __init__(self, lines: list[str]) -> None:
        super().__init__(lines)
        self.skipped: float | None = None

    def skip_older_than(self, seconds: float) -> None:
        self.skipped = seconds


def test_the_collector_counts_per_gpu_and_event_named_through_amdsmi_identities() -> None:
    log = _Kmsg([e for entry in ENTRIES[:3] for e in entry["lines"]])
    ids = {"0000:68:00": GpuIdentity("2", "uuid-2", "0000:68:00.0")}
    col = AmdgpuLogCollector(log, lambda: ids, "m1", backlog_seconds=600)
    got = {(s.labels["gpu"], s.labels["event"]): s.value
           for s in col.collect() if s.metric is c.GPU_AMDGPU_EVENTS}  # fmt: skip
    assert got[("2", "ras_uncorrectable")] == 1 and got[("2", "ras_poison_consumed")] == 1
    assert got[("0000:e3:00", "gpu_reset")] == 1  # a device amdsmi does not know: its PCI key
    assert log.skipped == 600  # old /dev/kmsg records are not counted again after a restart
    log.append(ENTRIES[0]["lines"][0])
    again = [s for s in col.collect() if s.metric is c.GPU_AMDGPU_EVENTS]
    assert {s.value for s in again if s.labels["event"] == "ras_uncorrectable"} == {2.0, 1.0}
