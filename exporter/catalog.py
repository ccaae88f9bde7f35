"""The metric catalogue: every metric name gpuwarden emits, defined once.

Sits at the root of the data flow: the exporter renders these, the analyzer and alert rules
query them, dashboards plot them. A leaf module (stdlib only) so any package may import it.
No other file spells a metric name by hand; ``tests/test_catalog.py`` enforces that.

Native names follow Prometheus conventions (base units, ``_total`` on counters, ``_info``
for identity). ``dcgm`` maps a native series to dcgm-exporter's field name for
``--compat dcgm`` (https://github.com/NVIDIA/dcgm-exporter, default-counters.csv).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

MetricType = Literal["gauge", "counter", "histogram"]

PREFIX = "gpuwarden_"

GPU = ("node", "gpu", "uuid")
NVLINK = (*GPU, "link")
# A MIG device: its parent GPU, the GPU instance (dcgm's GPU_I_ID), the compute instance
# within it (GPU_CI_ID) and the instance profile (GPU_I_PROFILE, e.g. "1g.10gb").
MIG = (*GPU, "gpu_instance", "compute_instance", "profile")
IB_PORT = ("node", "device", "port")


@dataclass(frozen=True)
class DcgmField:
    """How one native series becomes a dcgm-exporter series.

    ``match``: only native samples with these label values map to this field.
    ``sum_over``: native labels summed away (dcgm's per-GPU totals over NVLink links).
    ``scale``: native value times scale gives dcgm's unit (e.g. bytes -> MiB).
    ``help``: dcgm-exporter's help text (etc/default-counters.csv) when it has one.
    ``integer``: DCGM stores the field as int64, so dcgm-exporter prints it without a fraction.
    Several native metrics may feed one field (their values are summed), e.g. NVLink TX + RX.
    """

    name: str
    type: MetricType = "gauge"
    scale: float = 1.0
    match: tuple[tuple[str, str], ...] = ()
    sum_over: tuple[str, ...] = ()
    help: str = ""
    integer: bool = True


@dataclass(frozen=True, eq=False)  # one object per metric: identity is equality, hashing cheap
class MetricDef:
    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...]
    unit: str = ""
    dcgm: tuple[DcgmField, ...] = ()
    buckets: tuple[float, ...] = ()

    def sample(self, value: float, **labels: str) -> Sample:
        """A sample with exactly this metric's label set (raises on a missing or extra label)."""
        if len(labels) != len(self.labels) or any(k not in labels for k in self.labels):
            raise ValueError(f"{self.name}: labels {sorted(labels)} != {sorted(self.labels)}")
        return Sample(self, tuple(str(labels[k]) for k in self.labels), float(value))

    def make(self, value: float, *label_values: str) -> Sample:
        """Fast path for hot loops: label values positionally, in ``labels`` order."""
        if len(label_values) != len(self.labels):
            raise ValueError(f"{self.name}: {len(label_values)} label values, want {self.labels}")
        return Sample(self, label_values, float(value))


@dataclass(frozen=True, slots=True)
class Sample:
    metric: MetricDef
    label_values: tuple[str, ...]
    value: float

    @property
    def labels(self) -> dict[str, str]:
        return dict(zip(self.metric.labels, self.label_values, strict=True))


_ALL: dict[str, MetricDef] = {}


def _m(
    name: str,
    type: MetricType,
    help: str,
    labels: tuple[str, ...],
    unit: str = "",
    dcgm: tuple[DcgmField, ...] = (),
    buckets: tuple[float, ...] = (),
) -> MetricDef:
    full = name if name.startswith(PREFIX) or name.startswith("DCGM_") else PREFIX + name
    if full in _ALL:
        raise ValueError(f"duplicate metric {full}")
    d = MetricDef(full, type, help, labels, unit, dcgm, buckets)
    _ALL[full] = d
    return d


def _dc(name: str, **kw: object) -> tuple[DcgmField, ...]:
    return (DcgmField(name, **kw),)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- GPU (NVML)
GPU_INFO = _m(
    "gpu_info",
    "gauge",
    "GPU identity; value is always 1.",
    (*GPU, "name", "pci_bus_id", "serial", "vbios_version", "driver_version"),
)
GPU_UP = _m(
    "gpu_up",
    "gauge",
    "1 when NVML answers for this GPU, 0 when it is lost or failing (reason says why).",
    (*GPU, "reason"),
)
GPU_TEMPERATURE = _m(
    "gpu_temperature_celsius",
    "gauge",
    "GPU core temperature.",
    GPU,
    "celsius",
    _dc("DCGM_FI_DEV_GPU_TEMP", help="GPU temperature (in C)."),
)
GPU_MEMORY_TEMPERATURE = _m(
    "gpu_memory_temperature_celsius",
    "gauge",
    "HBM temperature.",
    GPU,
    "celsius",
    _dc("DCGM_FI_DEV_MEMORY_TEMP", help="Memory temperature (in C)."),
)
GPU_POWER = _m(
    "gpu_power_usage_watts",
    "gauge",
    "Current board power draw.",
    GPU,
    "watts",
    _dc("DCGM_FI_DEV_POWER_USAGE", help="Power draw (in W).", integer=False),
)
GPU_POWER_LIMIT = _m(
    "gpu_power_limit_watts",
    "gauge",
    "Enforced power limit.",
    GPU,
    "watts",
    _dc("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", integer=False),
)
GPU_ENERGY = _m(
    "gpu_energy_consumption_joules_total",
    "counter",
    "Energy consumed since the driver was loaded.",
    GPU,
    "joules",
    _dc(
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        help="Total energy consumption since boot (in mJ).",
        type="counter",
        scale=1000.0,
    ),
)
GPU_UTILIZATION = _m(
    "gpu_utilization_ratio",
    "gauge",
    "Fraction of the sample period a kernel was running (NVML utilization.gpu).",
    GPU,
    "ratio",
    _dc("DCGM_FI_DEV_GPU_UTIL", help="GPU utilization (in %).", scale=100.0),
)
GPU_MEMORY_UTILIZATION = _m(
    "gpu_memory_utilization_ratio",
    "gauge",
    "Fraction of the sample period device memory was read or written.",
    GPU,
    "ratio",
    _dc("DCGM_FI_DEV_MEM_COPY_UTIL", help="Memory utilization (in %).", scale=100.0),
)
GPU_ENCODER_UTILIZATION = _m(
    "gpu_encoder_utilization_ratio",
    "gauge",
    "Fraction of the sample period the video encoder (NVENC) was busy.",
    GPU,
    "ratio",
    _dc("DCGM_FI_DEV_ENC_UTIL", scale=100.0, help="Encoder utilization (in %)."),
)
GPU_DECODER_UTILIZATION = _m(
    "gpu_decoder_utilization_ratio",
    "gauge",
    "Fraction of the sample period the video decoder (NVDEC) was busy.",
    GPU,
    "ratio",
    _dc("DCGM_FI_DEV_DEC_UTIL", scale=100.0, help="Decoder utilization (in %)."),
)
GPU_SM_CLOCK = _m(
    "gpu_sm_clock_hertz",
    "gauge",
    "Current SM clock.",
    GPU,
    "hertz",
    _dc("DCGM_FI_DEV_SM_CLOCK", help="SM clock frequency (in MHz).", scale=1e-6),
)
GPU_MEMORY_CLOCK = _m(
    "gpu_memory_clock_hertz",
    "gauge",
    "Current memory clock.",
    GPU,
    "hertz",
    _dc("DCGM_FI_DEV_MEM_CLOCK", help="Memory clock frequency (in MHz).", scale=1e-6),
)
GPU_SM_CLOCK_MAX = _m("gpu_sm_clock_max_hertz", "gauge", "Maximum SM clock.", GPU, "hertz")
GPU_MEMORY_CLOCK_MAX = _m(
    "gpu_memory_clock_max_hertz", "gauge", "Maximum memory clock.", GPU, "hertz"
)
# NVML perf policies (nvmlPerfPolicyType_t) -> dcgm-exporter field; NVML counts nanoseconds.
VIOLATION_POLICIES: Mapping[str, str] = {
    "power": "POWER",
    "thermal": "THERMAL",
    "sync_boost": "SYNC_BOOST",
    "board_limit": "BOARD_LIMIT",
    "low_utilization": "LOW_UTIL",
    "reliability": "RELIABILITY",
    "total_app_clocks": "TOTAL_APP_CLOCKS",
    "total_base_clocks": "TOTAL_BASE_CLOCKS",
}
_VIOLATION_HELP = {
    "power": "power constraints",
    "thermal": "thermal constraints",
    "sync_boost": "sync-boost constraints",
    "board_limit": "board limit constraints",
    "low_utilization": "low utilization",
    "reliability": "reliability constraints",
}
GPU_CLOCK_VIOLATION = _m(
    "gpu_clock_violation_seconds_total",
    "counter",
    "Time clocks were held below their target by this policy (nvmlDeviceGetViolationStatus).",
    (*GPU, "policy"),
    "seconds",
    tuple(
        DcgmField(
            f"DCGM_FI_DEV_{d}_VIOLATION",
            "counter",
            scale=1e9,
            match=(("policy", p),),
            help=f"Throttling duration due to {_VIOLATION_HELP[p]} (in ns)."
            if p in _VIOLATION_HELP
            else "",
        )
        for p, d in VIOLATION_POLICIES.items()
    ),
)
GPU_THROTTLE = _m(
    "gpu_clock_throttle_active",
    "gauge",
    "1 while this clock event reason holds clocks down (NVML clocks event reasons).",
    (*GPU, "reason"),
)
GPU_MEMORY_USED = _m(
    "gpu_memory_used_bytes",
    "gauge",
    "Framebuffer memory in use.",
    GPU,
    "bytes",
    _dc("DCGM_FI_DEV_FB_USED", help="Framebuffer memory used (in MiB).", scale=1.0 / 1048576),
)
GPU_MEMORY_FREE = _m(
    "gpu_memory_free_bytes",
    "gauge",
    "Framebuffer memory free.",
    GPU,
    "bytes",
    _dc("DCGM_FI_DEV_FB_FREE", help="Framebuffer memory free (in MiB).", scale=1.0 / 1048576),
)
GPU_MEMORY_TOTAL = _m(
    "gpu_memory_total_bytes",
    "gauge",
    "Framebuffer memory size.",
    GPU,
    "bytes",
    _dc("DCGM_FI_DEV_FB_TOTAL", scale=1.0 / 1048576),
)
GPU_MEMORY_RESERVED = _m(
    "gpu_memory_reserved_bytes",
    "gauge",
    "Framebuffer memory the driver reserves (nvmlDeviceGetMemoryInfo_v2).",
    GPU,
    "bytes",
    _dc(
        "DCGM_FI_DEV_FB_RESERVED",
        scale=1.0 / 1048576,
        help="Framebuffer memory reserved (in MiB).",
    ),
)
GPU_ECC_ERRORS = _m(
    "gpu_ecc_errors_total",
    "counter",
    "ECC errors; error_type corrected|uncorrected, counter_type volatile (since driver load)"
    " or aggregate (lifetime).",
    (*GPU, "error_type", "counter_type"),
    "",
    (
        DcgmField(
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
            "counter",
            help="Total number of single-bit volatile ECC errors.",
            match=(("error_type", "corrected"), ("counter_type", "volatile")),
        ),
        DcgmField(
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
            "counter",
            help="Total number of double-bit volatile ECC errors.",
            match=(("error_type", "uncorrected"), ("counter_type", "volatile")),
        ),
        DcgmField(
            "DCGM_FI_DEV_ECC_SBE_AGG_TOTAL",
            "counter",
            help="Total number of single-bit persistent ECC errors.",
            match=(("error_type", "corrected"), ("counter_type", "aggregate")),
        ),
        DcgmField(
            "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL",
            "counter",
            help="Total number of double-bit persistent ECC errors.",
            match=(("error_type", "uncorrected"), ("counter_type", "aggregate")),
        ),
    ),
)
GPU_REMAPPED_ROWS = _m(
    "gpu_remapped_rows",
    "gauge",
    "Rows remapped in HBM so far; kind correctable|uncorrectable.",
    (*GPU, "kind"),
    "",
    (
        DcgmField(
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            match=(("kind", "correctable"),),
            help="Number of remapped rows for correctable errors",
        ),
        DcgmField(
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            match=(("kind", "uncorrectable"),),
            help="Number of remapped rows for uncorrectable errors",
        ),
    ),
)
GPU_ROW_REMAP_PENDING = _m(
    "gpu_row_remap_pending",
    "gauge",
    "1 when a row remap waits for a GPU reset.",
    GPU,
    "",
    _dc("DCGM_FI_DEV_ROW_REMAP_PENDING"),
)
GPU_ROW_REMAP_FAILED = _m(
    "gpu_row_remap_failed",
    "gauge",
    "1 when a row remap failed (replace the GPU).",
    GPU,
    "",
    _dc("DCGM_FI_DEV_ROW_REMAP_FAILURE", help="Whether remapping of rows has failed"),
)
GPU_RETIRED_PAGES = _m(
    "gpu_retired_pages",
    "gauge",
    "Pages retired (pre-Ampere GPUs); cause single_bit|double_bit.",
    (*GPU, "cause"),
    "",
    (
        DcgmField(
            "DCGM_FI_DEV_RETIRED_SBE",
            "counter",
            match=(("cause", "single_bit"),),
            help="Total number of retired pages due to single-bit errors.",
        ),
        DcgmField(
            "DCGM_FI_DEV_RETIRED_DBE",
            "counter",
            match=(("cause", "double_bit"),),
            help="Total number of retired pages due to double-bit errors.",
        ),
    ),
)
GPU_RETIRED_PAGES_PENDING = _m(
    "gpu_retired_pages_pending",
    "gauge",
    "1 when a page retirement waits for a reboot.",
    GPU,
    "",
    _dc(
        "DCGM_FI_DEV_RETIRED_PENDING",
        type="counter",
        help="Total number of pages pending retirement.",
    ),
)
GPU_PCIE_REPLAY = _m(
    "gpu_pcie_replay_errors_total",
    "counter",
    "PCIe replay counter.",
    GPU,
    "",
    _dc("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", help="Total number of PCIe retries.", type="counter"),
)
GPU_PCIE_GENERATION = _m(
    "gpu_pcie_link_generation",
    "gauge",
    "Current PCIe link generation.",
    GPU,
    "",
    _dc("DCGM_FI_DEV_PCIE_LINK_GEN"),
)
GPU_PCIE_GENERATION_MAX = _m(
    "gpu_pcie_link_generation_max", "gauge", "Maximum PCIe link generation.", GPU
)
GPU_PCIE_WIDTH = _m(
    "gpu_pcie_link_width",
    "gauge",
    "Current PCIe link width (lanes).",
    GPU,
    "",
    _dc("DCGM_FI_DEV_PCIE_LINK_WIDTH"),
)
GPU_PCIE_WIDTH_MAX = _m("gpu_pcie_link_width_max", "gauge", "Maximum PCIe link width.", GPU)
GPU_RECOVERY_ACTION = _m(
    "gpu_recovery_action",
    "gauge",
    "Driver's recommended recovery action: 0 none, 1 GPU reset, 2 node reboot,"
    " 3 drain P2P, 4 drain and reset.",
    GPU,
)
GPU_VGPU_LICENSE = _m(
    "gpu_vgpu_license_status",
    "gauge",
    "1 when a vGPU (GRID) licensable feature of this GPU is licensed, 0 when not; absent on"
    " GPUs without vGPU licensing (nvmlDeviceGetGridLicensableFeatures).",
    GPU,
    "",
    _dc("DCGM_FI_DEV_VGPU_LICENSE_STATUS", help="vGPU License status"),
)

# Profiling (DCGM's DCP fields): NVML GPM on Hopper and newer, or a DCGM host engine.
GPU_GRAPHICS_ACTIVE = _m(
    "gpu_graphics_engine_active_ratio",
    "gauge",
    "Fraction of time the graphics/compute engine was active (GPM GRAPHICS_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        help="Ratio of time the graphics engine is active.",
        integer=False,
    ),
)
GPU_TENSOR_ACTIVE = _m(
    "gpu_tensor_pipe_active_ratio",
    "gauge",
    "Fraction of cycles a tensor pipe was active (GPM ANY_TENSOR_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        help="Ratio of cycles the tensor (HMMA) pipe is active.",
        integer=False,
    ),
)
GPU_DRAM_ACTIVE = _m(
    "gpu_dram_active_ratio",
    "gauge",
    "Fraction of cycles the device memory interface was busy (GPM DRAM_BW_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        help="Ratio of cycles the device memory interface is active sending or receiving data.",
        integer=False,
    ),
)
GPU_PCIE_TRANSMIT_RATE = _m(
    "gpu_pcie_transmit_bytes_per_second",
    "gauge",
    "PCIe data sent by this GPU, headers included (GPM PCIE_TX_PER_SEC or DCGM).",
    GPU,
    "bytes_per_second",
    _dc(
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        help="The rate of data transmitted over the PCIe bus - including both protocol headers"
        " and data payloads - in bytes per second.",
    ),
)
GPU_PCIE_RECEIVE_RATE = _m(
    "gpu_pcie_receive_bytes_per_second",
    "gauge",
    "PCIe data received by this GPU, headers included (GPM PCIE_RX_PER_SEC or DCGM).",
    GPU,
    "bytes_per_second",
    _dc(
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        help="The rate of data received over the PCIe bus - including both protocol headers"
        " and data payloads - in bytes per second.",
    ),
)
GPU_SM_ACTIVE = _m(
    "gpu_sm_active_ratio",
    "gauge",
    "Fraction of cycles an SM had at least one warp (GPM SM_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_SM_ACTIVE",
        help="The ratio of cycles an SM has at least 1 warp assigned.",
        integer=False,
    ),
)
GPU_SM_OCCUPANCY = _m(
    "gpu_sm_occupancy_ratio",
    "gauge",
    "Resident warps relative to the SMs' maximum (GPM SM_OCCUPANCY or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_SM_OCCUPANCY",
        help="The ratio of number of warps resident on an SM.",
        integer=False,
    ),
)
GPU_FP64_PIPE_ACTIVE = _m(
    "gpu_fp64_pipe_active_ratio",
    "gauge",
    "Fraction of cycles the FP64 pipes were active (GPM FP64_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        help="Ratio of cycles the fp64 pipes are active.",
        integer=False,
    ),
)
GPU_FP32_PIPE_ACTIVE = _m(
    "gpu_fp32_pipe_active_ratio",
    "gauge",
    "Fraction of cycles the FP32 pipes were active (GPM FP32_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        help="Ratio of cycles the fp32 pipes are active.",
        integer=False,
    ),
)
GPU_FP16_PIPE_ACTIVE = _m(
    "gpu_fp16_pipe_active_ratio",
    "gauge",
    "Fraction of cycles the FP16 pipes were active (GPM FP16_UTIL or DCGM).",
    GPU,
    "ratio",
    _dc(
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        help="Ratio of cycles the fp16 pipes are active.",
        integer=False,
    ),
)
PROFILING_METRICS = (
    GPU_GRAPHICS_ACTIVE,
    GPU_TENSOR_ACTIVE,
    GPU_DRAM_ACTIVE,
    GPU_PCIE_TRANSMIT_RATE,
    GPU_PCIE_RECEIVE_RATE,
    GPU_SM_ACTIVE,
    GPU_SM_OCCUPANCY,
    GPU_FP64_PIPE_ACTIVE,
    GPU_FP32_PIPE_ACTIVE,
    GPU_FP16_PIPE_ACTIVE,
)
GPU_XID_ERRORS = _m(
    "gpu_xid_errors_total",
    "counter",
    "XID errors reported for this GPU, per XID number (kernel log, or NVML events as fallback).",
    (*GPU, "xid"),
)
# AMD RAS (issue 34): what amdsmi reports per GPU and DME reads as gauges. A CPER record is one
# RAS event; each carries AMD Field IDs (AFIDs, analyzer/afid_catalog.yaml); counted per
# (afid, severity) so no event is lost, where DME's gpu_afid_errors keeps the last one only.
RAS_BLOCKS = (
    "umc", "sdma", "gfx", "mmhub", "athub", "bif", "hdp", "xgmi_wafl", "df", "smn", "sem",
    "mp0", "mp1", "fuse", "mca", "vcn", "jpeg", "ih", "mpio",
)  # fmt: skip
RAS_ERROR_TYPES = ("correctable", "uncorrectable", "deferred")
CPER_SEVERITIES = ("fatal", "non_fatal_uncorrected", "non_fatal_corrected")
GPU_RAS_ERRORS = _m(
    "gpu_ras_errors_total",
    "counter",
    "RAS errors per hardware block (umc is HBM); error_type correctable|uncorrectable|deferred"
    " (deferred: poison caught, not consumed).",
    (*GPU, "block", "error_type"),
)
GPU_RAS_EVENTS = _m(
    "gpu_ras_events_total",
    "counter",
    "RAS events (CPER records) per AMD Field ID and CPER severity"
    " (fatal|non_fatal_uncorrected|non_fatal_corrected).",
    (*GPU, "afid", "severity"),
)
# amdgpu kernel-log events (exporter.sources.amdgpu_lines): AMD's analogue of XID lines
AMDGPU_LOG_EVENTS = (
    "ras_poison_consumed",  # "poison is consumed by client N, kick off gpu reset flow"
    "ras_poison_created",  # "Poison is created" / "Poison detected in <block>"
    "ras_uncorrectable",  # "uncorrectable hardware error(ERREVENT_...) detected!"
    "ring_timeout",  # "ring <name> timeout, signaled seq=..., emitted seq=..."
    "gpu_reset",  # "GPU reset begin!"
)
GPU_AMDGPU_EVENTS = _m(
    "gpu_amdgpu_events_total",
    "counter",
    "amdgpu kernel-log events per GPU: RAS poison consumed/created, uncorrectable hardware"
    " errors, ring timeouts (hangs), GPU resets begun.",
    (*GPU, "event"),
)
PCIE_LINK_EVENTS = ("recovery", "nak_sent", "nak_received", "replay_rollover")
GPU_PCIE_LINK_EVENTS = _m(
    "gpu_pcie_link_events_total",
    "counter",
    "PCIe link events per GPU (amdsmi pcie_metric): L0 to recovery transitions, NAKs sent"
    " and received, replay-counter rollovers.",
    (*GPU, "event"),
)
VIOLATION_CAUSES = ("ppt", "socket_thermal", "vr_thermal", "hbm_thermal", "processor_hot")
GPU_VIOLATION_RESIDENCY = _m(
    "gpu_violation_residency_samples_total",
    "counter",
    "Firmware samples in which this cause held the clocks down (amdsmi violation status,"
    " MI300 and later); its rate over gpu_violation_samples_total's is the share of time."
    " ppt is the power cap.",
    (*GPU, "cause"),
)
GPU_VIOLATION_SAMPLES = _m(
    "gpu_violation_samples_total",
    "counter",
    "Firmware samples behind the violation residency counters (amdsmi acc_counter).",
    GPU,
)
GPU_PARTITION_INFO = _m(
    "gpu_partition_info",
    "gauge",
    "A GPU partition (AMD compute/memory partitioning): the physical device's PCI address,"
    " the partition's index on it, the compute (SPX|DPX|QPX|CPX) and memory (NPS1|NPS4)"
    " modes; physical sensors report on partition 0 only. Value is always 1.",
    (*GPU, "pci_bus_id", "partition_id", "compute_partition", "memory_partition"),
)
DCGM_LAST_XID = _m(
    "DCGM_FI_DEV_XID_ERRORS",
    "gauge",
    "Compatibility only: dcgm-exporter's value of the last XID seen on this GPU.",
    (
        "gpu",
        "UUID",
        "pci_bus_id",
        "device",
        "modelName",
        "Hostname",
        "DCGM_FI_DRIVER_VERSION",
        "err_code",
        "err_msg",
    ),
)
DCGM_LAST_XID_HELP = "Value of the last XID error encountered."
GPU_MIG_INFO = _m(
    "gpu_mig_instance_info",
    "gauge",
    "One MIG device of this GPU (NVML MIG device handles); value is always 1.",
    (*MIG, "mig_uuid"),
)
GPU_MIG_MEMORY_USED = _m(
    "gpu_mig_memory_used_bytes",
    "gauge",
    "Framebuffer memory in use in this MIG device.",
    MIG,
    "bytes",
    _dc(
        "DCGM_FI_DEV_FB_USED",
        scale=1.0 / 1048576,
        help="Framebuffer memory used (in MiB).",
    ),
)
GPU_MIG_MEMORY_FREE = _m(
    "gpu_mig_memory_free_bytes",
    "gauge",
    "Framebuffer memory free in this MIG device.",
    MIG,
    "bytes",
    _dc(
        "DCGM_FI_DEV_FB_FREE",
        scale=1.0 / 1048576,
        help="Framebuffer memory free (in MiB).",
    ),
)
GPU_MIG_GRAPHICS_ACTIVE = _m(
    "gpu_mig_graphics_engine_active_ratio",
    "gauge",
    "Fraction of time this MIG instance's graphics/compute engine was active (GPM, per instance).",
    MIG,
    "ratio",
    _dc(
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        help="Ratio of time the graphics engine is active.",
        integer=False,
    ),
)
GPU_MIG_TENSOR_ACTIVE = _m(
    "gpu_mig_tensor_pipe_active_ratio",
    "gauge",
    "Fraction of cycles a tensor pipe of this MIG instance was active (GPM, per instance).",
    MIG,
    "ratio",
    _dc(
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        help="Ratio of cycles the tensor (HMMA) pipe is active.",
        integer=False,
    ),
)
GPU_MIG_DRAM_ACTIVE = _m(
    "gpu_mig_dram_active_ratio",
    "gauge",
    "Fraction of cycles this MIG instance's memory interface was busy (GPM, per instance).",
    MIG,
    "ratio",
    _dc(
        "DCGM_FI_PROF_DRAM_ACTIVE",
        help="Ratio of cycles the device memory interface is active sending or receiving data.",
        integer=False,
    ),
)
GPU_MIG_XID_ERRORS = _m(
    "gpu_mig_xid_errors_total",
    "counter",
    "XID errors the driver attributed to a MIG instance (GPU-I/GPU-CI in the kernel log); each"
    " is counted in its parent GPU's gpuwarden_gpu_xid_errors_total too.",
    (*GPU, "gpu_instance", "compute_instance", "xid"),
)
GPU_XID_NVLINK5_ERRORS = _m(
    "gpu_xid_nvlink5_errors_total",
    "counter",
    "NVLink5 XIDs (144-150) per decoded line: the unit the driver names, the error status and the"
    " sub-code (bits 20-25 of intrinfo) that NVIDIA's decode table keys on; each is counted in"
    " gpuwarden_gpu_xid_errors_total too.",
    (*GPU, "xid", "unit", "error_status", "subcode"),
)
# NVLink fabric (NVSwitch systems: HGX H100/H200 with Fabric Manager, GB200/GB300 NVL72):
# nvmlDeviceGetGpuFabricInfoV (nvml.h nvmlGpuFabricInfo_v2_t). GPUs with one cluster UUID and
# clique id share one NVLink domain; the analyzer takes its NVLink domains from these labels.
GPU_FABRIC_INFO = _m(
    "gpu_fabric_info",
    "gauge",
    "This GPU's place in the NVLink fabric (nvmlDeviceGetGpuFabricInfoV); value is always 1."
    " state: not_supported|not_started|in_progress|completed (registration with the fabric"
    " manager); status: the NVML return of that registration (success, or why it failed).",
    (*GPU, "state", "status", "cluster_uuid", "clique_id"),
)
# The checks of gpu_fabric_health, in the order the analyzer's arrays index them (last axis).
FABRIC_HEALTH_CHECKS = (
    "degraded_bandwidth",
    "route_recovery",
    "route_unhealthy",
    "access_timeout_recovery",
    "incorrect_configuration",
    "gfm_disconnected",
)
GPU_FABRIC_HEALTH = _m(
    "gpu_fabric_health",
    "gauge",
    "1 while the fabric health bit named by check is set for this GPU, 0 while clear"
    " (nvmlGpuFabricInfo_v2_t healthMask: degraded_bandwidth, route_recovery,"
    " route_unhealthy, access_timeout_recovery, incorrect_configuration,"
    " gfm_disconnected); absent where the driver does not report that bit.",
    (*GPU, "check"),
)
# The NVLink fabric's node services: NVIDIA Fabric Manager (HGX with NVSwitch; on GB200 NVL72
# it runs on the switch trays, not the compute nodes) and the IMEX daemon (multi-node NVLink
# memory export, GB200/GB300). Read from systemd (``systemctl show``); a unit not installed on
# this node has no series.
# The services of fabric_service_*, in the order the analyzer's arrays index them (last axis).
FABRIC_SERVICES = ("fabricmanager", "imex")
FABRIC_SERVICE_UP = _m(
    "fabric_service_up",
    "gauge",
    "1 while this fabric service's systemd unit is active (ActiveState=active), else 0; state"
    " carries the ActiveState (active, activating, failed, inactive, ...).",
    ("node", "service", "state"),
)
FABRIC_SERVICE_RESTARTS = _m(
    "fabric_service_restarts_total",
    "counter",
    "Restarts systemd made of this fabric service's unit (NRestarts; resets when the unit is"
    " reloaded or the node reboots).",
    ("node", "service"),
)
FABRIC_IMEX_READY = _m(
    "fabric_imex_ready",
    "gauge",
    "1 while the local IMEX daemon answers READY to nvidia-imex-ctl -q, else 0 (the unit can be"
    " active while the daemon is not ready: peers unreachable, a bad nodes file); status is the"
    " first word it answered. Only on nodes where nvidia-imex.service is installed.",
    ("node", "status"),
)
GPU_POD_INFO = _m(
    "gpu_kubernetes_pod_info",
    "gauge",
    "Pod and container a GPU or MIG device is allocated to (kubelet pod-resources API); value"
    " is always 1. Join it in PromQL to attribute any GPU series to its pod. resource: the"
    " device plugin's resource, or the DRA driver (gpu.nvidia.com) for a device of a"
    " ResourceClaim, whose name is in claim and whose ResourceSlice pool and device name are in"
    " dra_pool and dra_device (all three empty for device plugin GPUs). A shared (time-sliced,"
    " MPS) GPU has one series per pod sharing it, replica naming the device plugin's replica;"
    " gpu is empty for a device the exporter could not map.",
    (*GPU, "gpu_instance", "resource", "namespace", "pod", "container", "claim", "dra_pool",
     "dra_device", "replica"),
)  # fmt: skip
# Per-pod use of a GPU, from NVML's process lists joined to pods through each process's cgroup
# (exporter.sources.procpods): what a shared (time-sliced, MPS) GPU's pods each use. Pod labels
# empty: processes in no pod, or whose pod could not be told (counted in read_errors).
POD_PROCESS = (*GPU, "gpu_instance", "namespace", "pod", "container")
GPU_POD_MEMORY_USED = _m(
    "gpu_pod_memory_used_bytes",
    "gauge",
    "Frame buffer memory the processes of this pod's container hold on this GPU (or MIG"
    " device: gpu_instance), summed (nvmlDeviceGetComputeRunningProcesses usedGpuMemory).",
    POD_PROCESS,
    "bytes",
)
GPU_POD_SM_UTILIZATION = _m(
    "gpu_pod_sm_utilization_ratio",
    "gauge",
    "Fraction of time this GPU's SMs ran this pod's container's kernels over the samples since"
    " the last cycle, summed over its processes (nvmlDeviceGetProcessUtilization smUtil). NVML"
    " samples per GPU context: under MPS the server's context runs every client's kernels, so"
    " the time is the MPS server's; not available on MIG devices.",
    POD_PROCESS,
    "ratio",
)
GPU_POD_PROCESSES = _m(
    "gpu_pod_processes",
    "gauge",
    "Compute processes of this pod's container with a context on this GPU (or MIG device).",
    POD_PROCESS,
)
KUBELET_UP = _m(
    "exporter_kubelet_up",
    "gauge",
    "1 when the last pod-resources List call to the kubelet succeeded (0: absent, slow or"
    " failing; the last known allocations stay exported).",
    ("node",),
)
GPU_ALLOCATION_INFO = _m(
    "gpu_allocation_info",
    "gauge",
    "Job using this GPU (from the scheduler's prolog/epilog map); value is always 1.",
    (*GPU, "job_id", "scheduler"),
)
JOB_STEP_SECONDS = _m(
    "job_step_seconds",
    "gauge",
    "Mean compute time of a training step on this GPU's rank, as the job publishes it"
    " (remediation.checkpoint.publish_step; --step-dir), before it waits at the collective.",
    (*GPU, "job_id"),
    "seconds",
)

