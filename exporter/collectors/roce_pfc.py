"""RoCE PFC collector: the per-priority pause counters of each RoCE port's netdev.

Sits between a :class:`~exporter.sources.protocols.SysfsRoot` (which RDMA ports run over
Ethernet, and their netdevs), an :class:`~exporter.sources.ethtool.EthtoolStats` (the
netdev's statistics, one ioctl round per port per cycle, no process) and the collection loop.

A port is RoCE when ``ports/<p>/link_layer`` reads ``Ethernet``; its netdev is
``ports/<p>/gid_attrs/ndevs/0`` (Documentation/ABI/stable/sysfs-class-infiniband: the net
device of GID index 0). The congestion counters (ECN marks, CNPs) are hw_counters/ files,
served by the InfiniBand collector; this one adds what only the netdev knows:

- ``ROCE_PFC_PAUSE_FRAMES`` from ``<rx|tx>_prio<N>_pause``;
- ``ROCE_PFC_PAUSE_SECONDS`` from ``<rx|tx>_prio<N>_pause_duration`` (microseconds);
- ``ROCE_PFC_STORM_EVENTS`` from ``tx_pause_storm_{warning,error}_events``.

Only the priorities the driver reports; a driver with no per-priority counters serves no
series (never zeros). Counters go through one :class:`~exporter.counters.Monotonic` per port.
Observing softly: an InfiniBand port, a port without a netdev, or an interface that vanished
(``ENODEV``) is skipped; any other failure costs that port's series and one ``read_errors``.
"""

from __future__ import annotations

import errno
import re

from exporter.catalog import (
    ROCE_PFC_PAUSE_FRAMES,
    ROCE_PFC_PAUSE_SECONDS,
    ROCE_PFC_STORM_EVENTS,
    Sample,
)
from exporter.collectors.base import ReadErrors
from exporter.collectors.infiniband_parse import parse_label
from exporter.counters import Monotonic
from exporter.sources.ethtool import EthtoolStats
from exporter.sources.protocols import SysfsRoot

CLASS_DIR = "class/infiniband"
PRIO = re.compile(r"(rx|tx)_prio([0-7])_pause(_duration)?\Z")
STORM = {"tx_pause_storm_warning_events": "warning", "tx_pause_storm_error_events": "error"}
MICROSECONDS = 1e-6
GONE = (errno.ENODEV, errno.ENXIO)


class RocePfcCollector:
    name = "roce_pfc"

    def __init__(self, sysfs: SysfsRoot, ethtool: EthtoolStats, node: str) -> None:
        self.sysfs, self.ethtool, self.node = sysfs, ethtool, node
        self.read_errors = ReadErrors()
        self._monotonic: dict[tuple[str, str], Monotonic] = {}

    def collect(self) -> list[Sample]:
        out: list[Sample] = []
        for device, port, interface in self.roce_ports():
            try:
                stats = self.ethtool.stats(interface)
            except OSError as e:
                if e.errno not in GONE and e.errno != errno.EOPNOTSUPP:
                    self.read_errors.add(f"{device}/{port}/{interface}")
                continue
            mono = self._monotonic.setdefault((device, port), Monotonic())
            out += self.samples(device, port, interface, stats, mono)
        return out

    def roce_ports(self) -> list[tuple[str, str, str]]:
        """(device, port, netdev) of every RDMA port whose link layer is Ethernet."""
        out = []
        for device in self._list(CLASS_DIR):
            for port in self._list(f"{CLASS_DIR}/{device}/ports"):
                base = f"{CLASS_DIR}/{device}/ports/{port}"
                if self._read(f"{base}/link_layer", f"{device}/{port}") != "Ethernet":
                    continue
                ndev = self._read(f"{base}/gid_attrs/ndevs/0", f"{device}/{port}")
                if ndev:
                    out.append((device, port, ndev))
        return out

    def samples(self, device: str, port: str, interface: str, stats: dict[str, int],
                mono: Monotonic) -> list[Sample]:  # fmt: skip
        node, out = self.node, []
        for name, raw in sorted(stats.items()):
            m = PRIO.match(name)
            if m is not None:
                total = mono.update(name, raw)
                direction, prio, duration = m.groups()
                if duration:
                    out.append(ROCE_PFC_PAUSE_SECONDS.make(
                        total * MICROSECONDS, node, device, port, interface, direction, prio))  # fmt: skip
                else:
                    out.append(ROCE_PFC_PAUSE_FRAMES.make(
                        total, node, device, port, interface, direction, prio))  # fmt: skip
            elif name in STORM:
                total = mono.update(name, raw)
                out.append(ROCE_PFC_STORM_EVENTS.make(total, node, device, port, interface,
                                                      STORM[name]))  # fmt: skip
        return out

    def _list(self, path: str) -> list[str]:
        try:
            return sorted(self.sysfs.listdir(path))
        except FileNotFoundError:  # no RDMA stack, or a device that vanished
            return []
        except OSError:
            self.read_errors.add(path)
            return []

    def _read(self, path: str, what: str) -> str | None:
        try:
            return parse_label(self.sysfs.read_text(path))
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            self.read_errors.add(f"{what}/{path.rsplit('/', 1)[-1]}")
            return None
