"""A netdev's ethtool statistics (what ``ethtool -S`` prints), read without running ethtool.

Edge of the exporter: :class:`~exporter.collectors.roce_pfc.RocePfcCollector` asks an
:class:`EthtoolStats` for one interface's statistics each cycle. The real one,
:class:`IoctlEthtool`, talks to the kernel the way ethtool(8) does, through the
``SIOCETHTOOL`` ioctl on a datagram socket (include/uapi/linux/ethtool.h):

- ``ETHTOOL_GSSET_INFO`` for the number of strings in the ``ETH_SS_STATS`` set;
- ``ETHTOOL_GSTRINGS`` for their names (32 bytes each), fixed by the driver: read once per
  interface and again only when the count changes (a driver reload, a firmware that adds
  counters);
- ``ETHTOOL_GSTATS`` for the values (u64 each, in the names' order), every cycle.

One socket for the exporter's life, no process per scrape. :class:`FakeEthtool` is the
hand-written fake (tests, the fleet simulator); :func:`parse_ethtool_s` reads a recorded
``ethtool -S`` output into what a fake serves.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import socket
import struct
from collections.abc import Mapping
from typing import Protocol

SIOCETHTOOL = 0x8946
ETHTOOL_GSTRINGS = 0x0000001B
ETHTOOL_GSTATS = 0x0000001D
ETHTOOL_GSSET_INFO = 0x00000037
ETH_SS_STATS = 1
ETH_GSTRING_LEN = 32
IFNAMSIZ = 16
MAX_STATS = 1 << 16  # a sanity bound: mlx5 with many channels reports a few thousand


class EthtoolStats(Protocol):
    """One netdev's ethtool statistics by name. Raises OSError like the ioctl does
    (``ENODEV``: no such interface; ``EOPNOTSUPP``: the driver has no statistics)."""

    def stats(self, interface: str) -> dict[str, int]: ...


class FakeEthtool:
    """Statistics per interface from a mapping the test (or the simulator) sets; an unknown
    interface raises ``ENODEV``; ``fail`` makes one interface raise the given error."""

    def __init__(self, stats: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self.data: dict[str, dict[str, int]] = {k: dict(v) for k, v in (stats or {}).items()}
        self.fail: dict[str, OSError] = {}
        self.calls = 0

    def stats(self, interface: str) -> dict[str, int]:
        self.calls += 1
        if interface in self.fail:
            raise self.fail[interface]
        if interface not in self.data:
            raise OSError(errno.ENODEV, "No such device", interface)
        return dict(self.data[interface])


def parse_ethtool_s(text: str) -> dict[str, int]:
    """``ethtool -S`` output -> name -> value. The ``NIC statistics:`` header is skipped; a
    line whose value is not an unsigned integer raises ValueError (a recording must be whole)."""
    out: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        s = line.strip()
        if not s or s.endswith("statistics:"):
            continue
        name, sep, value = s.rpartition(":")
        value = value.strip()
        if not sep or not name.strip() or not value.isdigit():
            raise ValueError(f"line {n}: not an ethtool statistic: {s[:60]!r}")
        out[name.strip()] = int(value)
    return out


class IoctlEthtool:
    """The kernel's ethtool statistics through ``SIOCETHTOOL`` (Linux only)."""

    def __init__(self) -> None:
        self._sock: socket.socket | None = None
        self._names: dict[str, list[str]] = {}

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def stats(self, interface: str) -> dict[str, int]:
        count = self._count(interface)
        names = self._names.get(interface)
        if names is None or len(names) != count:
            names = self._names[interface] = self._strings(interface, count)
        values = self._values(interface, count)
        return dict(zip(names, values, strict=True))

    def _fd(self) -> int:
        if self._sock is None:
            self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        return self._sock.fileno()

    def _ioctl(self, interface: str, buf: ctypes.Array[ctypes.c_char]) -> None:
        name = interface.encode()
        if not name or len(name) >= IFNAMSIZ or b"/" in name:
            raise OSError(errno.ENODEV, "not an interface name", interface)
        # struct ifreq: the name, then (union) a pointer to the command's buffer
        ifreq = bytearray(struct.pack(f"{IFNAMSIZ}sP", name, ctypes.addressof(buf)))
        ifreq += bytes(40 - len(ifreq)) if len(ifreq) < 40 else b""
        fcntl.ioctl(self._fd(), SIOCETHTOOL, ifreq)

    def _count(self, interface: str) -> int:
        # struct ethtool_sset_info {u32 cmd; u32 reserved; u64 sset_mask; u32 data[1]}
        buf = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0,
                                                      1 << ETH_SS_STATS, 0), 24)  # fmt: skip
        self._ioctl(interface, buf)
        _, _, mask, count = struct.unpack_from("IIQI", buf.raw)
        if not mask & (1 << ETH_SS_STATS):
            raise OSError(errno.EOPNOTSUPP, "no ethtool statistics", interface)
        if count > MAX_STATS:
            raise OSError(errno.EINVAL, f"implausible statistics count {count}", interface)
        return int(count)

    def _strings(self, interface: str, count: int) -> list[str]:
        # struct ethtool_gstrings {u32 cmd; u32 string_set; u32 len; u8 data[]}
        size = 12 + count * ETH_GSTRING_LEN
        buf = ctypes.create_string_buffer(size)
        struct.pack_into("III", buf, 0, ETHTOOL_GSTRINGS, ETH_SS_STATS, count)
        self._ioctl(interface, buf)
        raw = buf.raw[12:size]
        return [
            raw[i * ETH_GSTRING_LEN : (i + 1) * ETH_GSTRING_LEN]
            .split(b"\0", 1)[0]
            .decode("ascii", "replace")
            for i in range(count)
        ]

    def _values(self, interface: str, count: int) -> list[int]:
        # struct ethtool_stats {u32 cmd; u32 n_stats; u64 data[]}
        size = 8 + 8 * count
        buf = ctypes.create_string_buffer(size)
        struct.pack_into("II", buf, 0, ETHTOOL_GSTATS, count)
        self._ioctl(interface, buf)
        n = struct.unpack_from("I", buf.raw, 4)[0]
        if n != count:  # the set changed between the two calls: read names afresh next time
            self._names.pop(interface, None)
            raise OSError(errno.EAGAIN, "statistics changed while reading", interface)
        return list(struct.unpack_from(f"{count}Q", buf.raw, 8))