# --------------------------------------------------------------------------- NVLink
NVLINK_UP = _m("nvlink_up", "gauge", "1 when this NVLink is active.", NVLINK)
NVLINK_ERRORS = _m(
    "nvlink_errors_total",
    "counter",
    "NVLink errors per link; error_type crc_flit|crc_data|replay|recovery.",
    (*NVLINK, "error_type"),
    "",
    tuple(
        DcgmField(
            f"DCGM_FI_DEV_NVLINK_{d}_ERROR_COUNT_TOTAL",
            "counter",
            match=(("error_type", t),),
            sum_over=("link",),
            help=f"Total number of NVLink {h}.",
        )
        for t, d, h in (
            ("crc_flit", "CRC_FLIT", "flow-control CRC errors"),
            ("crc_data", "CRC_DATA", "data CRC errors"),
            ("replay", "REPLAY", "retries"),
            ("recovery", "RECOVERY", "recovery errors"),
        )
    ),
)
GPU_NVLINK_ERRORS = _m(
    "gpu_nvlink_errors_total",
    "counter",
    "NVLink errors of this GPU: nvlink_errors_total summed over every link and error type;"
    " served only when every link's counters were read. One series per GPU to watch: the"
    " analyzer reads the per-link detail only of GPUs whose total moved.",
    GPU,
)
GPU_NVLINK_DOWN = _m(
    "gpu_nvlink_links_down",
    "gauge",
    "NVLinks of this GPU that are not active (nvlink_up 0); served only when every link's state"
    " was read. The analyzer reads nvlink_up per link only of GPUs where this is above 0.",
    GPU,
)
# dcgm's total counts both directions over every link; its unit is not documented beyond the
# per-lane field's "number of bytes", so bytes it is.
_NVLINK_BANDWIDTH = _dc(
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
    type="counter",
    sum_over=("link",),
    help="Total number of NVLink bandwidth counters for all lanes.",
)
NVLINK_TRANSMIT = _m(
    "nvlink_transmit_bytes_total",
    "counter",
    "Data transmitted on this NVLink.",
    NVLINK,
    "bytes",
    _NVLINK_BANDWIDTH,
)
NVLINK_RECEIVE = _m(
    "nvlink_receive_bytes_total",
    "counter",
    "Data received on this NVLink.",
    NVLINK,
    "bytes",
    _NVLINK_BANDWIDTH,
)

