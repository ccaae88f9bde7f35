"""XID line parsing: every envelope shape and driver variant, one table row each."""

from __future__ import annotations

import pytest

from exporter.sources.xid_lines import (
    XidEvent,
    XidLineStream,
    looks_like_xid,
    parse_xid,
    split_envelope,
    strip_envelope,
)

MSG = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ("6,1234,5678901,-;" + MSG, MSG),
        ("4,17,1843308145,c,caller=T12;" + MSG, MSG),
        ("[ 1843.308145] " + MSG, MSG),
        ("[Fri Feb 14 05:03:41 2025] " + MSG, MSG),
        ("Feb 14 05:03:41 host kernel: " + MSG, MSG),
        ("Feb  4 05:03:41 gpu-node-001 kernel: " + MSG, MSG),
        ("Feb 14 05:03:41.123456 host kernel: " + MSG, MSG),
        ("Feb 14 05:03:41 host kernel[0]: " + MSG, MSG),
        ("2025-02-14T05:03:41+0000 host kernel: " + MSG, MSG),
        ("2025-02-14T05:03:41.123456+00:00 host kernel: " + MSG, MSG),
        ("Feb 14 05:03:41 host kernel: [ 123.4] " + MSG, MSG),
        ("kernel: [ 123.4] " + MSG, MSG),
        (MSG + "\n", MSG),
        (" SUBSYSTEM=pci", ""),
        (" DEVICE=+pci:0000:3b:00.0", ""),
    ],
)
def test_every_envelope_shape_strips_to_the_kernel_message(raw: str, message: str) -> None:
    assert strip_envelope(raw) == message


def test_kmsg_escaped_newlines_become_separate_message_lines() -> None:
    raw = r"4,9,100,-;NVRM: The NVIDIA GPU 0000:b3:00.0\x0aNVRM: (PCI ID: 10de:2330) x"
    assert strip_envelope(raw).split("\n") == [
        "NVRM: The NVIDIA GPU 0000:b3:00.0",
        "NVRM: (PCI ID: 10de:2330) x",
    ]


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        ("6,1,5678901,-;x", 5.678901),
        ("[ 1843.308145] x", 1843.308145),
        ("2025-02-14T05:03:41+0000 h kernel: x", 1739509421.0),
        ("x without an envelope", None),
    ],
)
def test_envelope_log_time_is_read_where_the_line_has_one(raw: str, seconds: float | None) -> None:
    assert split_envelope(raw)[0] == seconds


def test_syslog_times_are_comparable_within_a_log() -> None:
    a = split_envelope("Feb 14 05:03:41 h kernel: x")[0]
    b = split_envelope("Feb 14 05:03:46.5 h kernel: x")[0]
    c = split_envelope("Mar  1 00:00:01 h kernel: x")[0]
    assert a is not None and b is not None and c is not None
    assert b - a == 5.5 and c > b


def test_journal_short_monotonic_line_still_yields_its_xid() -> None:
    event = parse_xid(strip_envelope("[ 1843.308145] gpu-node-001 kernel: " + MSG))
    assert event is not None and (event.pci_key, event.xid) == ("0000:3b:00", 79)


P = "NVRM: Xid (PCI:0000:3b:00): "


@pytest.mark.parametrize(
    ("message", "xid", "pid", "process", "text"),
    [
        (P + "79, pid=1234, name=python, GPU has fallen off the bus.", 79, 1234, "python", "GPU has fallen off the bus."),
        (P + "13, pid=2211, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)", 13, 2211, None, "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0)"),
        (P + "31, Ch 00000010, engmask 00000101, intr 10000000", 31, None, None, "Ch 00000010, engmask 00000101, intr 10000000"),
        (P + "48, pid='<unknown>', name=<unknown>, An uncorrectable double bit error", 48, None, None, "An uncorrectable double bit error"),
        (P + "63, pid=<unknown>, name=<unknown>, Row Remapper: New row marked", 63, None, None, "Row Remapper: New row marked"),
        (P + "74, pid=1912, name=python3, NVLink: fatal error detected on link 3(0x0, 0x0)", 74, 1912, "python3", "NVLink: fatal error detected on link 3(0x0, 0x0)"),
        (P + "94, pid=5120, name=python, Contained: SM (0x1). RST: No, D-RST: No", 94, 5120, "python", "Contained: SM (0x1). RST: No, D-RST: No"),
        (P + "95, pid=5121, name=python, Uncontained: FBHUB. RST: Yes, D-RST: No", 95, 5121, "python", "Uncontained: FBHUB. RST: Yes, D-RST: No"),
        (P + "144, pid=<unknown>, name=<unknown>, Unit: NVLW_NVLIPT, Link: 12, IntrInfo: 0x4", 144, None, None, "Unit: NVLW_NVLIPT, Link: 12, IntrInfo: 0x4"),
        (P + "145, RLW_REMAP Nonfatal XC0 i0 Link 08 (0x00000000 0x00000000)", 145, None, None, "RLW_REMAP Nonfatal XC0 i0 Link 08 (0x00000000 0x00000000)"),
        (P + "150, pid='<unknown>', name=<unknown>, NETIR_LINK_EVT Fatal XC0 i0 Link 04", 150, None, None, "NETIR_LINK_EVT Fatal XC0 i0 Link 04"),
        (P + "154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)", 154, None, None, "GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot Required)"),
        (P + "119, pid=77, name=nvidia-smi, Timeout after 6s of waiting for RPC response", 119, 77, "nvidia-smi", "Timeout after 6s of waiting for RPC response"),
        ("NVRM: Xid (0000:3b:00): 43, pid=9, name=a.out, Ch 00000010", 43, 9, "a.out", "Ch 00000010"),
        ("NVRM: Xid (PCI:0000:3B:00): 8", 8, None, None, ""),
    ],
)  # fmt: skip
def test_every_xid_line_variant_parses_to_its_event(
    message: str, xid: int, pid: int | None, process: str | None, text: str
) -> None:
    assert parse_xid(message) == XidEvent("0000:3b:00", xid, pid, process, text)


