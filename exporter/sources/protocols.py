"""The seams between the exporter and the machine: small Protocols, each with a fake.

Real implementations: the ``pynvml`` module itself (nvidia-ml-py) for :class:`NvmlApi`,
:class:`exporter.sources.sysfs.DirSysfs` for :class:`SysfsRoot`,
:class:`exporter.sources.kmsg.KernelLogReader` for :class:`KernelLog`.
Fakes: :mod:`simulator.nvml_fake`, :class:`exporter.sources.sysfs.DictSysfs`,
:class:`exporter.sources.kmsg.ListKernelLog`. The fleet simulator drives the same fakes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol


class NvmlApi(Protocol):
    """The subset of the pynvml module (nvidia-ml-py) the GPU collector calls.

    Method names and semantics are pynvml's; errors are ``pynvml.NVMLError`` subclasses
    (``NVMLError_NotSupported`` = field absent on this GPU, ``NVMLError_GpuIsLost`` = off the
    bus). Handles are opaque. See https://docs.nvidia.com/deploy/nvml-api/.
    """

    def nvmlInit(self) -> None: ...
    def nvmlShutdown(self) -> None: ...
    def nvmlSystemGetDriverVersion(self) -> str: ...
    def nvmlDeviceGetCount(self) -> int: ...
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any: ...
    def nvmlDeviceGetUUID(self, handle: Any) -> str: ...
    def nvmlDeviceGetName(self, handle: Any) -> str: ...
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any: ...  # .busId: str
    def nvmlDeviceGetSerial(self, handle: Any) -> str: ...
    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int: ...  # N of /dev/nvidiaN
    def nvmlDeviceGetVbiosVersion(self, handle: Any) -> str: ...
    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int: ...
    def nvmlDeviceGetFieldValues(self, handle: Any, fieldIds: Sequence[Any]) -> Sequence[Any]: ...
    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int: ...  # mW
    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int: ...  # mW
    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int: ...  # mJ
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any: ...  # .gpu, .memory (%)
    def nvmlDeviceGetClockInfo(self, handle: Any, type: int) -> int: ...  # MHz
    def nvmlDeviceGetMaxClockInfo(self, handle: Any, type: int) -> int: ...  # MHz
    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int: ...  # bitmask
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: Any = None) -> Any: ...  # bytes
    def nvmlDeviceGetEncoderUtilization(self, handle: Any) -> Any: ...  # [%, period us]
    def nvmlDeviceGetDecoderUtilization(self, handle: Any) -> Any: ...  # [%, period us]
    def nvmlDeviceGetViolationStatus(self, device: Any, perfPolicyType: int) -> Any: ...  # ns
    def nvmlDeviceGetGridLicensableFeatures(self, handle: Any) -> Any: ...
    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any: ...  # .isSupportedDevice
    def nvmlGpmSampleAlloc(self) -> Any: ...
    def nvmlGpmSampleFree(self, gpmSample: Any) -> None: ...
    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any: ...
    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any: ...
    def nvmlGpmMigSampleGet(self, device: Any, gpuInstanceId: int, gpmSample: Any) -> Any: ...
    def nvmlDeviceGetMigMode(self, device: Any) -> Any: ...  # [current, pending]
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int: ...
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any: ...
    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int: ...
    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int: ...
    def nvmlDeviceGetTotalEccErrors(self, handle: Any, errorType: int, counterType: int) -> int: ...
    def nvmlDeviceGetRemappedRows(self, device: Any) -> tuple[int, int, int, int]: ...
    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> Sequence[int]: ...
    def nvmlDeviceGetRetiredPagesPendingStatus(self, device: Any) -> int: ...
    def nvmlDeviceGetPcieReplayCounter(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int: ...
    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int: ...
    def nvmlDeviceGetNvLinkState(self, device: Any, link: int) -> int: ...
    def nvmlDeviceGetNvLinkErrorCounter(self, device: Any, link: int, counter: int) -> int: ...
    # fills the nvmlGpuFabricInfo_v2_t behind ``gpuFabricInfo`` (a ctypes.byref) in place
    def nvmlDeviceGetGpuFabricInfoV(self, device: Any, gpuFabricInfo: Any) -> int: ...
    def nvmlEventSetCreate(self) -> Any: ...
    def nvmlDeviceRegisterEvents(self, handle: Any, eventTypes: int, eventSet: Any) -> None: ...
    def nvmlEventSetWait_v2(self, eventSet: Any, timeoutms: int) -> Any: ...


class SysfsRoot(Protocol):
    """Read-only view of a sysfs tree; paths are relative to the root (e.g. ``class/infiniband``).

    Raises OSError (FileNotFoundError, PermissionError, ...) like the filesystem does.
    """

    def listdir(self, path: str) -> list[str]: ...
    def read_text(self, path: str) -> str: ...
    def is_dir(self, path: str) -> bool: ...


class KernelLog(Protocol):
    """A kernel log that yields new lines since the last call, and counts what it lost."""

    def read_new(self) -> list[str]: ...

    @property
    def lost_records(self) -> int: ...

    @property
    def source_name(self) -> str: ...  # "kmsg" | "file" | "simulated" ...

    @property
    def healthy(self) -> bool: ...  # False while the log cannot be read (NVML events take over)

    @property
    def last_error(self) -> str: ...


class JobMap(Protocol):
    """GPU index -> job id for the GPUs a scheduler has allocated on this node."""

    def allocations(self) -> dict[str, str]: ...

    @property
    def scheduler(self) -> str: ...


@dataclass(frozen=True)
class GpuIdentity:
    """What other collectors need to name a GPU: NVML index, UUID, PCI address, model name,
    and the device minor number (``/dev/nvidia<minor>``; DRA drivers name GPUs by it)."""

    index: str
    uuid: str
    pci_bus_id: str  # as NVML reports it, e.g. "00000000:3B:00.0"
    name: str = ""
    minor: str = ""  # nvmlDeviceGetMinorNumber; "" when unread


def pci_key(address: str) -> str:
    """Normalise a PCI address to ``dddd:bb:dd`` (lowercase, 4-digit domain, no function).

    NVML says ``00000000:3B:00.0``; the kernel's XID line says ``PCI:0000:3b:00``; the
    fallen-off-bus message says ``0000:b3:00.0``. All three must meet on one key.
    """
    a = address.strip().lower()
    if a.startswith("pci:"):
        a = a[4:]
    a = a.split(".")[0]
    parts = a.split(":")
    if len(parts) == 2:  # bus:device without a domain
        parts = ["0000", *parts]
    if len(parts) != 3:
        raise ValueError(f"not a PCI address: {address!r}")
    domain, bus, dev = parts
    return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}"


class GpuLookup(Protocol):
    """Current GPUs of this node keyed by :func:`pci_key` (lost GPUs stay, with their identity)."""

    def __call__(self) -> Mapping[str, GpuIdentity]: ...


class XidEventSource(Protocol):
    """XIDs from somewhere other than the kernel log (NVML events): (pci_key, xid) pairs."""

    def poll(self) -> list[tuple[str, int]]: ...