# XGMI (AMD Instinct's GPU-to-GPU links): one counter per link, one link per peer GPU of the hive
GPU_XGMI_TRANSMIT = _m(
    "gpu_xgmi_transmit_bytes_total",
    "counter",
    "Data written over this XGMI link.",
    NVLINK,
    "bytes",
)
GPU_XGMI_RECEIVE = _m(
    "gpu_xgmi_receive_bytes_total",
    "counter",
    "Data read over this XGMI link.",
    NVLINK,
    "bytes",
)

# --------------------------------------------------------------------------- InfiniBand
IB_DEVICE_INFO = _m(
    "infiniband_device_info",
    "gauge",
    "HCA identity; value is always 1.",
    ("node", "device", "board_id", "fw_ver", "hca_type", "node_guid"),
)
IB_PORT_INFO = _m(
    "infiniband_port_info", "gauge", "Port identity; value is always 1.", (*IB_PORT, "link_layer")
)
IB_PORT_STATE = _m(
    "infiniband_port_state",
    "gauge",
    "Logical port state: 1 down, 2 init, 3 armed, 4 active, 5 active_defer.",
    IB_PORT,
)
IB_PORT_PHYS_STATE = _m(
    "infiniband_port_phys_state",
    "gauge",
    "Physical port state: 1 sleep, 2 polling, 3 disabled, 4 training, 5 link_up,"
    " 6 error_recovery, 7 phy_test.",
    IB_PORT,
)
IB_PORT_RATE = _m(
    "infiniband_port_rate_bytes_per_second",
    "gauge",
    "Negotiated port rate.",
    IB_PORT,
    "bytes_per_second",
)
IB_TRANSMIT = _m(
    "infiniband_port_transmit_bytes_total",
    "counter",
    "Data transmitted (sysfs port_xmit_data x 4).",
    IB_PORT,
    "bytes",
)
IB_RECEIVE = _m(
    "infiniband_port_receive_bytes_total",
    "counter",
    "Data received (sysfs port_rcv_data x 4).",
    IB_PORT,
    "bytes",
)
IB_COUNTER = _m(
    "infiniband_port_counters_total",
    "counter",
    "Every other file under ports/<port>/counters, by file name; kept monotonic across resets.",
    (*IB_PORT, "counter"),
)
IB_HW_COUNTER = _m(
    "infiniband_port_hw_counters_total",
    "counter",
    "Every file under ports/<port>/hw_counters (mlx5), by file name; kept monotonic.",
    (*IB_PORT, "counter"),
)
# The sysfs error counters (counters/ and hw_counters/) that degrade or break a job: the ones
# the analyzer judges (REFERENCE.md section 3), summed per port in IB_PORT_ERRORS.
IB_ERROR_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "port_rcv_errors",
    "port_xmit_discards",
    "local_ack_timeout_err",
    "link_downed",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "rnr_nak_retry_err",
)
IB_PORT_ERRORS = _m(
    "infiniband_port_errors_total",
    "counter",
    "The port's error counters summed (" + ", ".join(IB_ERROR_COUNTERS) + ", those the port"
    " has); served only when every one of them was read. One series per port to watch: the"
    " analyzer reads the counters only of ports whose sum moved.",
    IB_PORT,
)
IB_COUNTER_RESETS = _m(
    "infiniband_port_counters_resets_total",
    "counter",
    "Times a sysfs counter of this port went down (driver reload, reset); absorbed, not exported"
    " as negative traffic.",
    IB_PORT,
)

