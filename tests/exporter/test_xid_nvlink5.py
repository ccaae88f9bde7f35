"""NVLink5 XIDs (144-150): the exporter reads the decode key of each line (unit, error status,
sub-code) and counts it beside the plain per-XID counter. Lines: fixtures/xid/nvlink5_xid.log
(origin in fixtures/xid/README.md)."""

from __future__ import annotations

from pathlib import Path

from exporter.catalog import GPU_XID_ERRORS, GPU_XID_NVLINK5_ERRORS
from exporter.collectors.xid import XidCollector
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.protocols import GpuIdentity
from exporter.sources.xid_lines import nvlink5_detail, parse_xid, strip_envelope

ROOT = Path(__file__).resolve().parents[2]
LINES = (ROOT / "fixtures/xid/nvlink5_xid.log").read_text().splitlines()
GPUS = {"0000:04:00": GpuIdentity("2", "GPU-cccc", "00000000:04:00.0", "NVIDIA GB200")}


def _detail(line: str):
    event = parse_xid(strip_envelope(line))
    assert event is not None, line
    return event, nvlink5_detail(event.xid, event.text)


def test_every_recorded_nvlink5_line_yields_its_unit_status_and_sub_code() -> None:
    for line in LINES:
        event, detail = _detail(line)
        assert 144 <= event.xid <= 150
        assert detail is not None, line
        assert detail.unit in line and f"0x{detail.error_status:08x}" in line


def test_the_sub_code_is_bits_20_to_25_of_intrinfo() -> None:
    _, detail = _detail(next(x for x in LINES if "(0x02500011 " in x))
    assert detail is not None and detail.subcode == 0b100101
    assert detail.unit == "NETIR_LINK_EVT/NETIR_LINK_DOWN" and detail.link == 0
    _, short = _detail(LINES[-1])  # gpud's example: the first half of the unit, Link 08
    assert short is not None and (short.unit, short.link, short.subcode) == ("NETIR_LINK_EVT", 8, 4)


def test_an_older_xid_or_a_short_nvlink5_line_has_no_decode_key() -> None:
    assert nvlink5_detail(74, "SAW_MVB Fatal XC0 i0 Link 00 (0x00000001 0x00000002)") is None
    assert nvlink5_detail(149, "pid=1, name=python3, Ch 00000008") is None


def test_decoded_lines_count_per_unit_status_and_sub_code_and_in_the_xid_counter() -> None:
    fatal = next(x for x in LINES if "RLW_REMAP Fatal" in x)
    log = ListKernelLog([fatal, fatal, LINES[0]])
    samples = XidCollector(log, lambda: GPUS, "n1").collect()
    sub = {
        (s.labels["gpu"], s.labels["xid"], s.labels["unit"], s.labels["error_status"],
         s.labels["subcode"]): s.value
        for s in samples
        if s.metric is GPU_XID_NVLINK5_ERRORS
    }  # fmt: skip
    assert sub == {
        ("2", "145", "RLW_REMAP", "0x00000040", "0"): 2,
        ("2", "144", "SAW_MVB", "0x00000001", "0"): 1,
    }
    plain = {s.labels["xid"]: s.value for s in samples if s.metric is GPU_XID_ERRORS}
    assert plain == {"144": 1, "145": 2}


def test_a_line_without_the_decode_key_counts_only_as_its_xid() -> None:
    log = ListKernelLog(["[ 1.0] NVRM: Xid (PCI:0000:04:00): 149, pid=1, name=x, link down"])
    samples = XidCollector(log, lambda: GPUS, "n1").collect()
    assert not [s for s in samples if s.metric is GPU_XID_NVLINK5_ERRORS]
    assert [s.value for s in samples if s.metric is GPU_XID_ERRORS] == [1]
