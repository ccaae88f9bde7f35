"""A hand-written fake of the ``amdsmi`` module, behind :class:`~exporter.sources.amdsmi_api.AmdSmiApi`.

It answers as amdsmi does: the same function names and arguments, the same dictionaries
(keys as ``py-interface/amdsmi_interface.py`` returns them, ``"N/A"`` where the library marks
a value unsupported), the enum arguments checked like the binding checks them
(``AmdSmiParameterException`` for a plain int), and failures as ``AmdSmiLibraryException``
carrying an ``amdsmi_status_t`` code (``err_code``, ``get_error_code()``). Tests and the
simulator set what a GPU reports and which call fails with which code; nothing here loads a
library. Partitioned GPUs are several handles, one per partition, sharing one physical device
(``partition_id`` 0 carries the physical sensors, as amdsmi and DME report them).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from exporter.sources import amdsmi_api as api


class AmdSmiException(Exception):
    """amdsmi's base exception."""


class AmdSmiLibraryException(AmdSmiException):
    """An error of the library: ``err_code`` is the ``amdsmi_status_t`` (always positive)."""

    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = abs(int(err_code))
        self.err_info = _INFO.get(self.err_code, "AMDSMI_STATUS_UNKNOWN_ERROR")

    def __str__(self) -> str:
        return f"An error occured with code: {self.err_code}({self.err_info})"

    def get_error_code(self) -> int:
        return self.err_code


class AmdSmiParameterException(AmdSmiException):
    """A wrong argument type (the binding raises it before calling the library)."""


_INFO = {
    api.STATUS_INVAL: "AMDSMI_STATUS_INVAL",
    api.STATUS_NOT_SUPPORTED: "AMDSMI_STATUS_NOT_SUPPORTED",
    api.STATUS_NOT_YET_IMPLEMENTED: "AMDSMI_STATUS_NOT_YET_IMPLEMENTED",
    api.STATUS_DRM_ERROR: "AMDSMI_STATUS_DRM_ERROR",
    api.STATUS_IO: "AMDSMI_STATUS_IO",
    api.STATUS_NO_PERM: "AMDSMI_STATUS_NO_PERM",
    api.STATUS_INIT_ERROR: "AMDSMI_STATUS_INIT_ERROR",
    api.STATUS_BUSY: "AMDSMI_STATUS_BUSY",
    api.STATUS_NOT_FOUND: "AMDSMI_STATUS_NOT_FOUND",
    api.STATUS_DRIVER_NOT_LOADED: "AMDSMI_STATUS_DRIVER_NOT_LOADED",
    api.STATUS_NO_DATA: "AMDSMI_STATUS_NO_DATA",
}


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0


class AmdSmiClkType(IntEnum):
    SYS = 0
    GFX = 0
    DF = 1
    DCEF = 2
    SOC = 3
    MEM = 4


class AmdSmiGpuBlock(IntEnum):  # amdsmi_gpu_block_t: one bit per RAS block
    INVALID = 0
    UMC = 1 << 0
    SDMA = 1 << 1
    GFX = 1 << 2
    MMHUB = 1 << 3
    ATHUB = 1 << 4
    PCIE_BIF = 1 << 5
    HDP = 1 << 6
    XGMI_WAFL = 1 << 7
    DF = 1 << 8
    SMN = 1 << 9
    SEM = 1 << 10
    MP0 = 1 << 11
    MP1 = 1 << 12
    FUSE = 1 << 13
    MCA = 1 << 14
    VCN = 1 << 15
    JPEG = 1 << 16
    IH = 1 << 17
    MPIO = 1 << 18


@dataclass
class CperRecord:
    """One CPER record as the fake stores it: severity (the binding's lower-cased name) and
    the AMD Field IDs ``amdsmi_get_afids_from_cper`` decodes from it."""

    severity: str
    afids: tuple[int, ...]


