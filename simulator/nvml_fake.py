"""A hand-written fake of the NVML seam (:class:`exporter.sources.protocols.NvmlApi`).

Sits where the real ``pynvml`` module sits: under the GPU collector and the NVML XID event
source. There is no GPU on CI machines, so tests and the fleet simulator drive this fake; it
raises the *real* ``pynvml`` exception classes so the code under test handles exactly what the
real binding raises. State is plain and mutable: the simulator updates a :class:`FakeGpuState`
each step and the next collection sees it.

Field names used in ``unsupported`` / ``failing`` are the keys of :data:`FIELDS`.
"""

from __future__ import annotations

import uuid as uuidlib
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pynvml

LINKS = 18  # NVLink 4 on H100/H200 SXM: 18 links per GPU
NVLINK5_LINKS = 18  # GB200: 18 NVLink5 links per GPU
GB200_PCI_DOMAINS = ("0008", "0009", "0018", "0019")  # a compute tray's 4 GPUs

# Field name -> NVML entry point that reads it (documentation for users of the fake).
FIELDS: dict[str, str] = {
    "uuid": "nvmlDeviceGetUUID",
    "name": "nvmlDeviceGetName",
    "pci_info": "nvmlDeviceGetPciInfo",
    "serial": "nvmlDeviceGetSerial",
    "vbios": "nvmlDeviceGetVbiosVersion",
    "minor": "nvmlDeviceGetMinorNumber",
    "temperature": "nvmlDeviceGetTemperature",
    "memory_temperature": "field NVML_FI_DEV_MEMORY_TEMP",
    "power": "nvmlDeviceGetPowerUsage",
    "power_limit": "nvmlDeviceGetEnforcedPowerLimit",
    "energy": "nvmlDeviceGetTotalEnergyConsumption",
    "utilization": "nvmlDeviceGetUtilizationRates",
    "clock": "nvmlDeviceGetClockInfo",
    "clock_max": "nvmlDeviceGetMaxClockInfo",
    "throttle_reasons": "nvmlDeviceGetCurrentClocksEventReasons",
    "memory": "nvmlDeviceGetMemoryInfo",
    "ecc": "nvmlDeviceGetTotalEccErrors",
    "remapped_rows": "nvmlDeviceGetRemappedRows",
    "retired_pages": "nvmlDeviceGetRetiredPages",
    "retired_pages_pending": "nvmlDeviceGetRetiredPagesPendingStatus",
    "pcie_replay": "nvmlDeviceGetPcieReplayCounter",
    "pcie_generation": "nvmlDeviceGetCurrPcieLinkGeneration",
    "pcie_generation_max": "nvmlDeviceGetMaxPcieLinkGeneration",
    "pcie_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "pcie_width_max": "nvmlDeviceGetMaxPcieLinkWidth",
    "nvlink_state": "nvmlDeviceGetNvLinkState",
    "nvlink_errors": "nvmlDeviceGetNvLinkErrorCounter",
    "nvlink_throughput": "field NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX",
    "recovery_action": "field NVML_FI_DEV_GET_GPU_RECOVERY_ACTION",
    "events": "nvmlDeviceRegisterEvents",
    "encoder_utilization": "nvmlDeviceGetEncoderUtilization",
    "decoder_utilization": "nvmlDeviceGetDecoderUtilization",
    "memory_v2": "nvmlDeviceGetMemoryInfo(version=nvmlMemory_v2)",
    "violations": "nvmlDeviceGetViolationStatus",
    "vgpu_license": "nvmlDeviceGetGridLicensableFeatures",
    "gpm": "nvmlGpmQueryDeviceSupport / nvmlGpmSampleGet / nvmlGpmMetricsGet",
    "mig": "nvmlDeviceGetMigMode / nvmlDeviceGetMigDeviceHandleByIndex",
    "fabric": "nvmlDeviceGetGpuFabricInfoV",
    "processes": "nvmlDeviceGetComputeRunningProcesses",
    "process_utilization": "nvmlDeviceGetProcessUtilization",
}
MAX_MIG_DEVICES = 7  # an A100/H100 has at most 7 GPU instances (nvmlDeviceGetMaxMigDeviceCount)


