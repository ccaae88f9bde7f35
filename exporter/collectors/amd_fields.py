"""One healthy AMD GPU's amdsmi readings -> catalogue samples, in base units.

Called by :class:`exporter.collectors.amd_gpu.AmdGpuCollector` for each processor handle that
answered its identity read. amdsmi speaks Celsius, W (socket power), uW (power cap), energy
ticks of ``counter_resolution`` uJ, %, MHz, MB, MT/s and KB (XGMI); the catalogue speaks
Celsius, W, J, ratio, Hz, bytes and the PCIe generation, so every conversion lives here.
Counters pass through :class:`Monotonic` so a driver reload never exports a decrease.

Partitions (compute partitioning, CPX/DPX/QPX): every partition is its own processor handle;
physical sensors (temperatures, power, energy, clocks, PCIe, XGMI, violation residency) and
the device's RAS counters (ECC per block, CPER records) are read on partition 0 only, as
amdsmi and AMD's Device Metrics Exporter report them; a partition > 0 serves its activity and
memory. Function names and dictionaries: ROCm/amdsmi ``py-interface/amdsmi_interface.py``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from exporter import catalog as c
from exporter import catalog_amd as dme
from exporter.catalog import Sample
from exporter.collectors.amd_reader import AmdReader, number
from exporter.collectors.device_samples import DeviceSamples
from exporter.counters import Monotonic
from exporter.sources import amdsmi_api as api

MB = 1024 * 1024  # amdsmi's VRAM "MB" are MiB (bytes >> 20 in the library)
XGMI_KB = dme.XGMI_KB  # amdsmi's XGMI "KiloBytes", read as KiB as the DME reader does
# amdsmi_get_gpu_ecc_count's block enum name -> the catalogue's block label
BLOCK_LABELS = {"PCIE_BIF": "bif"}
ECC_KEYS = (("correctable", "correctable_count"), ("uncorrectable", "uncorrectable_count"),
            ("deferred", "deferred_count"))  # fmt: skip
# catalogue cause -> amdsmi_get_violation_status key stem (acc_<stem>, active_<stem>)
VIOLATION_KEYS = {"ppt": "ppt_pwr", "socket_thermal": "socket_thrm", "vr_thermal": "vr_thrm",
                  "hbm_thermal": "hbm_thrm", "processor_hot": "prochot_thrm"}  # fmt: skip
PCIE_EVENTS = (("recovery", "pcie_l0_to_recovery_count"), ("nak_sent", "pcie_nak_sent_count"),
               ("nak_received", "pcie_nak_received_count"),
               ("replay_rollover", "pcie_replay_roll_over_count"))  # fmt: skip


@dataclass
class AmdRead(DeviceSamples):
    """One cycle's reading of one AMD GPU: where to read, how to label, where to put samples."""

    smi: api.AmdSmiApi
    handle: Any
    r: AmdReader
    lv: tuple[str, ...]  # (node, gpu, uuid)
    mono: Monotonic
    out: list[Sample]


def read_partition(g: AmdRead) -> None:
    """What every partition serves: activity and memory."""
    s, h, r = g.smi, g.handle, g.r
    act = r.field("activity", s.amdsmi_get_gpu_activity, h)
    g.gauge(c.GPU_UTILIZATION, _pct(act.get("gfx_activity")))
    g.gauge(c.GPU_MEMORY_UTILIZATION, _pct(act.get("umc_activity")))
    vram = r.field("vram", s.amdsmi_get_gpu_vram_usage, h)
    total, used = number(vram.get("vram_total")), number(vram.get("vram_used"))
    if total is not None and used is not None:
        g.gauge(c.GPU_MEMORY_TOTAL, total * MB)
        g.gauge(c.GPU_MEMORY_USED, used * MB)
        g.gauge(c.GPU_MEMORY_FREE, max(total - used, 0.0) * MB)


def read_physical(g: AmdRead) -> None:
    """What partition 0 (or an unpartitioned GPU) serves for the whole device."""
    _temperatures(g)
    _power(g)
    _clocks(g)
    _ecc(g)
    _pcie(g)
    _metrics_info(g)
    _violations(g)


def _temperatures(g: AmdRead) -> None:
    s, h, r = g.smi, g.handle, g.r
    t_type, cur = s.AmdSmiTemperatureType, s.AmdSmiTemperatureMetric.CURRENT
    hot = r.read("temperature", s.amdsmi_get_temp_metric, h, t_type.HOTSPOT, cur, scope="hot")
    if hot is None and r.skip("temperature", "hot"):  # MI100 and older: the edge sensor
        hot = r.read("temperature", s.amdsmi_get_temp_metric, h, t_type.EDGE, cur, scope="edge")
    g.gauge(c.GPU_TEMPERATURE, number(hot))
    vram = r.read("temperature", s.amdsmi_get_temp_metric, h, t_type.VRAM, cur, scope="vram")
    g.gauge(c.GPU_MEMORY_TEMPERATURE, number(vram))