# --------------------------------------------------------------------------- RoCE (PFC, DCQCN)
# The per-priority PFC pause counters of a RoCE port's netdev, which mlx5 reports as ethtool
# statistics (``rx_prio<N>_pause``, ``tx_prio<N>_pause``, ``..._pause_duration`` in
# microseconds; Documentation/networking/device_drivers/ethernet/mellanox/mlx5/counters.rst),
# labelled by the RDMA port whose netdev it is. ``direction`` is the frame's: ``tx`` pauses
# this port SENT (it holds its peer paused), ``rx`` pauses it received (its peer holds it).
ROCE_PFC = (*IB_PORT, "interface", "direction", "priority")
ROCE_PFC_DIRECTIONS = ("rx", "tx")
ROCE_PFC_PAUSE_FRAMES = _m(
    "infiniband_port_pfc_pause_frames_total",
    "counter",
    "PFC pause frames per priority on a RoCE port's netdev (ethtool <direction>_prio<N>_pause).",
    ROCE_PFC,
)
ROCE_PFC_PAUSE_SECONDS = _m(
    "infiniband_port_pfc_pause_seconds_total",
    "counter",
    "Time paused per priority on a RoCE port's netdev (ethtool <direction>_prio<N>_pause_duration,"
    " microseconds in the driver). Its rate is the share of time a port held its peer paused"
    " (tx) or was held (rx).",
    ROCE_PFC,
    "seconds",
)
ROCE_PFC_STORM_EVENTS = _m(
    "infiniband_port_pfc_storm_events_total",
    "counter",
    "mlx5's PFC storm prevention: times the port's receive path stalled past the minor (warning)"
    " or critical (error) watermark (ethtool tx_pause_storm_<level>_events).",
    (*IB_PORT, "interface", "level"),
)
# The hw_counters/ files (mlx5, served in IB_HW_COUNTER) that say how congested a RoCE port is
# (DCQCN: ECN marks seen as notification point, CNPs sent and handled) and how often it lost
# packets or retransmitted (drivers/infiniband/hw/mlx5/counters.c names; REFERENCE.md).
# local_ack_timeout_err is one of IB_ERROR_COUNTERS, judged with the InfiniBand ones.
ROCE_CONGESTION_COUNTERS = ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled")
ROCE_RETRANSMIT_COUNTERS = (
    "out_of_sequence",
    "packet_seq_err",
    "implied_nak_seq_err",
    "roce_adp_retrans",
)

