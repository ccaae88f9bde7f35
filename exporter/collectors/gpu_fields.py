"""One healthy GPU's NVML readings -> catalogue samples, in base units.

Called by :class:`exporter.collectors.gpu.GpuCollector` for each GPU that answered its identity
read this cycle. NVML speaks mW, mJ, MHz, % and KiB; the catalogue speaks W, J, Hz, ratio and
bytes, so every conversion lives here. Counters pass through :class:`Monotonic` so a driver
reload (volatile counters restart at zero) never exports a decrease.
NVML reference: https://docs.nvidia.com/deploy/nvml-api/group__nvmlDeviceQueries.html
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pynvml

from exporter import catalog as c
from exporter.catalog import MetricDef, Sample
from exporter.collectors.gpu_reader import FieldReader
from exporter.counters import Monotonic
from exporter.sources.protocols import NvmlApi

ECC = (
    ("corrected", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
    ("uncorrected", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
)
ECC_COUNTERS = (("volatile", pynvml.NVML_VOLATILE_ECC), ("aggregate", pynvml.NVML_AGGREGATE_ECC))
RETIREMENT = (
    ("single_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS),
    ("double_bit", pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR),
)
CLOCKS = (
    (c.GPU_SM_CLOCK, c.GPU_SM_CLOCK_MAX, pynvml.NVML_CLOCK_SM),
    (c.GPU_MEMORY_CLOCK, c.GPU_MEMORY_CLOCK_MAX, pynvml.NVML_CLOCK_MEM),
)
TEMP_GPU = pynvml.NVML_TEMPERATURE_GPU
PCIE_GAUGES = (
    ("pcie_generation", "nvmlDeviceGetCurrPcieLinkGeneration", c.GPU_PCIE_GENERATION),
    ("pcie_generation_max", "nvmlDeviceGetMaxPcieLinkGeneration", c.GPU_PCIE_GENERATION_MAX),
    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", c.GPU_PCIE_WIDTH),
    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", c.GPU_PCIE_WIDTH_MAX),
)


@dataclass
class GpuRead:
    """One cycle's reading of one GPU: where to read, how to label, where to put samples."""

    nvml: NvmlApi
    handle: Any
    r: FieldReader
    lv: tuple[str, ...]  # (node, gpu, uuid)
    mono: Monotonic
    out: list[Sample]

    def gauge(self, m: MetricDef, v: float | None, *extra: str) -> None:
        if v is not None:
            self.out.append(m.make(v, *self.lv, *extra))

    def counter(self, m: MetricDef, raw: float | None, *extra: str, scale: float = 1.0) -> None:
        if raw is not None:
            labels = (*self.lv, *extra)
            self.out.append(m.make(self.mono.update((m.name, labels), raw) * scale, *labels))


def read_device(g: GpuRead) -> None:
    """Every per-GPU family except identity and NVLink."""
    n, h, r = g.nvml, g.handle, g.r
    g.gauge(c.GPU_TEMPERATURE, r.read("temperature", n.nvmlDeviceGetTemperature, h, TEMP_GPU))
    _power(g)
    util = r.read("utilization", n.nvmlDeviceGetUtilizationRates, h)
    if util is not None:
        g.gauge(c.GPU_UTILIZATION, util.gpu / 100.0)
        g.gauge(c.GPU_MEMORY_UTILIZATION, util.memory / 100.0)
    for cur, top, kind in CLOCKS:
        g.gauge(cur, _mhz(r.read("clock", n.nvmlDeviceGetClockInfo, h, kind, scope=kind)))
        g.gauge(top, _mhz(r.read("clock_max", n.nvmlDeviceGetMaxClockInfo, h, kind, scope=kind)))
    _throttle(g)
    mem = r.read("memory", n.nvmlDeviceGetMemoryInfo, h)
    if mem is not None:
        g.gauge(c.GPU_MEMORY_TOTAL, mem.total)
        g.gauge(c.GPU_MEMORY_USED, mem.used)
        g.gauge(c.GPU_MEMORY_FREE, mem.free)
    _memory_errors(g)
    _pcie(g)


def _mhz(v: int | None) -> float | None:
    return None if v is None else v * 1e6


def _power(g: GpuRead) -> None:
    n, h, r = g.nvml, g.handle, g.r
    mw = r.read("power", n.nvmlDeviceGetPowerUsage, h)
    g.gauge(c.GPU_POWER, None if mw is None else mw / 1000.0)
    limit = r.read("power_limit", n.nvmlDeviceGetEnforcedPowerLimit, h)
    g.gauge(c.GPU_POWER_LIMIT, None if limit is None else limit / 1000.0)
    mj = r.read("energy", n.nvmlDeviceGetTotalEnergyConsumption, h)
    g.counter(c.GPU_ENERGY, mj, scale=1e-3)


def _throttle(g: GpuRead) -> None:
    # nvmlDeviceGetCurrentClocksEventReasons replaced ...ThrottleReasons in driver 535: a new
    # binding over an older driver raises FunctionNotFound (absent), an old binding lacks it.
    new = getattr(g.nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
    legacy = getattr(g.nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
    mask = None
    if new is not None:
        mask = g.r.read("throttle_reasons", new, g.handle, scope="event_reasons")
    if (
        mask is None
        and legacy is not None
        and (new is None or g.r.skip("throttle_reasons", "event_reasons"))
    ):
        mask = g.r.read("throttle_reasons", legacy, g.handle, scope="throttle_reasons")
    if mask is not None:
        for reason, bit in c.THROTTLE_REASONS.items():
            g.gauge(c.GPU_THROTTLE, 1.0 if mask & bit else 0.0, reason)


def _memory_errors(g: GpuRead) -> None:
    n, h, r = g.nvml, g.handle, g.r
    for etype, e in ECC:
        for ctype, k in ECC_COUNTERS:
            raw = r.read("ecc", n.nvmlDeviceGetTotalEccErrors, h, e, k, scope=(e, k))
            g.counter(c.GPU_ECC_ERRORS, raw, etype, ctype)
    rows = r.read("remapped_rows", n.nvmlDeviceGetRemappedRows, h)
    if rows is not None:
        corr, unc, pending, failed = rows
        g.gauge(c.GPU_REMAPPED_ROWS, corr, "correctable")
        g.gauge(c.GPU_REMAPPED_ROWS, unc, "uncorrectable")
        g.gauge(c.GPU_ROW_REMAP_PENDING, 1.0 if pending else 0.0)
        g.gauge(c.GPU_ROW_REMAP_FAILED, 1.0 if failed else 0.0)
    for cause, src in RETIREMENT:
        pages = r.read("retired_pages", n.nvmlDeviceGetRetiredPages, h, src)
        g.gauge(c.GPU_RETIRED_PAGES, None if pages is None else len(pages), cause)
    pend = r.read("retired_pages_pending", n.nvmlDeviceGetRetiredPagesPendingStatus, h)
    g.gauge(c.GPU_RETIRED_PAGES_PENDING, None if pend is None else (1.0 if pend else 0.0))


def _pcie(g: GpuRead) -> None:
    n, h, r = g.nvml, g.handle, g.r
    g.counter(c.GPU_PCIE_REPLAY, r.read("pcie_replay", n.nvmlDeviceGetPcieReplayCounter, h))
    for what, fn, metric in PCIE_GAUGES:
        g.gauge(metric, r.read(what, getattr(n, fn), h))