@dataclass
class FakeAmdGpu:
    """What one processor handle reports. Counters are plain numbers the test moves."""

    uuid: str = "0aff74a1-0000-1000-8000-000000000000"
    bdf: str = "0000:05:00.0"
    market_name: str = "AMD Instinct MI300X"
    serial: str = "0x5E8D2C3A1B9F0001"
    vbios: str = "113-M3000100-102"
    driver: str = "6.10.5"
    partition_id: int = 0
    compute_partition: str = "SPX"
    memory_partition: str = "NPS1"
    temperature: dict[str, Any] = field(
        default_factory=lambda: {"HOTSPOT": 45, "EDGE": "N/A", "VRAM": 38}
    )
    power: dict[str, Any] = field(
        default_factory=lambda: {"current_socket_power": 320, "average_socket_power": "N/A"}
    )
    power_cap_uw: int = 750_000_000
    energy: int = 1_000_000  # ticks of 15.259 uJ
    activity: dict[str, Any] = field(
        default_factory=lambda: {"gfx_activity": 87, "umc_activity": 41, "mm_activity": "N/A"}
    )
    clocks: dict[str, tuple[int, int]] = field(
        default_factory=lambda: {"GFX": (2100, 2100), "MEM": (1300, 1300)}
    )  # MHz: (current, max)
    vram_mb: tuple[int, int] = (196_592, 12_000)  # total, used
    ecc_total: dict[str, int] = field(
        default_factory=lambda: {"correctable_count": 0, "uncorrectable_count": 0,
                                 "deferred_count": 0}
    )  # fmt: skip
    ecc_blocks: dict[str, dict[str, int]] = field(default_factory=dict)  # block name -> counts
    ras_blocks: tuple[str, ...] = ("UMC", "SDMA", "GFX", "MMHUB", "PCIE_BIF", "XGMI_WAFL")
    pcie: dict[str, Any] = field(
        default_factory=lambda: {"pcie_width": 16, "pcie_speed": 32000, "pcie_replay_count": 0,
                                 "pcie_l0_to_recovery_count": 0, "pcie_replay_roll_over_count": 0,
                                 "pcie_nak_sent_count": 0, "pcie_nak_received_count": 0}
    )  # fmt: skip
    pcie_max: tuple[int, int] = (16, 32000)  # width, MT/s
    xgmi_read_kb: list[Any] = field(default_factory=lambda: [0] * 8)
    xgmi_write_kb: list[Any] = field(default_factory=lambda: [0] * 8)
    violation: dict[str, Any] = field(
        default_factory=lambda: {"acc_counter": 0, "acc_prochot_thrm": 0, "acc_ppt_pwr": 0,
                                 "acc_socket_thrm": 0, "acc_vr_thrm": 0, "acc_hbm_thrm": 0,
                                 "active_prochot_thrm": False, "active_ppt_pwr": False,
                                 "active_socket_thrm": False, "active_vr_thrm": False,
                                 "active_hbm_thrm": False}
    )  # fmt: skip
    cper: list[CperRecord] = field(default_factory=list)
    # amdsmi function name -> amdsmi_status_t it fails with on this handle
    errors: dict[str, int] = field(default_factory=dict)
    lost: bool = False  # off the bus: every call answers NOT_FOUND

    def fail_with(self, function: str, code: int) -> None:
        self.errors[function] = code


class FakeHandle:
    """An opaque processor handle (amdsmi_wrapper.amdsmi_processor_handle in the binding)."""

    def __init__(self, gpu: FakeAmdGpu) -> None:
        self.gpu = gpu


