"""InfiniBand collector: ``class/infiniband`` in a sysfs root -> per-device and per-port samples.

Sits between a :class:`~exporter.sources.protocols.SysfsRoot` (real ``/sys``, a fixture tree,
or the fleet simulator's DictSysfs) and the collection loop. Layout and file meanings:
Documentation/ABI/stable/sysfs-class-infiniband.

Per device: ``IB_DEVICE_INFO`` (board_id, fw_ver, hca_type, node_guid). Per port:
state, phys_state, rate (bytes/s), ``IB_PORT_INFO`` (link_layer), every file under
``counters/``, ``counters_ext/`` (mlx4) and ``hw_counters/`` (mlx5). Every counter goes through one
:class:`~exporter.counters.Monotonic` per port, so a reset (driver reload, port reset) never
exports a drop; resets are counted in ``IB_COUNTER_RESETS``.

Per port also ``IB_PORT_ERRORS``: the error counters of ``IB_ERROR_COUNTERS`` the port has,
summed; only when each of them was read (a partial sum would look like a counter reset).

Observing softly: a missing file is normal and skipped (drivers differ; a port that is down
may lack hw_counters). An unreadable file or garbage in it costs that one series and one
``read_errors`` count (what = ``<device>/<port>/<file>``); the rest of the port still reports.
A device that vanishes between listing and reading is not an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from exporter.catalog import (
    IB_COUNTER,
    IB_COUNTER_RESETS,
    IB_DEVICE_INFO,
    IB_ERROR_COUNTERS,
    IB_HW_COUNTER,
    IB_PORT_ERRORS,
    IB_PORT_INFO,
    IB_PORT_PHYS_STATE,
    IB_PORT_RATE,
    IB_PORT_STATE,
    IB_RECEIVE,
    IB_TRANSMIT,
    MetricDef,
    Sample,
)
from exporter.collectors.base import ReadErrors
from exporter.collectors.infiniband_parse import (
    UnsupportedCounter,
    parse_counter,
    parse_enum,
    parse_label,
    parse_rate,
)
from exporter.counters import Monotonic
from exporter.sources.protocols import SysfsRoot

CLASS_DIR = "class/infiniband"
DEVICE_FILES = ("board_id", "fw_ver", "hca_type", "node_guid")

# port_xmit_data / port_rcv_data count 4-byte words ("octets divided by 4" in the ABI doc).
DATA_COUNTERS: dict[str, tuple[MetricDef, int]] = {
    "port_xmit_data": (IB_TRANSMIT, 4),
    "port_rcv_data": (IB_RECEIVE, 4),
}
# mlx4 has no hw_counters but a counters_ext/ group (drivers/infiniband/hw/mlx4/sysfs.c) with
# 64-bit data counters that do not saturate like the 32-bit ones in counters/: prefer them.
EXT_DATA_COUNTERS: dict[str, tuple[MetricDef, int]] = {
    "port_xmit_data_64": (IB_TRANSMIT, 4),
    "port_rcv_data_64": (IB_RECEIVE, 4),
}
ERROR_FILES = frozenset(IB_ERROR_COUNTERS)
# hw_counters/lifespan is a setting (ms a cached hw_counters read stays valid), not a counter.
NOT_COUNTERS = frozenset({"lifespan"})

T = TypeVar("T")


class InfinibandCollector:
    """Reads every HCA and port under ``class/infiniband`` once per ``collect``."""

    name = "infiniband"

    RELIST_CYCLES = 8  # counter directories are re-listed this often (and on any change)

    def __init__(self, sysfs: SysfsRoot, node: str) -> None:
        self.sysfs = sysfs
        self.node = node
        self.read_errors = ReadErrors()
        self._monotonic: dict[tuple[str, str], Monotonic] = {}
        # A port's counter files are fixed by its driver: list each group directory once per
        # RELIST_CYCLES, not every cycle (listing, and raising for an absent group, was a fifth
        # of an InfiniBand cycle). A new or vanished device, or a file gone, re-lists at once.
        self._listings: dict[str, list[str] | None] = {}
        self._devices: list[str] = []
        self._cycle = 0

    def collect(self) -> list[Sample]:
        try:
            devices = self.sysfs.listdir(CLASS_DIR)
        except FileNotFoundError:  # no RDMA stack on this node: nothing to report
            return []
        except OSError:
            self.read_errors.add(CLASS_DIR)
            return []
        self._cycle += 1
        if devices != self._devices or self._cycle % self.RELIST_CYCLES == 0:
            self._listings.clear()
            self._devices = devices
        out: list[Sample] = []
        for device in devices:
            out += self._device(device)
        return out

    def _device(self, device: str) -> list[Sample]:
        base = f"{CLASS_DIR}/{device}"
        try:
            ports = sorted(self.sysfs.listdir(f"{base}/ports"), key=_port_order)
        except FileNotFoundError:  # vanished (hot unplug, driver unload) or not an HCA
            return []
        except OSError:
            self.read_errors.add(f"{device}/ports")
            ports = []
        info = [self._read(f"{base}/{f}", f"{device}/{f}", parse_label) or "" for f in DEVICE_FILES]
        out = [IB_DEVICE_INFO.make(1, self.node, device, *info)]
        for port in ports:
            out += self._port(device, port)
        return out

    def _port(self, device: str, port: str) -> list[Sample]:
        base = f"{CLASS_DIR}/{device}/ports/{port}"
        labels = (self.node, device, port)
        out: list[Sample] = []
        read = self._reader(base, f"{device}/{port}")
        link_layer = read("link_layer", parse_label)
        out.append(IB_PORT_INFO.make(1, *labels, link_layer or ""))
        for metric, file, parse in (
            (IB_PORT_STATE, "state", parse_enum),
            (IB_PORT_PHYS_STATE, "phys_state", parse_enum),
            (IB_PORT_RATE, "rate", parse_rate),
        ):
            value = read(file, parse)
            if value is not None:
                out.append(metric.make(value, *labels))
        mono = self._monotonic.setdefault((device, port), Monotonic())
        failed: list[str] = []
        ext = self._counters(device, port, "counters_ext", IB_COUNTER, mono, failed)
        have = {s.metric for s in ext if s.metric is not IB_COUNTER}
        out += ext
        counters = [
            s
            for s in self._counters(device, port, "counters", IB_COUNTER, mono, failed)
            if s.metric not in have
        ]
        hw = self._counters(device, port, "hw_counters", IB_HW_COUNTER, mono, failed)
        out += counters + hw
        if not ERROR_FILES.intersection(failed):  # a partial sum would read as a reset
            errors = [s.value for s in counters + hw if s.label_values[-1] in ERROR_FILES]
            out.append(IB_PORT_ERRORS.make(float(sum(errors)), *labels))
        out.append(IB_COUNTER_RESETS.make(mono.resets, *labels))
        return out

    def _counters(
        self, device: str, port: str, group: str, metric: MetricDef, mono: Monotonic,
        failed: list[str],
    ) -> list[Sample]:  # fmt: skip
        base = f"{CLASS_DIR}/{device}/ports/{port}/{group}"
        what = f"{device}/{port}/{group}"
        data = EXT_DATA_COUNTERS if group == "counters_ext" else DATA_COUNTERS
        data = {} if group == "hw_counters" else data
        read_text, node = self.sysfs.read_text, self.node
        out: list[Sample] = []
        listed = self._list(base, what)
        if listed is None and base not in self._listings:  # could not list: any file unread
            failed.extend(ERROR_FILES)
        files = listed or ()
        for file in files:  # the hot loop: one read per counter file
            if file in NOT_COUNTERS:
                continue
            try:
                raw = parse_counter(read_text(f"{base}/{file}"))
            except UnsupportedCounter:  # "N/A (no PMA)": absent, not an error
                continue
            except FileNotFoundError:
                failed.append(file)
                if not self.sysfs.is_dir(base):  # the group went away: list afresh next cycle
                    self._listings.pop(base, None)
                    failed.extend(files)
                    break
                continue
            except (OSError, ValueError):
                self.read_errors.add(f"{what}/{file}")
                failed.append(file)
                continue
            total = mono.update((group, file), raw)
            if file in data:
                data_metric, scale = data[file]
                out.append(data_metric.make(total * scale, node, device, port))
            else:
                out.append(metric.make(total, node, device, port, file))
        return out

    def _list(self, base: str, what: str) -> list[str] | None:
        """The files of one counter group, or None when the group is absent (cached)."""
        if base in self._listings:
            return self._listings[base]
        try:
            files: list[str] | None = self.sysfs.listdir(base)
        except FileNotFoundError:  # hw_counters exist on mlx5, counters_ext on mlx4 only
            files = None
        except OSError:
            self.read_errors.add(what)
            return None  # not cached: a transient failure is retried next cycle
        self._listings[base] = files
        return files

    def _reader(self, base: str, what: str) -> Callable[[str, Callable[[str], T]], T | None]:
        def read(file: str, parse: Callable[[str], T]) -> T | None:
            return self._read(f"{base}/{file}", f"{what}/{file}", parse)

        return read

    def _read(self, path: str, what: str, parse: Callable[[str], T]) -> T | None:
        """One read, one parse; None when absent (normal) or broken (counted)."""
        try:
            return parse(self.sysfs.read_text(path))
        except (FileNotFoundError, UnsupportedCounter):  # absent, or "N/A (no PMA)"
            return None
        except (OSError, ValueError):
            self.read_errors.add(what)
            return None


def _port_order(port: str) -> tuple[int, str]:
    return (int(port), port) if port.isdigit() else (1 << 30, port)