# --------------------------------------------------------------------------- checkpoint storage
STORAGE = ("node", "mount")
STORAGE_PROBE_UP = _m(
    "storage_probe_up",
    "gauge",
    "1 when the last probe of a checkpoint mount (stat, write, fsync, read) succeeded in time;"
    " 0 when it failed or hung.",
    STORAGE,
)
STORAGE_PROBE_DURATION = _m(
    "storage_probe_duration_seconds",
    "gauge",
    "Seconds each step of the last probe of a checkpoint mount took (op: stat, write, fsync,"
    " read).",
    (*STORAGE, "op"),
    "seconds",
)
STORAGE_PROBES = _m(
    "storage_probes_total",
    "counter",
    "Probes of a checkpoint mount by outcome (ok, error, hung).",
    (*STORAGE, "outcome"),
)
NFS_OPS = _m(
    "nfs_client_operations_total",
    "counter",
    "NFS operations the client sent for a probed mount (from /proc/self/mountstats), by op.",
    (*STORAGE, "op"),
)
NFS_OP_MAJOR_TIMEOUTS = _m(
    "nfs_client_major_timeouts_total",
    "counter",
    "NFS operations of a probed mount that hit a major timeout (server not answering), by op.",
    (*STORAGE, "op"),
)
NFS_OP_RTT_SECONDS = _m(
    "nfs_client_rtt_seconds_total",
    "counter",
    "Cumulative round-trip time of the NFS operations of a probed mount, by op.",
    (*STORAGE, "op"),
    "seconds",
)
LUSTRE_OPS = _m(
    "lustre_client_operations_total",
    "counter",
    "Lustre client (llite) operations on the file system a probed mount is on, by op.",
    (*STORAGE, "op"),
)
LUSTRE_BYTES = _m(
    "lustre_client_bytes_total",
    "counter",
    "Bytes the Lustre client read or wrote on the file system a probed mount is on"
    " (direction: read, write).",
    (*STORAGE, "direction"),
    "bytes",
)
LUSTRE_LATENCY = _m(
    "lustre_client_latency_seconds_total",
    "counter",
    "Cumulative time the Lustre client spent in each op on the file system a probed mount is"
    " on (Lustre 2.12+ keeps it; absent on older clients).",
    (*STORAGE, "op"),
    "seconds",
)

