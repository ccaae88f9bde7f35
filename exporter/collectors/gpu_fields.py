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
from exporter.catalog import Sample
from exporter.collectors.device_samples import DeviceSamples
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
MEMORY_V2 = pynvml.nvmlMemory_v2
VIOLATIONS = tuple(
    (policy, getattr(pynvml, f"NVML_PERF_POLICY_{code}"))
    for policy, code in (
        ("power", "POWER"),
        ("thermal", "THERMAL"),
        ("sync_boost", "SYNC_BOOST"),
        ("board_limit", "BOARD_LIMIT"),
        ("low_utilization", "LOW_UTILIZATION"),
        ("reliability", "RELIABILITY"),
        ("total_app_clocks", "TOTAL_APP_CLOCKS"),
        ("total_base_clocks", "TOTAL_BASE_CLOCKS"),
    )
)
PCIE_GAUGES = (
    ("pcie_generation", "nvmlDeviceGetCurrPcieLinkGeneration", c.GPU_PCIE_GENERATION),
    ("pcie_generation_max", "nvmlDeviceGetMaxPcieLinkGeneration", c.GPU_PCIE_GENERATION_MAX),
    ("pcie_width", "nvmlDeviceGetCurrPcieLinkWidth", c.GPU_PCIE_WIDTH),
    ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth", c.GPU_PCIE_WIDTH_MAX),
)


@dataclass
class GpuRead(DeviceSamples):
    """One cycle's reading of one GPU: where to read, how to label, where to put samples."""

    nvml: NvmlApi
    handle: Any
    r: FieldReader
    lv: tuple[str, ...]  # (node, gpu, uuid)
    mono: Monotonic
    out: list[Sample]


def read_device(g: GpuRead) -> None:
    """Every per-GPU family except identity and NVLink."""
    n, h, r = g.nvml, g.handle, g.r
    g.gauge(c.GPU_TEMPERATURE, r.read("temperature", n.nvmlDeviceGetTemperature, h, TEMP_GPU))
    _power(g)
    util = r.read("utilization", n.nvmlDeviceGetUtilizationRates, h)
    if util is not None:
        g.gauge(c.GPU_UTILIZATION, util.gpu / 100.0)
        g.gauge(c.GPU_MEMORY_UTILIZATION, util.memory / 100.0)
    for what, metric, fn in (
        ("encoder_utilization", c.GPU_ENCODER_UTILIZATION, n.nvmlDeviceGetEncoderUtilization),
        ("decoder_utilization", c.GPU_DECODER_UTILIZATION, n.nvmlDeviceGetDecoderUtilization),
    ):
        pair = r.read(what, fn, h)  # [percent, sampling period in us]
        g.gauge(metric, None if pair is None else pair[0] / 100.0)
    for cur, top, kind in CLOCKS:
        g.gauge(cur, _mhz(r.read("clock", n.nvmlDeviceGetClockInfo, h, kind, scope=kind)))
        g.gauge(top, _mhz(r.read("clock_max", n.nvmlDeviceGetMaxClockInfo, h, kind, scope=kind)))
    _throttle(g)
    _violations(g)
    _memory(g)
    _memory_errors(g)
    _pcie(g)
    _vgpu_license(g)


def _memory(g: GpuRead) -> None:
    """Memory info v2 (driver 510+) adds ``reserved``; older drivers answer v1 only."""
    n, h, r = g.nvml, g.handle, g.r
    mem = None
    if not r.skip("memory", "v2"):
        mem = r.read("memory", n.nvmlDeviceGetMemoryInfo, h, MEMORY_V2, scope="v2")
    if mem is None and r.skip("memory", "v2"):
        mem = r.read("memory", n.nvmlDeviceGetMemoryInfo, h)
    if mem is None:
        return
    g.gauge(c.GPU_MEMORY_TOTAL, mem.total)
    g.gauge(c.GPU_MEMORY_FREE, mem.free)
    reserved = getattr(mem, "reserved", None)
    if reserved is None:
        g.gauge(c.GPU_MEMORY_USED, mem.used)
    else:  # v2's used leaves the reserved part out; v1 (and dcgm's FB_USED) count it in
        g.gauge(c.GPU_MEMORY_USED, mem.used + reserved)
        g.gauge(c.GPU_MEMORY_RESERVED, reserved)


def _violations(g: GpuRead) -> None:
    fn = g.nvml.nvmlDeviceGetViolationStatus
    for policy, code in VIOLATIONS:
        t = g.r.read("violations", fn, g.handle, code, scope=code)
        g.counter(c.GPU_CLOCK_VIOLATION, None if t is None else t.violationTime, policy, scale=1e-9)


def _vgpu_license(g: GpuRead) -> None:
    fn = g.nvml.nvmlDeviceGetGridLicensableFeatures
    features = g.r.read("vgpu_license", fn, g.handle)
    if features is None:
        return
    if not features.isGridLicenseSupported:  # bare metal: no vGPU licensing, no series
        g.r.unsupported.add((g.r.gpu, "vgpu_license", None))
        return
    states = [f.featureState for f in features.gridLicensableFeatures]
    g.gauge(c.GPU_VGPU_LICENSE, 1.0 if any(states[: features.licensableFeaturesCount]) else 0.0)


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