def _power(g: AmdRead) -> None:
    s, h, r = g.smi, g.handle, g.r
    p = r.field("power", s.amdsmi_get_power_info, h)
    watts = number(p.get("current_socket_power"))  # MI300: current; MI200: average only
    g.gauge(c.GPU_POWER, watts if watts is not None else number(p.get("average_socket_power")))
    cap = number(r.field("power_limit", s.amdsmi_get_power_cap_info, h).get("power_cap"))
    g.gauge(c.GPU_POWER_LIMIT, None if cap is None else cap / 1e6)
    e = r.field("energy", s.amdsmi_get_energy_count, h)
    ticks, res = number(e.get("energy_accumulator")), number(e.get("counter_resolution"))
    if ticks is not None and res is not None:
        g.counter(c.GPU_ENERGY, ticks, scale=res * 1e-6)


def _clocks(g: AmdRead) -> None:
    s, h, r = g.smi, g.handle, g.r
    for cur_m, max_m, name in ((c.GPU_SM_CLOCK, c.GPU_SM_CLOCK_MAX, api.CLOCK_GFX),
                               (c.GPU_MEMORY_CLOCK, c.GPU_MEMORY_CLOCK_MAX, api.CLOCK_MEM)):  # fmt: skip
        kind = getattr(s.AmdSmiClkType, name)
        clk = r.read("clock", s.amdsmi_get_clock_info, h, kind, scope=name)
        clk = clk if isinstance(clk, dict) else {}
        g.gauge(cur_m, _mhz(clk.get("clk")))
        g.gauge(max_m, _mhz(clk.get("max_clk")))


def _ecc(g: AmdRead) -> None:
    s, h, r = g.smi, g.handle, g.r
    total = r.field("ecc", s.amdsmi_get_gpu_total_ecc_count, h)
    for etype, key in (("corrected", "correctable_count"), ("uncorrected", "uncorrectable_count")):
        g.counter(c.GPU_ECC_ERRORS, number(total.get(key)), etype, "volatile")
    for block in s.AmdSmiGpuBlock:
        label = BLOCK_LABELS.get(block.name, block.name.lower())
        if label not in c.RAS_BLOCKS:  # INVALID, RESERVED
            continue
        counts = r.read("ras", s.amdsmi_get_gpu_ecc_count, h, block, scope=label)
        if isinstance(counts, dict):
            for etype, key in ECC_KEYS:
                g.counter(c.GPU_RAS_ERRORS, number(counts.get(key)), label, etype)


def _pcie(g: AmdRead) -> None:
    s, h, r = g.smi, g.handle, g.r
    info = r.field("pcie", s.amdsmi_get_pcie_info, h)
    cur, static = info.get("pcie_metric") or {}, info.get("pcie_static") or {}
    g.gauge(c.GPU_PCIE_WIDTH, number(cur.get("pcie_width")))
    g.gauge(c.GPU_PCIE_WIDTH_MAX, number(static.get("max_pcie_width")))
    g.gauge(c.GPU_PCIE_GENERATION, pcie_generation(number(cur.get("pcie_speed"))))
    g.gauge(c.GPU_PCIE_GENERATION_MAX, pcie_generation(number(static.get("max_pcie_speed"))))
    g.counter(c.GPU_PCIE_REPLAY, number(cur.get("pcie_replay_count")))
    for event, key in PCIE_EVENTS:
        g.counter(c.GPU_PCIE_LINK_EVENTS, number(cur.get(key)), event)


def pcie_generation(mts: float | None) -> float | None:
    """PCIe generation from the link speed in MT/s: 2500 -> 1, 5000 -> 2, 8000 -> 3,
    16000 -> 4, 32000 -> 5, 64000 -> 6 (rate doubles per generation from Gen 3 on)."""
    if mts is None or mts <= 0:
        return None
    gts = mts / 1000.0
    return float(round(math.log2(gts))) if gts >= 8 else float(round(math.log2(gts / 2.5)) + 1)


def _metrics_info(g: AmdRead) -> None:
    """XGMI traffic per link from the firmware's metrics table (accumulated KB per link)."""
    m = g.r.field("metrics", g.smi.amdsmi_get_gpu_metrics_info, g.handle)
    for metric, key in ((c.GPU_XGMI_RECEIVE, "xgmi_read_data_acc"),
                        (c.GPU_XGMI_TRANSMIT, "xgmi_write_data_acc")):  # fmt: skip
        values = m.get(key)
        for link, raw in enumerate(values if isinstance(values, list) else []):
            g.counter(metric, number(raw), str(link), scale=XGMI_KB)


def _violations(g: AmdRead) -> None:
    v = g.r.field("violations", g.smi.amdsmi_get_violation_status, g.handle)
    if not v:
        return
    g.counter(c.GPU_VIOLATION_SAMPLES, number(v.get("acc_counter")))
    held: dict[str, float] = {}
    for cause, stem in VIOLATION_KEYS.items():
        g.counter(c.GPU_VIOLATION_RESIDENCY, number(v.get(f"acc_{stem}")), cause)
        active = number(v.get(f"active_{stem}"))
        if active is not None:
            reason = dme.VIOLATIONS[cause]
            held[reason] = max(held.get(reason, 0.0), 1.0 if active else 0.0)
    for reason, value in sorted(held.items()):
        g.gauge(c.GPU_THROTTLE, value, reason)


def _pct(v: Any) -> float | None:
    n = number(v)
    return None if n is None else n / 100.0


def _mhz(v: Any) -> float | None:
    n = number(v)
    return None if n is None else n * 1e6