# --------------------------------------------------------------------------- exporter self
COLLECTOR_DURATION = _m(
    "exporter_collector_duration_seconds",
    "gauge",
    "Time the last run of each collector took.",
    ("node", "collector"),
    "seconds",
)
COLLECTOR_SUCCESS = _m(
    "exporter_collector_success",
    "gauge",
    "1 when the last run of each collector succeeded.",
    ("node", "collector"),
)
READ_ERRORS = _m(
    "exporter_read_errors_total",
    "counter",
    "Reads that failed and were skipped (an NVML field, a sysfs file, a log line), by what.",
    ("node", "collector", "what"),
)
LAST_COLLECTION = _m(
    "exporter_last_collection_timestamp_seconds",
    "gauge",
    "Unix time the last collection cycle finished.",
    ("node",),
    "seconds",
)
COLLECTION_CYCLES = _m(
    "exporter_collection_cycles_total", "counter", "Collection cycles completed.", ("node",)
)
FIELD_UNAVAILABLE = _m(
    "exporter_field_unavailable",
    "gauge",
    "1 for each catalogue metric this exporter cannot serve for this GPU (gpu empty: for the"
    " node); reason says why (e.g. gpm_unsupported: profiling needs Hopper or newer, or a"
    " DCGM host engine; systemctl_missing: no systemd to read the fabric services from).",
    ("node", "gpu", "metric", "reason"),
)
KMSG_LOST = _m(
    "exporter_kmsg_lost_records_total",
    "counter",
    "Kernel log records lost (ring buffer overrun, EPIPE on /dev/kmsg).",
    ("node",),
)
KMSG_LINES = _m(
    "exporter_kmsg_lines_total", "counter", "Kernel log lines read.", ("node", "source")
)
XID_STATE_RESTORED = _m(
    "exporter_xid_state_restored",
    "gauge",
    "1 when this exporter process carried its XID counts over from --kmsg-state at start; 0"
    " when its counts begin at its start (kernel-log records older than --kmsg-backlog skipped).",
    ("node",),
)
BUILD_INFO = _m(
    "exporter_build_info",
    "gauge",
    "Exporter version and source; value is always 1.",
    ("node", "version", "source"),
)

# --------------------------------------------------------------------------- analyzer
FINDING = _m(
    "finding",
    "gauge",
    "1 per active analyzer finding. subject names the gpu/link/port/switch; action is the"
    " recommended action.",
    ("node", "subject", "kind", "severity", "action", "detector"),
)
FINDING_CONFIDENCE = _m(
    "finding_confidence_ratio",
    "gauge",
    "Confidence of each active finding (0..1).",
    ("node", "subject", "kind", "detector"),
    "ratio",
)
ANALYZER_CYCLE_DURATION = _m(
    "analyzer_detector_duration_seconds",
    "gauge",
    "Time each detector took in the last cycle.",
    ("detector",),
    "seconds",
)
ANALYZER_DETECTOR_ERRORS = _m(
    "analyzer_detector_errors_total",
    "counter",
    "Detector runs that raised (isolated).",
    ("detector",),
)
ANALYZER_CYCLES = _m("analyzer_cycles_total", "counter", "Analysis cycles completed.", ())
ANALYZER_SERIES_READ = _m(
    "analyzer_series_read_total", "counter", "Series read from the series source.", ()
)
ANALYZER_SOURCE_ERRORS = _m(
    "analyzer_source_errors_total", "counter", "Failed reads from the series source.", ("source",)
)
ANALYZER_LAST_CYCLE = _m(
    "analyzer_last_cycle_timestamp_seconds",
    "gauge",
    "Unix time the last cycle finished.",
    (),
    "seconds",
)
ANALYZER_QUERY_BYTES = _m(
    "analyzer_query_bytes_total", "counter", "Response bytes read per query.", ("query",), "bytes"
)
ANALYZER_QUERY_SAMPLES = _m(
    "analyzer_query_samples_total", "counter", "Samples read per query.", ("query",)
)
ANALYZER_QUERY_SECONDS = _m(
    "analyzer_query_seconds_total",
    "counter",
    "Time spent in each query (request and decode).",
    ("query",),
    "seconds",
)
ANALYZER_QUERY_FAILURES = _m(
    "analyzer_query_failures_total",
    "counter",
    "Queries that failed after retries (their data is missing from that cycle).",
    ("query",),
)
ANALYZER_QUERY_WARNINGS = _m(
    "analyzer_query_warnings_total",
    "counter",
    "Answers that came with warnings, kept as they are: a partial response of Thanos Query "
    "or VictoriaMetrics' vmselect (isPartial) (a store unreachable; a shard with no replica "
    "left is missing from the answer).",
    ("query",),
)
ANALYZER_QUERY_SERIES = _m(
    "analyzer_query_series", "gauge", "Series each query holds in the window.", ("query",)
)
ANALYZER_READ_DURATION = _m(
    "analyzer_read_duration_seconds",
    "gauge",
    "Wall time of the last cycle's read (all queries and the window build).",
    (),
    "seconds",
)
ANALYZER_READ_BYTES = _m(
    "analyzer_read_bytes", "gauge", "Response bytes read in the last cycle.", (), "bytes"
)
ANALYZER_READ_SAMPLES = _m("analyzer_read_samples", "gauge", "Samples read in the last cycle.", ())
ANALYZER_WINDOW_NODES = _m(
    "analyzer_window_nodes",
    "gauge",
    "Nodes in the window judged in the last cycle (a replica of the sharded analyzer: its part).",
    (),
)
# sharded mode (analyzer.replicas): what this replica owns and whether the replicas agree
ANALYZER_REPLICA_UNITS = _m(
    "analyzer_replica_units",
    "gauge",
    "Ownership units (comparison domains joined whole) this replica judged in its last cycle.",
    ("replica",),
)
ANALYZER_REPLICA_NODES = _m(
    "analyzer_replica_nodes", "gauge", "Nodes this replica judged in its last cycle.", ("replica",)
)
ANALYZER_REPLICA_MEMBERS = _m(
    "analyzer_replica_members",
    "gauge",
    "Replicas in the plan of this replica's last judged cycle.",
    ("replica",),
)
ANALYZER_REPLICA_LEADER = _m(
    "analyzer_replica_leader",
    "gauge",
    "1 while this replica holds the leader lease (it publishes each cycle's plan).",
    ("replica",),
)
ANALYZER_REPLICA_MISSED = _m(
    "analyzer_replica_cycles_missed_total",
    "counter",
    "Cycles this replica judged nothing in: no plan in time, or not in the plan.",
    ("replica",),
)
ANALYZER_REPLICA_SCORES_MISSING = _m(
    "analyzer_replica_scores_missing_total",
    "counter",
    "Other members' marginal scores this replica judged without: not in by the end of its wait"
    " (a member died mid-cycle), unreadable, or the exchange unreachable.",
    ("replica",),
)
ANALYZER_REPLICA_POOLS_DROPPED = _m(
    "analyzer_replica_pools_dropped_total",
    "counter",
    "Pools of this replica's part left out of the scores it leaves for the others, because "
    "the exchange could not hold them (a ConfigMap's 756 KiB): the others then compare their "
    "nodes without this part's values.",
    ("replica",),
)
ANALYZER_REPLICA_MEMORY_ADOPTED = _m(
    "analyzer_replica_memory_adopted_total",
    "counter",
    "Nodes this replica took over and judged on with the detector memory their last owner left"
    " after the cycle before (streaks, flaps, open XID incidents).",
    ("replica",),
)
ANALYZER_REPLICA_MEMORY_FRESH = _m(
    "analyzer_replica_memory_fresh_total",
    "counter",
    "Nodes this replica took over without their last owner's detector memory, judged as a"
    " freshly started analyzer would: every node of its first cycle, and those of an owner"
    " that died mid-cycle, of a board out of reach or of a memory that did not read.",
    ("replica",),
)
ANALYZER_REPLICA_TOPOLOGY_WAIT = _m(
    "analyzer_replica_topology_wait_seconds",
    "gauge",
    "Seconds this replica, following, waited in its last cycle for the leader's fleet topology"
    " (0 while leading, or without topology sharing): about the leader's own topology read.",
    ("replica",),
    "seconds",
)
ANALYZER_REPLICA_TOPOLOGY_FALLBACKS = _m(
    "analyzer_replica_topology_fallbacks_total",
    "counter",
    "Cycles this replica, not leading, read the fleet topology itself: the leader's was not in"
    " by the end of its wait (the leader died or is slow), was read at another grid time, was"
    " unreadable, or the exchange unreachable.",
    ("replica",),
)