@dataclass
class FakeMigDevice:
    """One MIG device (a compute instance in a GPU instance) of a partitioned GPU.

    ``slices``: the memory slices of its profile out of 8 (1g.10gb: 1; 3g.40gb: 4 on H100).
    """

    parent: FakeGpuState
    gpu_instance: int
    compute_instance: int
    profile: str
    slices: int
    uuid: str
    # GPM activity of this instance (percent); None: the parent GPU's figures, shared
    gr_engine_active_pct: float | None = None

    @property
    def memory_total(self) -> int:
        return self.parent.memory_total * self.slices // 8

    @property
    def memory_used(self) -> int:  # the parent's use shared out by size: enough for a fake
        return min(self.memory_total, self.parent.memory_used * self.slices // 8)


@dataclass
class FakeProcess:
    """A compute process with a context on a GPU (nvmlProcessInfo_t) and what the GPU's
    per-process utilization sampler last saw of it (nvmlProcessUtilizationSample_t).

    ``sm_util_pct`` None: the process has no utilization sample of its own, as an MPS client
    (the MPS server's context runs every client's kernels, so NVML samples the server's pid).
    ``gpu_instance``/``compute_instance``: a process on a MIG device.
    """

    pid: int
    used_memory: int | None = 1 << 30  # bytes; None: NVML_VALUE_NOT_AVAILABLE
    sm_util_pct: int | None = 0
    mem_util_pct: int = 0
    gpu_instance: int = 0xFFFFFFFF  # NVML's "not a MIG device" value
    compute_instance: int = 0xFFFFFFFF


@dataclass
class FakeProcessInfo:  # the attributes pynvml's nvmlFriendlyObject of nvmlProcessInfo_v3_t has
    pid: int
    usedGpuMemory: int | None
    gpuInstanceId: int
    computeInstanceId: int


@dataclass
class FakeProcessSample:  # pynvml's c_nvmlProcessUtilizationSample_t fields
    pid: int
    timeStamp: int  # microseconds (wall clock) when the sample was taken
    smUtil: int
    memUtil: int
    encUtil: int = 0
    decUtil: int = 0


# Real 8-GPU HGX H100/H200 boards enumerate their GPUs on these PCI buses.
HGX_BUSES = ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")

ECC_KEYS = tuple(
    (e, c)
    for e in (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED)
    for c in (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)
)
NVLINK_COUNTERS = (
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
)


# Fabric health mask of a healthy NVSwitch GPU: every 2-bit check reported FALSE (2), no
# incorrect configuration (NONE, 1), a partition assigned (TRUE, 1), the global fabric
# manager connected (CONNECTED, 1). Shifts and values: nvml.h NVML_GPU_FABRIC_HEALTH_MASK_*
# (as pynvml spells them); gpud decodes the same fields (pkg/nvidia/nvml/device/fabric_state.go).
_M = "NVML_GPU_FABRIC_HEALTH_MASK_"


def fabric_mask(**fields: int) -> int:
    """A health mask from per-field values, e.g. ``fabric_mask(ROUTE_UNHEALTHY=1)``; fields
    not named are those of a healthy GPU (see above)."""
    values = {
        "DEGRADED_BW": 2, "ROUTE_RECOVERY": 2, "ROUTE_UNHEALTHY": 2,
        "ACCESS_TIMEOUT_RECOVERY": 2, "INCORRECT_CONFIGURATION": 1, "PARTITION_ASSIGNED": 1,
        "GFM_STATE": 1,
    } | fields  # fmt: skip
    return sum(v << getattr(pynvml, f"{_M}SHIFT_{k}") for k, v in values.items())


@dataclass
class FakeFabric:
    """What nvmlDeviceGetGpuFabricInfoV writes into the caller's nvmlGpuFabricInfo_v2_t.

    Shapes: pynvml ``c_nvmlGpuFabricInfo_v2_t`` (clusterUuid: 16 bytes, status: nvmlReturn_t,
    cliqueId: uint32, state: NVML_GPU_FABRIC_STATE_*, healthMask: uint32). An NVL72 rack's GPUs
    share one cluster UUID and one clique id (the NVLink domain); gpud's tests record cluster
    UUIDs as ordinary UUID strings and clique ids such as 4026 (components/accelerator/nvidia/
    fabric-manager/fabric_state_test.go). Single-node HGX values (zero cluster UUID, clique 0,
    a healthy mask) are an assumption: no GPU was lent to this work to record them.
    """

    state: int = pynvml.NVML_GPU_FABRIC_STATE_COMPLETED
    status: int = pynvml.NVML_SUCCESS
    cluster_uuid: str = ""  # "": 16 zero bytes
    clique_id: int = 0
    health_mask: int = 0  # 0: every field NOT_SUPPORTED (set fabric_mask() where reported)


def nvml_error(code: int) -> pynvml.NVMLError:
    """The pynvml exception for ``code``, built as pynvml builds it (yields the subclass)."""
    return pynvml.NVMLError(code)


@dataclass
class FakeGpuState:
    """Everything the GPU collector reads from one GPU, in NVML's own units (mW, mJ, MHz, %)."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    serial: str = "1654922000001"
    vbios_version: str = "96.00.99.00.01"
    minor: int | None = None  # /dev/nvidia<minor>; None: the same as the NVML index
    temperature_c: int = 34
    memory_temperature_c: int = 42
    power_mw: int = 72_000
    power_limit_mw: int = 700_000
    energy_mj: int = 1_000_000
    util_gpu_pct: int = 0
    util_memory_pct: int = 0
    sm_clock_mhz: int = 345
    sm_clock_max_mhz: int = 1980
    mem_clock_mhz: int = 2619
    mem_clock_max_mhz: int = 2619
    throttle_reasons: int = pynvml.nvmlClocksEventReasonGpuIdle
    memory_total: int = 85_520_809_984
    memory_used: int = 555_745_280
    ecc: dict[tuple[int, int], int] = field(default_factory=lambda: dict.fromkeys(ECC_KEYS, 0))
    remapped_rows: tuple[int, int, int, int] = (0, 0, 0, 0)  # corr, uncorr, pending, failed
    retired_pages: dict[int, list[int]] = field(default_factory=lambda: {0: [], 1: []})
    retired_pages_pending: int = 0
    pcie_replay: int = 0
    pcie_gen: int = 5
    pcie_gen_max: int = 5
    pcie_width: int = 16
    pcie_width_max: int = 16
    nvlink_state: list[int] = field(default_factory=lambda: [1] * LINKS)
    nvlink_errors: dict[tuple[int, int], int] = field(default_factory=dict)  # (link, counter)
    nvlink_tx_bytes: list[int] = field(default_factory=lambda: [0] * LINKS)
    nvlink_rx_bytes: list[int] = field(default_factory=lambda: [0] * LINKS)
    recovery_action: int = pynvml.NVML_GPU_RECOVERY_ACTION_NONE
    enc_util_pct: int = 0
    dec_util_pct: int = 0
    memory_reserved: int = 637_534_208  # what an H100 80GB reports reserved (608 MiB)
    violations_ns: dict[int, int] = field(default_factory=dict)  # NVML_PERF_POLICY_* -> ns
    vgpu_licensed: bool | None = None  # None: no vGPU licensing on this GPU (bare metal)
    gpm_supported: bool = True  # GPM (profiling metrics) exists on Hopper and newer
    # What GPM reports between two samples, in its units (percent, MiB/s).
    gr_engine_active_pct: float = 0.0
    tensor_active_pct: float = 0.0
    dram_active_pct: float = 0.0
    pcie_tx_mib_s: float = 0.0
    pcie_rx_mib_s: float = 0.0
    sm_active_pct: float = 0.0
    sm_occupancy_pct: float = 0.0
    fp64_active_pct: float = 0.0
    fp32_active_pct: float = 0.0
    fp16_active_pct: float = 0.0
    mig_devices: list[FakeMigDevice] = field(default_factory=list)  # non-empty: MIG mode on
    unsupported: set[str] = field(default_factory=set)
    failing: dict[str, Exception] = field(default_factory=dict)
    lost: bool = False
    fabric: FakeFabric | None = None  # None: the call answers NOT_SUPPORTED (no NVSwitch fabric)
    processes: list[FakeProcess] = field(default_factory=list)
    process_sample_us: int = 1_700_000_000_000_000  # when the processes' samples were taken

    def __post_init__(self) -> None:
        unknown = (set(self.unsupported) | set(self.failing)) - FIELDS.keys()
        if unknown:
            raise ValueError(f"unknown NVML field(s) {sorted(unknown)}; known: {sorted(FIELDS)}")

    @property
    def memory_free(self) -> int:
        return self.memory_total - self.memory_used

    @classmethod
    def h100(cls, index: int, seed: str = "") -> FakeGpuState:
        """An idle H100 80GB HBM3 SXM in slot ``index`` of an HGX board (retired pages: n/a)."""
        return cls(
            index=index,
            uuid=_uuid("h100", seed, index),
            name="NVIDIA H100 80GB HBM3",
            pci_bus_id=f"00000000:{HGX_BUSES[index % 8].upper()}:00.0",
            serial=f"{1654922000001 + index}",
            unsupported={"retired_pages", "retired_pages_pending"},  # Ampere+ remaps rows
            fabric=FakeFabric(health_mask=fabric_mask()),  # HGX NVSwitch, Fabric Manager up
        )

    @classmethod
    def h200(cls, index: int, seed: str = "") -> FakeGpuState:
        """An idle H200 141GB HBM3e SXM in slot ``index`` of an HGX board."""
        gpu = cls.h100(index, seed)
        gpu.uuid = _uuid("h200", seed, index)
        gpu.name = "NVIDIA H200"
        gpu.serial = f"{1655024000001 + index}"
        gpu.vbios_version = "96.00.AF.00.01"
        gpu.mem_clock_mhz = gpu.mem_clock_max_mhz = 3201
        gpu.memory_total = 150_754_820_096
        return gpu

    @classmethod
    def a100(cls, index: int, seed: str = "") -> FakeGpuState:
        """An idle A100 80GB SXM: Ampere, so no GPM profiling (DCGM would be needed)."""
        gpu = cls.h100(index, seed)
        gpu.uuid = _uuid("a100", seed, index)
        gpu.name = "NVIDIA A100-SXM4-80GB"
        gpu.gpm_supported = False
        gpu.fabric = None  # fabric info is Hopper and newer
        gpu.power_limit_mw, gpu.memory_total = 400_000, 85_899_345_920
        gpu.mem_clock_mhz = gpu.mem_clock_max_mhz = 1593
        gpu.pcie_gen = gpu.pcie_gen_max = 4
        gpu.nvlink_state = [1] * 12
        gpu.nvlink_tx_bytes, gpu.nvlink_rx_bytes = [0] * 12, [0] * 12
        return gpu

    @classmethod
    def l40s(cls, index: int, seed: str = "") -> FakeGpuState:
        """An idle L40S: a 350 W PCIe Gen4 card, no NVLink, 48 GB GDDR6."""
        gpu = cls.h100(index, seed)
        gpu.uuid = _uuid("l40s", seed, index)
        gpu.name = "NVIDIA L40S"
        gpu.fabric = None  # PCIe, no NVSwitch
        gpu.power_limit_mw, gpu.memory_total = 350_000, 48_305_799_168
        gpu.mem_clock_mhz = gpu.mem_clock_max_mhz = 9001
        gpu.pcie_gen = gpu.pcie_gen_max = 4
        gpu.nvlink_state, gpu.nvlink_tx_bytes, gpu.nvlink_rx_bytes = [], [], []
        return gpu

    @classmethod
    def gb200(cls, index: int, seed: str = "", cluster: str = "", clique: int = 0) -> FakeGpuState:
        """An idle GB200 GPU of an NVL72 compute tray (NVLink5, 18 links), registered in the
        NVLink domain ``cluster``/``clique`` (simulator.nvl72 builds the racks; a fleet node's
        domain is set by the node view). ``seed`` is the tray's node name: the UUID follows it
        and the slot. Not recorded on real hardware: name and memory are NVIDIA's GB200
        datasheet values as NVML would spell them; PCI domains 0x0008/0x0009/0x0018/0x0019
        follow the addresses in gpud's GB200 log examples (``PCI:0018:01:00``)."""
        gpu = cls.h100(index, seed)
        gpu.uuid = "GPU-" + str(
            uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpuwarden/nvl72/{seed}/{index}")
        )
        gpu.name = "NVIDIA GB200"
        gpu.pci_bus_id = f"0000{GB200_PCI_DOMAINS[index]}:01:00.0"
        gpu.power_limit_mw, gpu.memory_total = 1_200_000, 198_642_237_440
        gpu.nvlink_state = [1] * NVLINK5_LINKS
        gpu.nvlink_tx_bytes, gpu.nvlink_rx_bytes = [0] * NVLINK5_LINKS, [0] * NVLINK5_LINKS
        gpu.fabric = FakeFabric(cluster_uuid=cluster, clique_id=clique, health_mask=fabric_mask())
        return gpu

    def partition(
        self,
        profile: str = "1g.10gb",
        count: int = MAX_MIG_DEVICES,
        ids: Sequence[int] | None = None,
        slices: int | None = None,
    ) -> None:
        """MIG mode on, ``count`` GPU instances of ``profile``, one compute instance each.

        GPU instance ids (unless ``ids``) follow the placement NVML gives 1g instances on an
        empty H100; ``slices``: memory slices of 8 per instance (default: from the name).
        """
        if slices is None:
            slices = int(profile.split("g.", 1)[0]) if "g." in profile else 1
            slices = 4 if slices == 3 else slices  # 3g profiles take 4 of the 8 memory slices
        if ids is None:
            ids = (7, 8, 9, 11, 12, 13, 14)[:count] if slices == 1 else range(1, count + 1)
        self.mig_devices = [
            FakeMigDevice(
                self, gi, 0, profile, slices, _uuid("mig", self.uuid, gi).replace("GPU-", "MIG-")
            )
            for gi in ids
        ]

    def reload_driver(self) -> None:
        """What a driver reload does to the counters: volatile ones restart from zero."""
        for e in (
            pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED,
            pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
        ):
            self.ecc[(e, pynvml.NVML_VOLATILE_ECC)] = 0
        self.energy_mj = 0
        self.pcie_replay = 0
        self.nvlink_errors.clear()
        self.violations_ns.clear()
        self.nvlink_tx_bytes = [0] * len(self.nvlink_tx_bytes)
        self.nvlink_rx_bytes = [0] * len(self.nvlink_rx_bytes)


def _uuid(model: str, seed: str, index: int) -> str:
    return "GPU-" + str(uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpuwarden/{model}/{seed}/{index}"))


@dataclass
class FakeUtilization:
    gpu: int
    memory: int


@dataclass
class FakeMemory:
    total: int
    free: int
    used: int


@dataclass
class FakeMemoryV2:
    """Shaped like ``pynvml.c_nvmlMemory_v2_t``."""

    version: int
    total: int
    reserved: int
    free: int
    used: int


@dataclass
class FakeViolationTime:
    """Shaped like ``pynvml.c_nvmlViolationTime_t`` (both in ns)."""

    referenceTime: int
    violationTime: int


@dataclass
class FakeLicensableFeature:
    featureCode: int
    featureState: int


@dataclass
class FakeLicensableFeatures:
    """Shaped like ``pynvml.c_nvmlGridLicensableFeatures_v4_t``."""

    isGridLicenseSupported: int
    licensableFeaturesCount: int
    gridLicensableFeatures: list[FakeLicensableFeature]


@dataclass
class FakeGpmSupport:
    isSupportedDevice: int


@dataclass
class FakeGpmSample:
    """An opaque GPM sample: here, what the GPU's profiling state was when it was taken."""

    values: dict[int, float] = field(default_factory=dict)
    freed: bool = False


@dataclass
class FakeGpmMetric:
    metricId: int = 0
    nvmlReturn: int = pynvml.NVML_SUCCESS
    value: float = 0.0


class FakeGpmMetricsGet:
    """Shaped like ``pynvml.c_nvmlGpmMetricsGet_t`` (the request/answer struct)."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: FakeGpmSample | None = None
        self.sample2: FakeGpmSample | None = None
        self.metrics = [FakeGpmMetric() for _ in range(pynvml.NVML_GPM_METRIC_MAX)]


_GPM_FIELDS = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: "gr_engine_active_pct",
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: "tensor_active_pct",
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: "dram_active_pct",
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: "pcie_tx_mib_s",
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: "pcie_rx_mib_s",
    pynvml.NVML_GPM_METRIC_SM_UTIL: "sm_active_pct",
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: "sm_occupancy_pct",
    pynvml.NVML_GPM_METRIC_FP64_UTIL: "fp64_active_pct",
    pynvml.NVML_GPM_METRIC_FP32_UTIL: "fp32_active_pct",
    pynvml.NVML_GPM_METRIC_FP16_UTIL: "fp16_active_pct",
}


@dataclass
class FakePciInfo:
    busId: str


@dataclass
class FakeValue:
    """Shaped like ``pynvml.c_nvmlValue_t`` (a union; the fake fills every member)."""

    dVal: float = 0.0
    uiVal: int = 0
    ulVal: int = 0
    ullVal: int = 0
    sllVal: int = 0
    siVal: int = 0
    usVal: int = 0


@dataclass
class FakeFieldValue:
    """Shaped like ``pynvml.c_nvmlFieldValue_t``."""

    fieldId: int
    scopeId: int = 0
    timestamp: int = 0
    latencyUsec: int = 0
    valueType: int = pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    nvmlReturn: int = pynvml.NVML_SUCCESS
    value: FakeValue = field(default_factory=FakeValue)


@dataclass
class FakeEventData:
    """Shaped like ``pynvml.c_nvmlEventData_t``."""

    device: Any
    eventType: int
    eventData: int
    gpuInstanceId: int = 0xFFFFFFFF
    computeInstanceId: int = 0xFFFFFFFF


@dataclass
class FakeEventSet:
    registered: dict[int, int] = field(default_factory=dict)  # gpu index -> event type mask
    queue: deque[FakeEventData] = field(default_factory=deque)


_MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP
_RECOVERY = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
_NVLINK_TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
_NVLINK_RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
_FIELD_NAMES = {
    _MEMORY_TEMP: "memory_temperature",
    _RECOVERY: "recovery_action",
    _NVLINK_TX: "nvlink_throughput",
    _NVLINK_RX: "nvlink_throughput",
}


class FakeNvml:
    """The pynvml functions the exporter calls, over a list of :class:`FakeGpuState`.

    Handles are the state objects themselves. ``init_error`` makes ``nvmlInit`` raise (no
    driver); ``function_not_found`` names entry points the "driver" lacks (old drivers raise
    ``NVMLError_FunctionNotFound`` from new bindings).
    """

    def __init__(
        self,
        gpus: Sequence[FakeGpuState],
        driver_version: str = "550.54.15",
        *,
        init_error: Exception | None = None,
        function_not_found: set[str] | None = None,
    ) -> None:
        self.gpus = list(gpus)
        self.driver_version = driver_version
        self.init_error = init_error
        self.function_not_found = function_not_found or set()
        self.initialized = False
        self.init_calls = 0
        self.event_sets: list[FakeEventSet] = []
        self.gpm_samples: list[FakeGpmSample] = []  # every sample allocated (tests check frees)

    # ------------------------------------------------------------------ MIG
    def nvmlDeviceGetMigMode(self, device: FakeGpuState) -> list[int]:
        gpu = self._read(device, "mig")
        on = pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig_devices else 0
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, device: FakeGpuState) -> int:
        self._read(device, "mig")
        return MAX_MIG_DEVICES

    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: FakeGpuState, index: int) -> Any:
        gpu = self._read(device, "mig")
        if not gpu.mig_devices:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= index < len(gpu.mig_devices):
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return gpu.mig_devices[index]

    def nvmlDeviceGetGpuInstanceId(self, device: FakeMigDevice) -> int:
        self._device(device.parent)
        return device.gpu_instance

    def nvmlDeviceGetComputeInstanceId(self, device: FakeMigDevice) -> int:
        self._device(device.parent)
        return device.compute_instance

    # the struct class the GPU collector builds a GPM request in (pynvml's module attribute)
    c_nvmlGpmMetricsGet_t = FakeGpmMetricsGet

    # ------------------------------------------------------------------ library
    def nvmlInit(self) -> None:
        self.init_calls += 1
        if self.init_error is not None:
            raise self.init_error
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self._check_init()
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        self._check_init()
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._check_init()
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpuState:
        self._check_init()
        if not 0 <= index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[index]
        if gpu.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return gpu

    # ------------------------------------------------------------------ identity
    def nvmlDeviceGetUUID(self, handle: FakeGpuState | FakeMigDevice) -> str:
        if isinstance(handle, FakeMigDevice):
            self._read(handle.parent, "mig")
            return handle.uuid
        return self._read(handle, "uuid").uuid

    def nvmlDeviceGetName(self, handle: FakeGpuState | FakeMigDevice) -> str:
        if isinstance(handle, FakeMigDevice):  # NVML names a MIG device "<GPU> MIG <profile>"
            return f"{self._read(handle.parent, 'mig').name} MIG {handle.profile}"
        return self._read(handle, "name").name

    def nvmlDeviceGetPciInfo(self, handle: FakeGpuState) -> FakePciInfo:
        return FakePciInfo(self._read(handle, "pci_info").pci_bus_id)

    def nvmlDeviceGetSerial(self, handle: FakeGpuState) -> str:
        return self._read(handle, "serial").serial

    def nvmlDeviceGetMinorNumber(self, handle: FakeGpuState) -> int:
        gpu = self._read(handle, "minor")
        return gpu.index if gpu.minor is None else gpu.minor

    def nvmlDeviceGetVbiosVersion(self, handle: FakeGpuState) -> str:
        return self._read(handle, "vbios").vbios_version

    # ------------------------------------------------------------------ gauges
    def nvmlDeviceGetTemperature(self, handle: FakeGpuState, sensor: int) -> int:
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._read(handle, "temperature").temperature_c

    def nvmlDeviceGetPowerUsage(self, handle: FakeGpuState) -> int:
        return self._read(handle, "power").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeGpuState) -> int:
        return self._read(handle, "power_limit").power_limit_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: FakeGpuState) -> int:
        return self._read(handle, "energy").energy_mj

    def nvmlDeviceGetUtilizationRates(self, handle: FakeGpuState) -> FakeUtilization:
        gpu = self._read(handle, "utilization")
        return FakeUtilization(gpu.util_gpu_pct, gpu.util_memory_pct)

    def nvmlDeviceGetClockInfo(self, handle: FakeGpuState, type: int) -> int:
        gpu = self._read(handle, "clock")
        return self._clock(type, gpu.sm_clock_mhz, gpu.mem_clock_mhz)

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeGpuState, type: int) -> int:
        gpu = self._read(handle, "clock_max")
        return self._clock(type, gpu.sm_clock_max_mhz, gpu.mem_clock_max_mhz)

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeGpuState) -> int:
        self._require("nvmlDeviceGetCurrentClocksEventReasons")
        return self._read(handle, "throttle_reasons").throttle_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeGpuState) -> int:
        self._require("nvmlDeviceGetCurrentClocksThrottleReasons")
        return self._read(handle, "throttle_reasons").throttle_reasons

    def nvmlDeviceGetMemoryInfo(
        self, handle: FakeGpuState | FakeMigDevice, version: int | None = None
    ) -> FakeMemory | FakeMemoryV2:
        if isinstance(handle, FakeMigDevice):
            self._read(handle.parent, "mig")
            total, used = handle.memory_total, handle.memory_used
            return FakeMemory(total, total - used, used)
        gpu = self._read(handle, "memory")
        if not version:
            return FakeMemory(gpu.memory_total, gpu.memory_free, gpu.memory_used)
        self._read(handle, "memory_v2")
        used = max(0, gpu.memory_used - gpu.memory_reserved)  # v2 counts reserved apart
        return FakeMemoryV2(version, gpu.memory_total, gpu.memory_reserved, gpu.memory_free, used)

    def nvmlDeviceGetEncoderUtilization(self, handle: FakeGpuState) -> list[int]:
        return [self._read(handle, "encoder_utilization").enc_util_pct, 167_000]

    def nvmlDeviceGetDecoderUtilization(self, handle: FakeGpuState) -> list[int]:
        return [self._read(handle, "decoder_utilization").dec_util_pct, 167_000]

    def nvmlDeviceGetViolationStatus(
        self, device: FakeGpuState, perfPolicyType: int
    ) -> FakeViolationTime:
        gpu = self._read(device, "violations")
        if not 0 <= perfPolicyType < pynvml.NVML_PERF_POLICY_COUNT:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return FakeViolationTime(
            1_700_000_000_000_000_000, gpu.violations_ns.get(perfPolicyType, 0)
        )

    def nvmlDeviceGetGridLicensableFeatures(self, handle: FakeGpuState) -> FakeLicensableFeatures:
        gpu = self._read(handle, "vgpu_license")
        if gpu.vgpu_licensed is None:
            return FakeLicensableFeatures(0, 0, [])
        code = pynvml.NVML_GRID_LICENSE_FEATURE_CODE_COMPUTE
        feature = FakeLicensableFeature(code, 1 if gpu.vgpu_licensed else 0)
        return FakeLicensableFeatures(1, 1, [feature])

    # ------------------------------------------------------------------ GPM (profiling)
    def nvmlGpmQueryDeviceSupport(self, device: FakeGpuState) -> FakeGpmSupport:
        return FakeGpmSupport(1 if self._read(device, "gpm").gpm_supported else 0)

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        self._check_init()
        sample = FakeGpmSample()
        self.gpm_samples.append(sample)
        return sample

    def nvmlGpmSampleFree(self, gpmSample: FakeGpmSample) -> None:
        gpmSample.freed = True

    def nvmlGpmSampleGet(self, device: FakeGpuState, gpmSample: FakeGpmSample) -> FakeGpmSample:
        gpu = self._read(device, "gpm")
        if not gpu.gpm_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        gpmSample.values = {mid: getattr(gpu, attr) for mid, attr in _GPM_FIELDS.items()}
        return gpmSample

    def nvmlGpmMigSampleGet(
        self, device: FakeGpuState, gpuInstanceId: int, gpmSample: FakeGpmSample
    ) -> FakeGpmSample:
        """A MIG instance's activity: the fake shares its GPU's figures with every instance."""
        gpu = self._read(device, "gpm")
        if not gpu.gpm_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        mig = next((m for m in gpu.mig_devices if m.gpu_instance == gpuInstanceId), None)
        if mig is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        self.nvmlGpmSampleGet(device, gpmSample)
        if mig.gr_engine_active_pct is not None:  # the instance's own figures where modelled
            pct = mig.gr_engine_active_pct
            gpmSample.values |= {pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: pct,
                                 pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 0.6 * pct,
                                 pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: 0.4 * pct}  # fmt: skip
        return gpmSample

    def nvmlGpmMetricsGet(self, metricsGet: FakeGpmMetricsGet) -> FakeGpmMetricsGet:
        self._check_init()
        s1, s2 = metricsGet.sample1, metricsGet.sample2
        if metricsGet.version != pynvml.NVML_GPM_METRICS_GET_VERSION or s1 is None or s2 is None:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for m in metricsGet.metrics[: metricsGet.numMetrics]:
            if m.metricId in s2.values:  # the fake's activity is what the later sample saw
                m.value, m.nvmlReturn = s2.values[m.metricId], pynvml.NVML_SUCCESS
            else:
                m.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return metricsGet

    # ------------------------------------------------------------------ memory errors
    def nvmlDeviceGetTotalEccErrors(
        self, handle: FakeGpuState, errorType: int, counterType: int
    ) -> int:
        gpu = self._read(handle, "ecc")
        if (errorType, counterType) not in gpu.ecc:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.ecc[(errorType, counterType)]

    def nvmlDeviceGetRemappedRows(self, device: FakeGpuState) -> tuple[int, int, int, int]:
        return tuple(self._read(device, "remapped_rows").remapped_rows)  # type: ignore[return-value]

    def nvmlDeviceGetRetiredPages(self, device: FakeGpuState, sourceFilter: int) -> list[int]:
        return list(self._read(device, "retired_pages").retired_pages.get(sourceFilter, []))

    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: FakeGpuState) -> int:
        return self._read(device, "retired_pages_pending").retired_pages_pending

    # ------------------------------------------------------------------ PCIe
    def nvmlDeviceGetPcieReplayCounter(self, handle: FakeGpuState) -> int:
        return self._read(handle, "pcie_replay").pcie_replay

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: FakeGpuState) -> int:
        return self._read(handle, "pcie_generation").pcie_gen

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: FakeGpuState) -> int:
        return self._read(handle, "pcie_generation_max").pcie_gen_max

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: FakeGpuState) -> int:
        return self._read(handle, "pcie_width").pcie_width

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: FakeGpuState) -> int:
        return self._read(handle, "pcie_width_max").pcie_width_max

    # ------------------------------------------------------------------ NVLink
    def nvmlDeviceGetNvLinkState(self, device: FakeGpuState, link: int) -> int:
        gpu = self._read(device, "nvlink_state")
        self._check_link(gpu, link)
        return gpu.nvlink_state[link]

    def nvmlDeviceGetNvLinkErrorCounter(self, device: FakeGpuState, link: int, counter: int) -> int:
        gpu = self._read(device, "nvlink_errors")
        self._check_link(gpu, link)
        if counter not in NVLINK_COUNTERS:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.nvlink_errors.get((link, counter), 0)

    def nvmlDeviceGetGpuFabricInfoV(self, device: FakeGpuState, gpuFabricInfo: Any) -> int:
        """Fills the caller's struct as libnvidia-ml does: the version must be one the
        library knows (else ARGUMENT_VERSION_MISMATCH), the fields are written in place."""
        self._require("nvmlDeviceGetGpuFabricInfoV")
        gpu = self._read(device, "fabric")
        info = getattr(gpuFabricInfo, "_obj", gpuFabricInfo)  # ctypes.byref(struct)
        if info.version not in (pynvml.nvmlGpuFabricInfo_v2, pynvml.nvmlGpuFabricInfo_v3):
            raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        fab = gpu.fabric
        if fab is None:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        raw = uuidlib.UUID(fab.cluster_uuid).bytes if fab.cluster_uuid else bytes(16)
        for i, b in enumerate(raw):
            info.clusterUuid[i] = b
        info.status, info.cliqueId = fab.status, fab.clique_id
        info.state, info.healthMask = fab.state, fab.health_mask
        return pynvml.NVML_SUCCESS

    # ------------------------------------------------------------------ field values
    def nvmlDeviceGetFieldValues(
        self, handle: FakeGpuState, fieldIds: Sequence[Any]
    ) -> list[FakeFieldValue]:
        gpu = self._device(handle)
        return [self._field(gpu, f) for f in fieldIds]

    def _field(self, gpu: FakeGpuState, request: Any) -> FakeFieldValue:
        fid, scope = request if isinstance(request, tuple) else (request, 0)
        out = FakeFieldValue(fid, scope)
        name = _FIELD_NAMES.get(fid)
        if name is None or name in gpu.unsupported:
            out.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        elif name in gpu.failing:
            out.nvmlReturn = getattr(gpu.failing[name], "value", pynvml.NVML_ERROR_UNKNOWN)
        elif fid == _MEMORY_TEMP:
            out.value.uiVal = gpu.memory_temperature_c
        elif fid == _RECOVERY:
            out.value.uiVal = gpu.recovery_action
        elif not 0 <= scope < len(gpu.nvlink_state):
            out.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
        else:  # NVLink throughput counters count KiB (nvml.h NVML_FI_DEV_NVLINK_THROUGHPUT_*)
            data = gpu.nvlink_tx_bytes if fid == _NVLINK_TX else gpu.nvlink_rx_bytes
            out.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            out.value.ullVal = data[scope] // 1024
        return out

    # ------------------------------------------------------------------ events
    def nvmlEventSetCreate(self) -> FakeEventSet:
        self._check_init()
        event_set = FakeEventSet()
        self.event_sets.append(event_set)
        return event_set

    def nvmlDeviceRegisterEvents(
        self, handle: FakeGpuState, eventTypes: int, eventSet: FakeEventSet
    ) -> None:
        gpu = self._read(handle, "events")
        eventSet.registered[gpu.index] = eventSet.registered.get(gpu.index, 0) | eventTypes

    def nvmlEventSetWait_v2(self, eventSet: FakeEventSet, timeoutms: int) -> FakeEventData:
        self._check_init()
        if not eventSet.queue:
            raise nvml_error(pynvml.NVML_ERROR_TIMEOUT)
        return eventSet.queue.popleft()

    def push_xid(self, gpu: int, xid: int) -> int:
        """Raise XID ``xid`` on GPU ``gpu``; returns how many registered event sets got it."""
        delivered = 0
        for event_set in self.event_sets:
            if event_set.registered.get(gpu, 0) & pynvml.nvmlEventTypeXidCriticalError:
                kind = pynvml.nvmlEventTypeXidCriticalError
                event_set.queue.append(FakeEventData(self.gpus[gpu], kind, xid))
                delivered += 1
        return delivered

    # ------------------------------------------------------------------ processes
    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeGpuState) -> list[FakeProcessInfo]:
        gpu = self._read(handle, "processes")
        return [
            FakeProcessInfo(p.pid, p.used_memory, p.gpu_instance, p.compute_instance)
            for p in gpu.processes
        ]

    def nvmlDeviceGetProcessUtilization(
        self, handle: FakeGpuState, timeStamp: int
    ) -> list[FakeProcessSample]:
        """Samples newer than ``timeStamp``; NOT_FOUND when there are none (as NVML answers),
        NOT_SUPPORTED in MIG mode."""
        gpu = self._read(handle, "process_utilization")
        if gpu.mig_devices:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        samples = [
            FakeProcessSample(p.pid, gpu.process_sample_us, p.sm_util_pct, p.mem_util_pct)
            for p in gpu.processes
            if p.sm_util_pct is not None and gpu.process_sample_us > timeStamp
        ]
        if not samples:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return samples

    # ------------------------------------------------------------------ helpers
    def _check_init(self) -> None:
        if not self.initialized:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)

    def _require(self, function: str) -> None:
        if function in self.function_not_found:
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def _device(self, handle: FakeGpuState) -> FakeGpuState:
        self._check_init()
        if handle.lost:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        return handle

    def _read(self, handle: FakeGpuState, name: str) -> FakeGpuState:
        gpu = self._device(handle)
        if name in gpu.unsupported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if name in gpu.failing:
            raise gpu.failing[name]
        return gpu

    @staticmethod
    def _clock(type: int, sm: int, mem: int) -> int:
        if type == pynvml.NVML_CLOCK_SM:
            return sm
        if type == pynvml.NVML_CLOCK_MEM:
            return mem
        raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @staticmethod
    def _check_link(gpu: FakeGpuState, link: int) -> None:
        if not 0 <= link < len(gpu.nvlink_state):  # nvml.h: INVALID_ARGUMENT "link is invalid"
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)


def hgx_node(model: str = "h100", seed: str = "", gpus: int = 8, **kw: Any) -> FakeNvml:
    """A FakeNvml for one healthy node of ``gpus`` GPUs of ``model`` (a key of FACTORIES)."""
    factory = FACTORIES[model]
    return FakeNvml([factory(i, seed) for i in range(gpus)], **kw)


FACTORIES = {
    "h100": FakeGpuState.h100,
    "h200": FakeGpuState.h200,
    "a100": FakeGpuState.a100,
    "l40s": FakeGpuState.l40s,
    "gb200-nvl72": FakeGpuState.gb200,  # the node view sets the rack's domain
}  # the simulator's SKUs (simulator.model.SKUS), by key