@pytest.mark.parametrize(
    ("message", "key"),
    [
        (
            "NVRM: The NVIDIA GPU 0000:b3:00.0 (PCI ID: 10de:2330) installed in this system has"
            " fallen off the bus and is not responding to commands.",
            "0000:b3:00",
        ),
        ("NVRM: GPU 0000:b3:00.0: GPU has fallen off the bus.", "0000:b3:00"),
        ("NVRM: GPU 0001:1a:00.0: GPU has fallen off the bus.", "0001:1a:00"),
    ],
)
def test_fallen_off_bus_message_without_an_xid_reads_as_xid_79(message: str, key: str) -> None:
    event = parse_xid(message)
    assert event is not None
    assert (event.pci_key, event.xid, event.fallen_off) == (key, 79, True)


@pytest.mark.parametrize(
    "message",
    [
        "usb 1-1: new high-speed USB device number 2 using xhci_hcd",
        "NVRM: loading NVIDIA UNIX x86_64 Kernel Module  550.127.05",
        "NVRM: GPU at PCI:0000:b3:00: GPU-9c3a1f2e-5b7d-4c11-a0e2-3f4d5e6a7b87",
        "some tool printed: xid 13 happened",
        "",
    ],
)
def test_lines_that_are_not_xids_give_no_event(message: str) -> None:
    assert parse_xid(message) is None


@pytest.mark.parametrize(
    "message",
    [
        "NVRM: Xid (PCI:0000:zz:00): 13, x",
        "NVRM: Xid (PCI:0000:5d:0",
        "NVRM: Xid (PCI:0000:2a:00): ",
    ],
)
def test_broken_xid_lines_give_no_event_but_are_recognised_as_xid_lines(message: str) -> None:
    assert parse_xid(message) is None and looks_like_xid(message)


def _feed(stream: XidLineStream, lines: list[str]) -> list[tuple[str, int]]:
    return [(e.pci_key, e.xid) for line in lines for e in stream.feed(line).events]


def test_three_line_fallen_off_message_counts_once_as_xid_79() -> None:
    lines = [
        "[ 6001.25] NVRM: The NVIDIA GPU 0000:ba:00.0",
        "[ 6001.25] NVRM: (PCI ID: 10de:2330) installed in this system has",
        "[ 6001.25] NVRM: fallen off the bus and is not responding to commands.",
    ]
    assert _feed(XidLineStream(), lines) == [("0000:ba:00", 79)]


def test_gpu_at_pci_line_names_the_gpu_for_a_following_fallen_off_line() -> None:
    lines = ["NVRM: GPU at PCI:0000:b3:00: GPU-1234", "NVRM: GPU has fallen off the bus."]
    assert _feed(XidLineStream(), lines) == [("0000:b3:00", 79)]


def test_fallen_off_line_too_far_from_the_gpu_it_would_name_is_not_guessed() -> None:
    lines = ["NVRM: GPU at PCI:0000:b3:00: GPU-1234", *["noise"] * 6, "GPU has fallen off the bus."]
    assert _feed(XidLineStream(), lines) == []


def test_xid_79_and_fallen_off_message_within_ten_seconds_are_one_incident() -> None:
    lines = [
        "Feb 14 05:10:00 h kernel: " + P + "79, pid=1, name=x, GPU has fallen off the bus.",
        "Feb 14 05:10:05 h kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.",
    ]
    assert _feed(XidLineStream(), lines) == [("0000:3b:00", 79)]


def test_fallen_off_message_first_then_xid_79_line_is_still_one_incident() -> None:
    lines = ["[ 5.0] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.", "[ 6.0] " + P + "79"]
    assert _feed(XidLineStream(), lines) == [("0000:3b:00", 79)]


def test_fallen_off_message_long_after_an_xid_79_is_a_new_incident() -> None:
    lines = ["[ 5.0] " + P + "79", "[ 60.0] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."]
    assert _feed(XidLineStream(), lines) == [("0000:3b:00", 79)] * 2


def test_without_log_times_dedupe_falls_back_to_line_distance() -> None:
    near = [P + "79", "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."]
    far = [P + "79", *["noise"] * 60, "NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus."]
    assert len(_feed(XidLineStream(), near)) == 1
    assert len(_feed(XidLineStream(), far)) == 2


def test_two_xid_79_lines_are_two_events_and_other_gpus_are_not_deduped() -> None:
    lines = ["[ 1.0] " + P + "79", "[ 1.1] " + P + "79", "[ 1.2] NVRM: Xid (PCI:0000:3c:00): 79"]
    assert _feed(XidLineStream(), lines) == [
        ("0000:3b:00", 79),
        ("0000:3b:00", 79),
        ("0000:3c:00", 79),
    ]


def test_stream_reports_malformed_xid_lines_and_ignores_continuations() -> None:
    stream = XidLineStream()
    assert stream.feed("4,1,2,-;NVRM: Xid (PCI:0000:2a:00): ").malformed == 1
    assert stream.feed(" SUBSYSTEM=pci").malformed == 0
    assert stream.feed(" SUBSYSTEM=pci").events == ()