# --------------------------------------------------------------------------- remediation
REMEDIATION_DECISIONS = _m(
    "remediation_decisions_total",
    "counter",
    "Decisions made, by the guard that decided and the verdict (allow|deny).",
    ("guard", "verdict", "action"),
)
REMEDIATION_ACTIONS = _m(
    "remediation_actions_total",
    "counter",
    "Actions executed, by backend and outcome.",
    ("backend", "action", "outcome"),
)
REMEDIATION_ALERT_TO_ACTION = _m(
    "remediation_alert_to_action_seconds",
    "histogram",
    "Time from the alert's startsAt to the action completing.",
    ("action",),
    "seconds",
    buckets=(1, 2, 5, 10, 30, 60, 120, 300, 600, 1800),
)
REMEDIATION_NODES_QUARANTINED = _m(
    "remediation_nodes_quarantined", "gauge", "Nodes held out of service by gpuwarden.", ("state",)
)
REMEDIATION_BREAKER_OPEN = _m(
    "remediation_breaker_open",
    "gauge",
    "1 while the storm breaker is open (no actions taken).",
    (),
)
REMEDIATION_PAUSED = _m(
    "remediation_paused", "gauge", "1 while remediation is paused by an operator.", ()
)
REMEDIATION_LEADER = _m(
    "remediation_leader",
    "gauge",
    "1 while this instance acts: it holds the leader lease (--leader-elect), or runs alone; 0 on"
    " a standby.",
    (),
)
REMEDIATION_BACKEND_UNREACHABLE = _m(
    "remediation_backend_unreachable",
    "gauge",
    "1 while the scheduler or Kubernetes API server does not answer, so accepted alerts wait "
    "undecided (decided when it answers again).",
    (),
)
REMEDIATION_WEBHOOK_REQUESTS = _m(
    "remediation_webhook_requests_total",
    "counter",
    "Webhook requests by HTTP status code.",
    ("code",),
)
REMEDIATION_WEBHOOK_ERRORS = _m(
    "remediation_webhook_errors_total",
    "counter",
    "Webhook requests rejected, by reason.",
    ("reason",),
)
REMEDIATION_ALERTS = _m(
    "remediation_alerts_received_total", "counter", "Alerts received, by status.", ("status",)
)
REMEDIATION_INVALID_ALERTS = _m(
    "remediation_invalid_alerts_total",
    "counter",
    "Alerts denied as invalid (no or malformed node, unknown action, class or node), by reason.",
    ("reason",),
)
REMEDIATION_NODE_ACTION_FAILED = _m(
    "remediation_node_action_failed",
    "gauge",
    "1 for each node whose action failed after its last retry (state action_failed).",
    ("node",),
)
REMEDIATION_EVICTIONS_BLOCKED = _m(
    "remediation_evictions_blocked",
    "gauge",
    "Pods of a node gpuwarden is evacuating whose eviction the API server refuses now, by "
    "the server's Status reason (TooManyRequests: a PodDisruptionBudget or one not yet "
    "computed; Forbidden; BadRequest; InternalError). Cleared once the evacuation completes.",
    ("node", "reason"),
)
REMEDIATION_ACTION_FAILURES = _m(
    "remediation_action_failures_total",
    "counter",
    "Actions that failed after their last retry (the node is left in state action_failed).",
    ("action",),
)

REMEDIATION_EVENTS_DELIVERED = _m(
    "remediation_events_delivered_total",
    "counter",
    "CloudEvents delivered to the events receiver (2xx), by kind"
    " (finding, decision, action, maintenance).",
    ("kind",),
)
REMEDIATION_EVENTS_FAILURES = _m(
    "remediation_events_delivery_failures_total",
    "counter",
    "Failed event deliveries, by the receiver's HTTP status or 'connection' (no answer).",
    ("reason",),
)
REMEDIATION_EVENTS_PENDING = _m(
    "remediation_events_pending",
    "gauge",
    "Events in the outbox not yet delivered.",
    (),
)
REMEDIATION_EVENTS_OLDEST_PENDING = _m(
    "remediation_events_oldest_pending_seconds",
    "gauge",
    "Age of the oldest event in the outbox not yet delivered (0 when none waits).",
    (),
    "seconds",
)
REMEDIATION_EVENTS_DEAD_LETTERS = _m(
    "remediation_events_dead_letters",
    "gauge",
    "Events dead-lettered in the outbox (refused by the receiver as malformed, or past"
    " --events-max-attempts), by kind; kept for the retention, read from the journal.",
    ("kind",),
)

# --------------------------------------------------------------------------- rolling maintenance
REMEDIATION_MAINTENANCE_NODES = _m(
    "remediation_maintenance_nodes",
    "gauge",
    "Nodes of each live maintenance run by state (pending, draining, stuck, operating,"
    " validating, done, failed, skipped); read from the journal.",
    ("run", "state"),
)
REMEDIATION_MAINTENANCE_PROGRESS = _m(
    "remediation_maintenance_progress_ratio",
    "gauge",
    "Fraction of a maintenance run's nodes finished (done, failed or skipped).",
    ("run",),
    unit="ratio",
)
REMEDIATION_MAINTENANCE_ETA = _m(
    "remediation_maintenance_eta_seconds",
    "gauge",
    "Seconds a maintenance run still needs at its pace so far (NaN until a node finished).",
    ("run",),
    unit="seconds",
)

# --------------------------------------------------------------------------- failure accounting
# Exported by the remediation service, recomputed from its journal (accounting/
# metrics.py): the same journal gives the same values after a restart. Over the journal's
# whole history, up to the scrape; GPU-time in GPU-seconds (divide by 3600 for GPU-hours).
ACCOUNTING_LOST = _m(
    "accounting_lost_gpu_seconds",
    "gauge",
    "GPU-time lost to failures, by cause (restart, recompute, capacity) and component"
    " (docs/accounting.md).",
    ("cause", "component"),
    "seconds",
)
ACCOUNTING_INCIDENTS = _m(
    "accounting_incidents",
    "gauge",
    "Incidents in the journal, by GPU model and component.",
    ("gpu_model", "component"),
)
ACCOUNTING_EXPOSURE = _m(
    "accounting_exposure_seconds",
    "gauge",
    "Unit-time in service (GPU-seconds for gpu, gpu_memory, nvlink; node-seconds for nic,"
    " host, storage), by GPU model and component.",
    ("gpu_model", "component"),
    "seconds",
)
ACCOUNTING_MTBF = _m(
    "accounting_mtbf_seconds",
    "gauge",
    "Mean time between failures per GPU model and component; bound: estimate, lower90,"
    " upper90 (exact chi-squared, time-terminated; absent when undefined).",
    ("gpu_model", "component", "bound"),
    "seconds",
)
ACCOUNTING_ETTR = _m(
    "accounting_ettr_ratio",
    "gauge",
    "Effective training time ratio of the cluster; weighting: gpu_hour or job_count (absent"
    " while unknown).",
    ("weighting",),
    "ratio",
)
ACCOUNTING_UNKNOWN_RECOMPUTE = _m(
    "accounting_unknown_recompute_incidents",
    "gauge",
    "Incidents whose recompute cost is unknown (a job hit had no checkpoint time).",
    (),
)
ACCOUNTING_STAGE = _m(
    "accounting_stage_seconds",
    "gauge",
    "Time to detect, mitigate and repair incidents; stage: ttd, ttm, ttr; stat: median, p90.",
    ("stage", "stat"),
    "seconds",
)
# placement tiers (soft actions: de-prefer, never take out; remediation/placement/)
REMEDIATION_PLACEMENT_NODES = _m(
    "remediation_placement_nodes",
    "gauge",
    "Nodes de-preferred by gpuwarden, by tier (marginal|suspect).",
    ("tier",),
)
REMEDIATION_PLACEMENT_BUDGET_CLIPS = _m(
    "remediation_placement_budget_clips_total",
    "counter",
    "Avoid alerts the placement budget denied or that displaced a lower-scored node, by outcome.",
    ("outcome",),
)
REMEDIATION_PLACEMENT_REPAIRS = _m(
    "remediation_placement_repairs_total",
    "counter",
    "Scheduler changes made to show the placement tiers, by projection and kind "
    "(apply|repair|restore); repair is drift read back and re-applied.",
    ("projection", "kind"),
)
REMEDIATION_PLACEMENT_ERRORS = _m(
    "remediation_placement_errors_total",
    "counter",
    "Ticks on which the scheduler could not be read or updated for placement (retried).",
    ("projection",),
)


