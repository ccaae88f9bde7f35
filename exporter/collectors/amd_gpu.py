"""The AMD GPU collector: amdsmi -> the catalogue's GPU, RAS and XGMI series.

Sits where :class:`exporter.collectors.gpu.GpuCollector` sits for NVIDIA (``--source amdsmi``),
behind the :class:`~exporter.sources.amdsmi_api.AmdSmiApi` seam. The collection loop calls
:meth:`collect` once per interval; other collectors (the amdgpu kernel-log events) name GPUs
through :meth:`identities`, which keeps lost GPUs. ``gpu`` is the processor handle's index in
amdsmi's order, ``uuid`` amdsmi's UUID, ``pci_bus_id`` its BDF.

Failure policy, as for NVML: no library or driver -> ``collect`` raises each cycle and
re-initialises next cycle; a field failing -> that series is skipped and counted in
``read_errors``; a handle answering ``AMDSMI_STATUS_NOT_FOUND``, or gone from the handle list,
-> ``gpu_up{reason="gpu_lost"} 0`` with its cached ``gpu_info``; identity reads failing
``fail_threshold`` cycles in a row -> ``gpu_up{reason="amdsmi_error"} 0``.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

from exporter import catalog as c
from exporter.catalog import Sample
from exporter.collectors.amd_cper import CperCounter
from exporter.collectors.amd_fields import AmdRead, read_partition, read_physical
from exporter.collectors.amd_reader import AmdGpuLost, AmdReader, number
from exporter.collectors.base import ReadErrors
from exporter.counters import Monotonic
from exporter.sources import amdsmi_api as api
from exporter.sources.amdsmi_api import AmdSmiApi, error_code
from exporter.sources.protocols import GpuIdentity, pci_key

GPU_LOST = "gpu_lost"
AMDSMI_ERROR = "amdsmi_error"


class AmdSmiUnavailableError(RuntimeError):
    """amdsmi could not be initialised (no amdgpu driver, no ROCm library): no GPU is read."""


@dataclass
class _Gpu:
    """What the collector remembers about one processor handle index between cycles."""

    identity: GpuIdentity | None = None
    info: tuple[str, str, str] = ("", "", "")  # serial, vbios, driver
    partition: tuple[str, str, str] = ("0", "", "")  # partition id, compute, memory mode
    failures: int = 0
    last: list[Sample] = field(default_factory=list)


class AmdGpuCollector:
    name = "gpu"

    def __init__(self, smi: AmdSmiApi, node: str, *, fail_threshold: int = 3) -> None:
        if fail_threshold < 1:
            raise ValueError(f"fail_threshold must be >= 1, got {fail_threshold}")
        self.smi = smi
        self.node = node
        self.fail_threshold = fail_threshold
        self.read_errors = ReadErrors()
        self.monotonic = Monotonic()
        self.cper = CperCounter()
        self._initialized = False
        self._gpus: dict[int, _Gpu] = {}
        self._unsupported: set[Hashable] = set()

    # ------------------------------------------------------------------ public
    def collect(self) -> list[Sample]:
        self._ensure_init()
        try:
            handles = list(self.smi.amdsmi_get_processor_handles())
        except self.smi.AmdSmiLibraryException as e:
            self._initialized = False  # the driver went away under us: re-init next cycle
            raise AmdSmiUnavailableError(f"amdsmi_get_processor_handles failed: {e}") from e
        out: list[Sample] = []
        for index in sorted(set(range(len(handles))) | set(self._gpus)):
            handle = handles[index] if index < len(handles) else None
            out += self._collect_gpu(index, handle)
        return out

    def identities(self) -> dict[str, GpuIdentity]:
        """Every GPU seen so far (lost ones too) by :func:`pci_key`; where partitions share a
        device, partition 0 names it (the kernel log names the physical device)."""
        out: dict[str, GpuIdentity] = {}
        for _, g in sorted(self._gpus.items(), key=lambda kv: (kv[1].partition[0], kv[0])):
            if g.identity is not None:
                out.setdefault(pci_key(g.identity.pci_bus_id), g.identity)
        return out

    def close(self) -> None:
        if self._initialized:
            self._initialized = False
            try:
                self.smi.amdsmi_shut_down()
            except self.smi.AmdSmiException:
                self.read_errors.add("shutdown")

    # ------------------------------------------------------------------ init
    def _ensure_init(self) -> None:
        if self._initialized:
            return
        try:
            self.smi.amdsmi_init(self.smi.AmdSmiInitFlags.INIT_AMD_GPUS)
        except self.smi.AmdSmiException as e:
            raise AmdSmiUnavailableError(
                f"amdsmi init failed: {e} (is the amdgpu driver loaded and ROCm installed?)"
            ) from e
        self._initialized = True
        self._unsupported.clear()  # a new driver may support what the old one did not

    # ------------------------------------------------------------------ one GPU
    def _collect_gpu(self, index: int, handle: Any) -> list[Sample]:
        gpu = self._gpus.setdefault(index, _Gpu())
        if handle is None:  # enumerated before, gone now
            return self._down(index, gpu, GPU_LOST)
        try:
            self._identify(index, gpu, handle)
        except Exception as e:  # a library error, or a malformed BDF (ValueError)
            if isinstance(e, AmdGpuLost) or error_code(e) == api.STATUS_NOT_FOUND:
                return self._down(index, gpu, GPU_LOST)
            self.read_errors.add("identity")
            gpu.failures += 1
            if gpu.failures >= self.fail_threshold:
                return self._down(index, gpu, AMDSMI_ERROR)
            return list(gpu.last)  # debounce: a flaky read does not flip the GPU
        try:
            samples = self._read_healthy(index, gpu, handle)
        except AmdGpuLost:
            return self._down(index, gpu, GPU_LOST)
        gpu.failures = 0
        return samples

    def _identify(self, index: int, gpu: _Gpu, handle: Any) -> None:
        """Re-read the UUID every cycle (liveness); the rest only when the UUID changes."""
        uuid = str(self.smi.amdsmi_get_gpu_device_uuid(handle))
        if gpu.identity is not None and gpu.identity.uuid == uuid:
            return
        bdf = str(self.smi.amdsmi_get_gpu_device_bdf(handle))
        pci_key(bdf)  # a malformed BDF is an identity failure, not a crash later
        r = AmdReader(self.smi, uuid, self.read_errors, self._unsupported)
        asic = r.field("asic", self.smi.amdsmi_get_gpu_asic_info, handle)
        vbios = r.field("vbios", self.smi.amdsmi_get_gpu_vbios_info, handle)
        driver = r.field("driver", self.smi.amdsmi_get_gpu_driver_info, handle)
        kfd = r.field("kfd", self.smi.amdsmi_get_gpu_kfd_info, handle)
        compute = r.read("partition", self.smi.amdsmi_get_gpu_compute_partition, handle)
        memory = r.read("partition", self.smi.amdsmi_get_gpu_memory_partition, handle, scope="m")
        part = number(kfd.get("current_partition_id"))
        gpu.identity = GpuIdentity(str(index), uuid, bdf, _text(asic.get("market_name")))
        gpu.info = (_text(asic.get("asic_serial")), _text(vbios.get("version")),
                    _text(driver.get("driver_version")))  # fmt: skip
        gpu.partition = (str(int(part or 0)), _text(compute), _text(memory))

    def _read_healthy(self, index: int, gpu: _Gpu, handle: Any) -> list[Sample]:
        assert gpu.identity is not None
        uuid = gpu.identity.uuid
        lv = (self.node, str(index), uuid)
        head = [*self._info(gpu), c.GPU_UP.make(1.0, *lv, "")]
        reader = AmdReader(self.smi, uuid, self.read_errors, self._unsupported)
        g = AmdRead(self.smi, handle, reader, lv, self.monotonic, [])
        read_partition(g)
        if gpu.partition[0] == "0":  # physical sensors and device RAS: partition 0 only
            read_physical(g)
            self.cper.read(self.smi, handle, reader, uuid)
            g.out += self.cper.samples(lv, uuid)
        gpu.last = head
        return head + g.out

    def _down(self, index: int, gpu: _Gpu, reason: str) -> list[Sample]:
        uuid = gpu.identity.uuid if gpu.identity else ""
        gpu.last = [*self._info(gpu), c.GPU_UP.make(0.0, self.node, str(index), uuid, reason)]
        return list(gpu.last)

    def _info(self, gpu: _Gpu) -> list[Sample]:
        ident = gpu.identity
        if ident is None:
            return []
        lv = (self.node, ident.index, ident.uuid)
        out = [c.GPU_INFO.make(1.0, *lv, ident.name, ident.pci_bus_id, *gpu.info)]
        part, compute, memory = gpu.partition
        if compute or memory:
            out.append(c.GPU_PARTITION_INFO.make(1.0, *lv, ident.pci_bus_id, part, compute, memory))
        return out


def _text(v: Any) -> str:
    if v is None or v == "N/A":
        return ""
    if isinstance(v, bytes):
        return v.decode(errors="replace").rstrip("\x00")
    return str(v).strip()