class FakeAmdSmi:
    """The amdsmi module, faked. ``gpus``: one entry per processor handle, in amdsmi's order."""

    AmdSmiException = AmdSmiException
    AmdSmiLibraryException = AmdSmiLibraryException
    AmdSmiParameterException = AmdSmiParameterException
    AmdSmiInitFlags = AmdSmiInitFlags
    AmdSmiTemperatureType = AmdSmiTemperatureType
    AmdSmiTemperatureMetric = AmdSmiTemperatureMetric
    AmdSmiClkType = AmdSmiClkType
    AmdSmiGpuBlock = AmdSmiGpuBlock

    def __init__(self, gpus: list[FakeAmdGpu] | None = None) -> None:
        self.gpus = list(gpus or [])
        self.init_error: int | None = None  # amdsmi_init fails with this code
        self.initialized = False
        self.init_calls = 0
        self.calls: list[str] = []

    # ------------------------------------------------------------------ library
    def amdsmi_init(self, flag: Any = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise AmdSmiLibraryException(self.init_error)
        self.initialized = True

    def amdsmi_shut_down(self) -> None:
        self.initialized = False

    def amdsmi_get_processor_handles(self) -> list[FakeHandle]:
        self._library()
        return [FakeHandle(g) for g in self.gpus]

    # ------------------------------------------------------------------ identity
    def amdsmi_get_gpu_device_uuid(self, processor_handle: Any) -> str:
        return self._gpu("amdsmi_get_gpu_device_uuid", processor_handle).uuid

    def amdsmi_get_gpu_device_bdf(self, processor_handle: Any) -> str:
        return self._gpu("amdsmi_get_gpu_device_bdf", processor_handle).bdf

    def amdsmi_get_gpu_asic_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_asic_info", processor_handle)
        return {"market_name": g.market_name, "vendor_id": "0x1002", "device_id": "0x74a1",
                "asic_serial": g.serial, "num_compute_units": 304}  # fmt: skip

    def amdsmi_get_gpu_board_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_board_info", processor_handle)
        return {"product_serial": g.serial, "product_name": g.market_name, "fru_id": "N/A"}

    def amdsmi_get_gpu_vbios_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_vbios_info", processor_handle)
        return {"name": "N/A", "version": g.vbios, "part_number": g.vbios, "build_date": "N/A"}

    def amdsmi_get_gpu_driver_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_driver_info", processor_handle)
        return {"driver_name": "amdgpu", "driver_version": g.driver, "driver_date": "N/A"}

    def amdsmi_get_gpu_kfd_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_kfd_info", processor_handle)
        return {"kfd_id": 1000 + self.gpus.index(g), "node_id": 2 + self.gpus.index(g),
                "current_partition_id": g.partition_id}  # fmt: skip

    def amdsmi_get_gpu_compute_partition(self, processor_handle: Any) -> str:
        return self._gpu("amdsmi_get_gpu_compute_partition", processor_handle).compute_partition

    def amdsmi_get_gpu_memory_partition(self, processor_handle: Any) -> str:
        return self._gpu("amdsmi_get_gpu_memory_partition", processor_handle).memory_partition

    # ------------------------------------------------------------------ sensors
    def amdsmi_get_temp_metric(self, processor_handle: Any, sensor_type: Any, metric: Any) -> int:
        g = self._gpu("amdsmi_get_temp_metric", processor_handle)
        _check_enum(sensor_type, AmdSmiTemperatureType)
        _check_enum(metric, AmdSmiTemperatureMetric)
        name = "HOTSPOT" if sensor_type == AmdSmiTemperatureType.HOTSPOT else sensor_type.name
        value = g.temperature.get(name, "N/A")
        if value == "N/A":  # the C call itself answers NOT_SUPPORTED for a missing sensor
            raise AmdSmiLibraryException(api.STATUS_NOT_SUPPORTED)
        return int(value)

    def amdsmi_get_power_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_power_info", processor_handle)
        return {**g.power, "gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
                "power_limit": g.power_cap_uw // 1_000_000}  # fmt: skip

    def amdsmi_get_power_cap_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_power_cap_info", processor_handle)
        return {"power_cap": g.power_cap_uw, "default_power_cap": g.power_cap_uw,
                "dpm_cap": 0, "min_power_cap": 0, "max_power_cap": g.power_cap_uw}  # fmt: skip

    def amdsmi_get_energy_count(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_energy_count", processor_handle)
        return {"power": g.energy, "energy_accumulator": g.energy,
                "counter_resolution": 15.259, "timestamp": 0}  # fmt: skip

    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> dict[str, Any]:
        return dict(self._gpu("amdsmi_get_gpu_activity", processor_handle).activity)

    def amdsmi_get_clock_info(self, processor_handle: Any, clock_type: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_clock_info", processor_handle)
        _check_enum(clock_type, AmdSmiClkType)
        name = "GFX" if clock_type == AmdSmiClkType.GFX else clock_type.name
        if name not in g.clocks:
            raise AmdSmiLibraryException(api.STATUS_NOT_SUPPORTED)
        cur, top = g.clocks[name]
        return {"clk": cur, "min_clk": 100, "max_clk": top, "clk_locked": False,
                "clk_deep_sleep": False}  # fmt: skip

    def amdsmi_get_gpu_vram_usage(self, processor_handle: Any) -> dict[str, Any]:
        total, used = self._gpu("amdsmi_get_gpu_vram_usage", processor_handle).vram_mb
        return {"vram_total": total, "vram_used": used}

    # ------------------------------------------------------------------ RAS
    def amdsmi_get_gpu_total_ecc_count(self, processor_handle: Any) -> dict[str, Any]:
        return dict(self._gpu("amdsmi_get_gpu_total_ecc_count", processor_handle).ecc_total)

    def amdsmi_get_gpu_ecc_count(self, processor_handle: Any, block: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_ecc_count", processor_handle)
        _check_enum(block, AmdSmiGpuBlock)
        if block.name not in g.ras_blocks:  # RAS not enabled for this block on this GPU
            raise AmdSmiLibraryException(api.STATUS_NOT_SUPPORTED)
        counts = g.ecc_blocks.get(block.name, {})
        return {k: counts.get(k, 0)
                for k in ("correctable_count", "uncorrectable_count", "deferred_count")}  # fmt: skip

    def amdsmi_get_gpu_cper_entries(
        self,
        processor_handle: Any,
        severity_mask: int,
        buffer_size: int = 4 * 1048576,
        cursor: int = 0,
    ) -> tuple[dict[int, dict[str, Any]], int, list[dict[str, Any]], int]:
        g = self._gpu("amdsmi_get_gpu_cper_entries", processor_handle)
        batch = g.cper[cursor : cursor + 20]  # the binding asks for 20 headers a call
        entries = {i: {"error_severity": r.severity, "record_id": f"r{cursor + i}"}
                   for i, r in enumerate(batch)}  # fmt: skip
        raw = [{"bytes": list(r.afids), "size": len(r.afids), "_record": r} for r in batch]
        more = cursor + len(batch) < len(g.cper)
        status = api.STATUS_MORE_DATA if more else 0
        return entries, cursor + len(batch), raw, status

    def amdsmi_get_afids_from_cper(self, cper_afid_data: Any) -> tuple[list[int], int]:
        records = cper_afid_data if isinstance(cper_afid_data, list) else []
        afids = [a for rec in records for a in rec["_record"].afids]
        return afids, len(afids)

    # ------------------------------------------------------------------ links
    def amdsmi_get_pcie_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_pcie_info", processor_handle)
        width, speed = g.pcie_max
        return {"pcie_static": {"max_pcie_width": width, "max_pcie_speed": speed,
                                "pcie_interface_version": 5, "slot_type": "OAM"},
                "pcie_metric": dict(g.pcie)}  # fmt: skip

    def amdsmi_get_gpu_metrics_info(self, processor_handle: Any) -> dict[str, Any]:
        g = self._gpu("amdsmi_get_gpu_metrics_info", processor_handle)
        return {"xgmi_read_data_acc": list(g.xgmi_read_kb),
                "xgmi_write_data_acc": list(g.xgmi_write_kb),
                "num_partition": 1, "temperature_hotspot": g.temperature.get("HOTSPOT", "N/A")}  # fmt: skip

    def amdsmi_get_violation_status(self, processor_handle: Any) -> dict[str, Any]:
        return dict(self._gpu("amdsmi_get_violation_status", processor_handle).violation)

    # ------------------------------------------------------------------ plumbing
    def _library(self) -> None:
        if not self.initialized:
            raise AmdSmiLibraryException(api.STATUS_NOT_INIT)

    def _gpu(self, function: str, handle: Any) -> FakeAmdGpu:
        if not isinstance(handle, FakeHandle):
            raise AmdSmiParameterException(f"{function}: not a processor handle: {handle!r}")
        self._library()
        self.calls.append(function)
        g = handle.gpu
        if g.lost or g not in self.gpus:
            raise AmdSmiLibraryException(api.STATUS_NOT_FOUND)
        if function in g.errors:
            raise AmdSmiLibraryException(g.errors[function])
        return g


def _check_enum(value: Any, enum: type[IntEnum]) -> None:
    if not isinstance(value, enum):
        raise AmdSmiParameterException(f"expected {enum.__name__}, got {value!r}")


BUSES = ("05", "26", "46", "65", "85", "a6", "c6", "e5")  # example bus numbers of an 8-GPU node


def mi300x_node(gpus: int = 8, *, node: str = "n", partitions: int = 1) -> FakeAmdSmi:
    """An MI300X node: ``gpus`` OAMs, each ``partitions`` handles (CPX: 8, DPX: 2, QPX: 4)."""
    mode = {1: "SPX", 2: "DPX", 4: "QPX", 8: "CPX"}[partitions]
    out = []
    for i in range(gpus):
        for p in range(partitions):
            bus = BUSES[i % len(BUSES)]
            out.append(FakeAmdGpu(
                uuid=f"{i:02x}ff74a1-{p:04x}-1000-80{i:02x}-{hash(node) & 0xFFFFFFFF:012x}",
                bdf=f"0000:{bus}:00.{p}" if partitions > 1 else f"0000:{bus}:00.0",
                serial=f"0x5E8D2C3A1B9F{i:04X}", partition_id=p, compute_partition=mode,
            ))  # fmt: skip
    return FakeAmdSmi(out)