def all_metrics() -> Iterator[MetricDef]:
    return iter(_ALL.values())


def by_name(name: str) -> MetricDef:
    return _ALL[name]


def names() -> frozenset[str]:
    """Every native name, plus the series names a histogram adds."""
    out: set[str] = set()
    for d in _ALL.values():
        out.add(d.name)
        if d.type == "histogram":
            out.update({d.name + "_bucket", d.name + "_sum", d.name + "_count"})
    return frozenset(out)


def dcgm_names() -> frozenset[str]:
    return frozenset(f.name for d in _ALL.values() for f in d.dcgm) | {DCGM_LAST_XID.name}


def dcgm_violation(policy: str) -> str:
    """dcgm-exporter's violation counter of an NVML perf policy (VIOLATION_POLICIES key)."""
    return next(f.name for f in GPU_CLOCK_VIOLATION.dcgm if f.match == (("policy", policy),))


def dcgm_read_names() -> frozenset[str]:
    """dcgm names the analyzer reads beyond those the drop-in renders by default."""
    return frozenset({f.name for f in DCGM_CLOCK_REASON_BITMASKS} | {DCGM_CLOCK_EVENTS_COUNT.name})


def dcgm_fields() -> dict[str, DcgmField]:
    """dcgm field name -> its first definition (fields fed by several metrics appear once)."""
    out: dict[str, DcgmField] = {}
    for d in _ALL.values():
        for f in d.dcgm:
            out.setdefault(f.name, f)
    return out


DCGM_LABELS = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname")
HOSTNAME_LABELS = ("Hostname", "hostname")  # dcgm-exporter 4.x renamed Hostname to hostname
DCGM_DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"
DCGM_MIG_LABELS = ("GPU_I_PROFILE", "GPU_I_ID")  # dcgm-exporter's labels of a MIG series
DCGM_POD_LABELS = ("pod", "namespace", "container")  # dcgm-exporter --kubernetes
# dcgm-exporter --kubernetes-virtual-gpus: the shared replica a copy of a GPU's series is for
DCGM_VGPU_LABEL = "vgpu"
# dcgm-exporter with KUBERNETES_ENABLE_DRA, on the series of a GPU allocated through a DRA
# ResourceClaim (the kubelet's pod-resources dynamic_resources), after the pod labels
DCGM_DRA_LABELS = (
    "dra_claim_name",
    "dra_claim_namespace",
    "dra_device_name",
    "dra_driver_name",
    "dra_pool_name",
)

# Throttle reasons rendered by the GPU collector, in NVML bit order (nvml.h
# nvmlClocksEventReason*): name -> bit.
THROTTLE_REASONS: Mapping[str, int] = {
    "gpu_idle": 0x1,
    "applications_clocks_setting": 0x2,
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
    "display_clock_setting": 0x100,
}

NVLINK_ERROR_TYPES = ("crc_flit", "crc_data", "replay", "recovery")

# --------------------------------------------------------------------------- foreign dialects
# Series other exporters serve, as the analyzer reads them (analyzer.sources.dialects,
# architecture decision 16). dcgm-exporter's fields come from the ``dcgm`` entries above;
# these are the few the analyzer reads beyond them.
# Every GPU dcgm-exporter reports has these (etc/default-counters.csv): its presence.
DCGM_PRESENCE_FIELDS = ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", DCGM_LAST_XID.name)
DCGM_JOB_LABEL = "hpc_job"  # dcgm-exporter --hpc-job-mapping-dir (Slurm job id per GPU)
# a bitmask of clock event reasons (commented out in dcgm-exporter's CSVs; no per-link NVLink
# state field exists there at all)
DCGM_CLOCK_EVENTS = DcgmField(
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", help="Current clock event reasons."
)
# dcgm-exporter's own per-reason view of it (commented out in etc/default-counters.csv): how
# often each reason was reported within a sliding window, label clock_event
# (internal/pkg/collector/clock_events_collector.go), -> the catalogue's THROTTLE_REASONS
DCGM_CLOCK_EVENTS_COUNT = DcgmField(
    "DCGM_EXP_CLOCK_EVENTS_COUNT", "counter", help="reported clock events"
)
# the same bitmask (DCGM field 112) under its name before DCGM 4 (dcgm-exporter 3.x's CSVs)
DCGM_CLOCK_THROTTLE_REASONS = DcgmField(
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", help="Current clock throttle reasons."
)
DCGM_CLOCK_REASON_BITMASKS = (DCGM_CLOCK_EVENTS, DCGM_CLOCK_THROTTLE_REASONS)
DCGM_CLOCK_EVENT_LABEL = "clock_event"
DCGM_CLOCK_EVENT_REASONS: Mapping[str, str] = {
    "gpu_idle": "gpu_idle",
    "clocks_setting": "applications_clocks_setting",
    "power_cap": "sw_power_cap",
    "hw_slowdown": "hw_slowdown",
    "sync_boost": "sync_boost",
    "sw_thermal": "sw_thermal_slowdown",
    "hw_thermal": "hw_thermal_slowdown",
    "hw_power_brake": "hw_power_brake_slowdown",
    "display_clocks": "display_clock_setting",
}
# node_exporter's infiniband collector (collector/infiniband_linux.go at commit a7dcc3a):
# labels device and port; counters from the same sysfs files as IB_COUNTER / IB_HW_COUNTER.
NODE_IB_PREFIX = "node_infiniband_"
NODE_IB_STATE = NODE_IB_PREFIX + "state_id"  # same numbering as IB_PORT_STATE
NODE_IB_RATE = NODE_IB_PREFIX + "rate_bytes_per_second"  # as IB_PORT_RATE
NODE_IB_ERRORS: Mapping[str, str] = {  # sysfs file (IB_ERROR_COUNTERS) -> node_exporter name
    "symbol_error": NODE_IB_PREFIX + "symbol_error_total",
    "link_error_recovery": NODE_IB_PREFIX + "link_error_recovery_total",
    "port_rcv_errors": NODE_IB_PREFIX + "port_errors_received_total",
    "port_xmit_discards": NODE_IB_PREFIX + "port_discards_transmitted_total",
    "local_ack_timeout_err": NODE_IB_PREFIX + "local_ack_timeout_errors_total",
    "link_downed": NODE_IB_PREFIX + "link_downed_total",
    "local_link_integrity_errors": NODE_IB_PREFIX + "local_link_integrity_errors_total",
    "excessive_buffer_overrun_errors": NODE_IB_PREFIX + "excessive_buffer_overrun_errors_total",
    "rnr_nak_retry_err": NODE_IB_PREFIX + "rnr_nak_retry_packets_received_total",
}
NODE_IB_DATA = {  # port data counters: node_exporter converts sysfs words to bytes as we do
    "port_xmit_data": NODE_IB_PREFIX + "port_data_transmitted_bytes_total",
    "port_rcv_data": NODE_IB_PREFIX + "port_data_received_bytes_total",
}

# node_exporter's ethtool collector (collector/ethtool_linux.go at commit 013905a, off by
# default: --collector.ethtool): every ethtool statistic as node_ethtool_<name>, lower-cased,
# with ``rx``/``tx`` words spelled received/transmitted, untyped, label ``device`` (the
# netdev). The PFC pause counters of priority N, per direction:
NODE_ETHTOOL_PREFIX = "node_ethtool_"
NODE_ETHTOOL_DIRECTION = {"rx": "received", "tx": "transmitted"}


def node_ethtool_pfc(direction: str, priority: str, duration: bool) -> str:
    """node_exporter's name of ``<direction>_prio<priority>_pause[_duration]``."""
    tail = "_duration" if duration else ""
    word = NODE_ETHTOOL_DIRECTION[direction]
    return f"{NODE_ETHTOOL_PREFIX}{word}_prio{priority}_pause{tail}"
