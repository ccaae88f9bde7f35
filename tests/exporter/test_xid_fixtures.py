"""Recorded kernel logs (dmesg, kmsg, journal, truncated) against fixtures/kmsg/expected.yaml."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.catalog import GPU_XID_ERRORS, KMSG_LINES
from exporter.collectors.xid import XidCollector
from exporter.sources.kmsg import KernelLogReader
from exporter.sources.protocols import GpuIdentity, pci_key

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "kmsg"
EXPECTED: dict[str, dict[str, Any]] = yaml.safe_load((FIXTURES / "expected.yaml").read_text())
HGX_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")
GPUS = {
    pci_key(f"00000000:{bus.upper()}:00.0"): GpuIdentity(
        str(i), f"GPU-0000000{i}-hgx", f"00000000:{bus.upper()}:00.0", "NVIDIA H100 80GB HBM3"
    )
    for i, bus in enumerate(HGX_BUSES)
}


def _collect(name: str) -> tuple[XidCollector, dict[str, dict[int, int]], float]:
    collector = XidCollector(KernelLogReader(FIXTURES / name), lambda: GPUS, "gpu-node-001")
    seen: dict[str, dict[int, int]] = {}
    lines = -1.0
    for s in collector.collect():
        lab = s.labels
        if s.metric is GPU_XID_ERRORS:
            assert lab["uuid"] == GPUS[pci_key(HGX_BUSES[int(lab["gpu"])] + ":00")].uuid
            seen.setdefault(lab["gpu"], {})[int(lab["xid"])] = int(s.value)
        elif s.metric is KMSG_LINES:
            lines = s.value
    return collector, seen, lines


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_xid_lands_on_the_right_gpu_with_the_right_count(name: str) -> None:
    want = {gpu: dict(xids) for gpu, xids in EXPECTED[name]["xids"].items()}
    assert _collect(name)[1] == want


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_every_fixture_counts_its_lines_and_its_bad_lines(name: str) -> None:
    collector, _, lines = _collect(name)
    assert lines == EXPECTED[name]["lines"]
    assert collector.read_errors.counts["xid_line"] == EXPECTED[name]["malformed"]
    assert collector.read_errors.counts["kmsg_undecodable"] == EXPECTED[name]["undecodable"]


def test_fixtures_hold_at_least_15_distinct_real_format_xid_lines_across_all_8_gpus() -> None:
    xid_line = re.compile(rb"NVRM: Xid \(PCI:0000:([0-9a-f]{2}):00\): (\d+), ")
    found = {
        m.groups() for name in EXPECTED for m in xid_line.finditer((FIXTURES / name).read_bytes())
    }
    assert len({xid for _, xid in found}) >= 15
    assert {bus.decode() for bus, _ in found} == set(HGX_BUSES)


def test_fixtures_cover_the_three_shapes_garbage_and_a_cut_last_line() -> None:
    kmsg = (FIXTURES / "kmsg.log").read_bytes()
    assert re.search(rb"^\d+,\d+,\d+,[^;]*;NVRM: Xid", kmsg, re.M)
    assert re.search(rb"^ SUBSYSTEM=pci$", kmsg, re.M)
    assert re.search(rb"^\[ *\d+\.\d+\] NVRM: Xid", (FIXTURES / "dmesg.log").read_bytes(), re.M)
    journal = (FIXTURES / "journal.log").read_bytes()
    assert re.search(rb"^[A-Z][a-z]{2} \d\d \d\d:\d\d:\d\d \S+ kernel: NVRM: Xid", journal, re.M)
    assert re.search(rb"^\d{4}-\d\d-\d\dT\S+ \S+ kernel: NVRM: Xid", journal, re.M)
    with pytest.raises(UnicodeDecodeError):
        (FIXTURES / "dmesg.log").read_bytes().decode("utf-8")
    assert not (FIXTURES / "truncated.log").read_bytes().endswith(b"\n")
