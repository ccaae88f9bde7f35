"""Parsers for the text of InfiniBand sysfs files: pure functions, ValueError on bad input.

Sits between :class:`exporter.sources.sysfs.DirSysfs` (raw file text) and
:class:`exporter.collectors.infiniband.InfinibandCollector` (samples). Formats are the
kernel's, see Documentation/ABI/stable/sysfs-class-infiniband and
drivers/infiniband/core/sysfs.c (``state_show``, ``phys_state_show``, ``rate_show``).
"""

from __future__ import annotations

import re

# "4: ACTIVE", "5: LinkUp": the number is the IBTA enum, the word only decorates it.
_ENUM = re.compile(r"\s*(\d+)\s*(?::.*)?\Z", re.DOTALL)
# rate_show prints "%d%s Gb/sec (%dX%s)": "400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X)" (SDR has
# no speed name), "25 Gb/sec (1X EDR)" on RoCE. Accept other SI prefixes defensively. A port
# whose rate is unknown (link down, some RoCE and iWARP drivers) reads "0 GB/sec": the
# capital B is a driver's spelling, not bytes, and zero is zero either way.
_RATE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)[bB]/sec\b")
# A counter the HCA cannot read: ib_core prints "N/A (no PMA)" when the device has no
# Performance Management Agent (drivers/infiniband/core/sysfs.c, show_pma_counter).
_UNSUPPORTED = re.compile(r"N/A \(no PMA\)\Z")


class UnsupportedCounter(ValueError):
    """The file exists but the hardware cannot serve it: absent, not a read error."""


_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def parse_enum(text: str) -> int:
    """``"4: ACTIVE"`` -> 4 (state, phys_state)."""
    m = _ENUM.match(text)
    if m is None:
        raise ValueError(f"not an enum value: {text[:40]!r}")
    return int(m.group(1))


def parse_rate(text: str) -> float:
    """``"400 Gb/sec (4X NDR)"`` -> 50e9 bytes per second."""
    m = _RATE.match(text)
    if m is None:
        raise ValueError(f"not a port rate: {text[:40]!r}")
    return float(m.group(1)) * _SI[m.group(2)] / 8.0


def parse_counter(text: str) -> int:
    """A counter file: one unsigned decimal integer (``"12345\\n"``)."""
    s = text.strip()
    if not s.isascii() or not s.isdigit():
        if _UNSUPPORTED.match(s):
            raise UnsupportedCounter(s)
        raise ValueError(f"not a counter value: {text[:40]!r}")
    return int(s)


def parse_label(text: str) -> str:
    """An identity file (board_id, fw_ver, link_layer ...): one printable line."""
    s = text.strip()
    if not s.isprintable() or "\n" in s or len(s) > 128:
        raise ValueError(f"not a label value: {text[:40]!r}")
    return s
