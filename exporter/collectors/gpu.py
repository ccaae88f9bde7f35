"""The GPU collector: NVML -> the GPU and NVLink sections of :mod:`exporter.catalog`.

First stage of the exporter's data flow for GPUs: the collection loop calls :meth:`collect`
once per interval; its samples are rendered by :mod:`exporter.exposition`. Other collectors
(kernel-log XIDs) name GPUs through :meth:`identities`, which keeps lost GPUs.

Failure policy (observe softly): no driver -> ``collect`` raises each cycle and retries init
next cycle; one field failing -> that series is skipped and counted in ``read_errors``; a GPU
off the bus (``NVMLError_GpuIsLost``) -> ``gpu_up{reason="gpu_lost"} 0`` plus its cached
``gpu_info``; a GPU whose handle/identity reads fail ``fail_threshold`` cycles in a row ->
``gpu_up{reason="nvml_error"} 0``. The other GPUs are unaffected either way.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import pynvml

from exporter import catalog as c
from exporter.catalog import Sample
from exporter.collectors.base import ReadErrors
from exporter.collectors.gpu_fabric import read_fabric
from exporter.collectors.gpu_fields import GpuRead, read_device
from exporter.collectors.gpu_mig import MigProfiler, read_mig
from exporter.collectors.gpu_nvlink import read_field_values, read_nvlink
from exporter.collectors.gpu_profiling import GpmProfiler
from exporter.collectors.gpu_reader import FieldReader, is_lost, text
from exporter.counters import Monotonic
from exporter.sources.dcgm import DcgmProfiling
from exporter.sources.protocols import GpuIdentity, NvmlApi, pci_key

GPU_LOST = "gpu_lost"
NVML_ERROR = "nvml_error"


class NvmlUnavailableError(RuntimeError):
    """NVML could not be initialised (no driver, driver not loaded): no GPU can be read."""


@dataclass
class _Gpu:
    """What the collector remembers about one NVML index between cycles."""

    identity: GpuIdentity | None = None
    info: tuple[str, str] = ("", "")  # serial, vbios_version
    failures: int = 0
    last: list[Sample] = field(default_factory=list)  # gpu_up (+ info) of the last good cycle


class GpuCollector:
    name = "gpu"

    def __init__(
        self,
        nvml: NvmlApi,
        node: str,
        *,
        fail_threshold: int = 3,
        dcgm: DcgmProfiling | None = None,
        pci_addresses: Callable[[], list[str]] | None = None,
    ) -> None:
        if fail_threshold < 1:
            raise ValueError(f"fail_threshold must be >= 1, got {fail_threshold}")
        self.nvml = nvml
        self.node = node
        self.fail_threshold = fail_threshold
        self.read_errors = ReadErrors()
        self.monotonic = Monotonic()
        self._initialized = False
        self._driver = ""
        self._gpus: dict[int, _Gpu] = {}
        self._unsupported: set[Hashable] = set()
        self.profiler = GpmProfiler(nvml, dcgm)
        self.mig_profiler = MigProfiler(nvml)
        self._migs: dict[int, dict[str, tuple[str, str, str]]] = {}  # index -> MIG UUID -> ids
        # Bus ids of the GPUs in NVML index order (sysfs), to name a GPU lost at first sight.
        self._pci_addresses = pci_addresses

    # ------------------------------------------------------------------ public
    def collect(self) -> list[Sample]:
        self._ensure_init()
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as e:
            self._initialized = False  # the driver went away under us: re-init next cycle
            raise NvmlUnavailableError(f"nvmlDeviceGetCount failed: {e}") from e
        out: list[Sample] = []
        for index in sorted(set(range(count)) | set(self._gpus)):
            out += self._collect_gpu(index, present=index < count)
        return out

    def identities(self) -> dict[str, GpuIdentity]:
        """Every GPU seen so far (lost ones too), keyed by :func:`pci_key` of its bus id."""
        return {
            pci_key(g.identity.pci_bus_id): g.identity
            for g in self._gpus.values()
            if g.identity is not None
        }

    def mig_devices(self) -> dict[str, tuple[str, str, str]]:
        """MIG UUID -> (GPU index, GPU UUID, GPU instance) of the MIG devices seen last."""
        return {
            m: (str(i), g.identity.uuid, gi)
            for i, migs in self._migs.items()
            if (g := self._gpus.get(i)) is not None and g.identity is not None
            for m, (gi, _, _) in migs.items()
        }

    def close(self) -> None:
        self.profiler.close()
        self.mig_profiler.close()
        if self._initialized:
            self._initialized = False
            try:
                self.nvml.nvmlShutdown()
            except pynvml.NVMLError:
                self.read_errors.add("shutdown")

    # ------------------------------------------------------------------ init
    def _ensure_init(self) -> None:
        if self._initialized:
            return
        try:
            self.nvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise NvmlUnavailableError(
                f"NVML init failed: {e} (is the NVIDIA driver installed and loaded?)"
            ) from e
        self._initialized = True
        self._unsupported.clear()  # a new driver may support what the old one did not
        try:
            self._driver = text(self.nvml.nvmlSystemGetDriverVersion())
        except pynvml.NVMLError:
            self.read_errors.add("driver_version")

    # ------------------------------------------------------------------ one GPU
    def _collect_gpu(self, index: int, present: bool) -> list[Sample]:
        gpu = self._gpus.setdefault(index, _Gpu())
        if not present:  # enumerated before, gone now: it fell off the bus
            return self._down(index, gpu, GPU_LOST)
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            self._identify(index, gpu, handle)
        except Exception as e:  # NVMLError, or a malformed bus id (ValueError)
            if is_lost(e):
                return self._down(index, gpu, GPU_LOST)
            self.read_errors.add("identity")
            gpu.failures += 1
            if gpu.failures >= self.fail_threshold:
                return self._down(index, gpu, NVML_ERROR)
            return list(gpu.last)  # debounce: a flaky read does not flip the GPU
        try:
            samples = self._read_healthy(index, gpu, handle)
        except pynvml.NVMLError as e:  # only GpuIsLost escapes the field reader
            if not is_lost(e):
                raise
            return self._down(index, gpu, GPU_LOST)
        gpu.failures = 0
        return samples

    def _identify(self, index: int, gpu: _Gpu, handle: Any) -> None:
        """Re-read the UUID every cycle (liveness); the rest only when the UUID changes."""
        uuid = text(self.nvml.nvmlDeviceGetUUID(handle))
        if gpu.identity is not None and gpu.identity.uuid == uuid:
            return
        bus_id = text(self.nvml.nvmlDeviceGetPciInfo(handle).busId)
        pci_key(bus_id)  # a malformed bus id is an identity failure, not a crash later
        r = FieldReader(uuid, self.read_errors, self._unsupported)
        name = text(r.read("name", self.nvml.nvmlDeviceGetName, handle) or "")
        serial = text(r.read("serial", self.nvml.nvmlDeviceGetSerial, handle) or "")
        vbios = text(r.read("vbios", self.nvml.nvmlDeviceGetVbiosVersion, handle) or "")
        minor = r.read("minor", self.nvml.nvmlDeviceGetMinorNumber, handle)
        gpu.identity = GpuIdentity(
            str(index), uuid, bus_id, name, "" if minor is None else str(minor)
        )
        gpu.info = (serial, vbios)

    def _read_healthy(self, index: int, gpu: _Gpu, handle: Any) -> list[Sample]:
        assert gpu.identity is not None
        lv = (self.node, str(index), gpu.identity.uuid)
        head = [*self._info(gpu), c.GPU_UP.make(1.0, *lv, "")]
        reader = FieldReader(gpu.identity.uuid, self.read_errors, self._unsupported)
        g = GpuRead(self.nvml, handle, reader, lv, self.monotonic, [])
        read_device(g)
        read_field_values(g, read_nvlink(g))
        read_fabric(g)
        self.profiler.read(g, gpu.identity.uuid)
        self._migs[index] = read_mig(g)
        self.mig_profiler.read(g, gpu.identity.uuid, self._migs[index])
        gpu.last = head
        return head + g.out

    def _down(self, index: int, gpu: _Gpu, reason: str) -> list[Sample]:
        if gpu.identity is None and reason == GPU_LOST:
            self._identify_lost(index, gpu)
        uuid = gpu.identity.uuid if gpu.identity else ""
        gpu.last = [*self._info(gpu), c.GPU_UP.make(0.0, self.node, str(index), uuid, reason)]
        return list(gpu.last)

    def _identify_lost(self, index: int, gpu: _Gpu) -> None:
        """A GPU lost before NVML ever named it: its bus id from PCI order, so that XIDs on
        that address carry the same ``gpu`` index as its ``gpu_up`` (uuid stays unknown)."""
        addresses = self._pci_addresses() if self._pci_addresses else []
        if index < len(addresses):
            try:
                pci_key(addresses[index])
            except ValueError:
                return
            gpu.identity = GpuIdentity(str(index), "", addresses[index], "")

    def _info(self, gpu: _Gpu) -> list[Sample]:
        ident = gpu.identity
        if ident is None:
            return []
        lv = (self.node, ident.index, ident.uuid, ident.name, ident.pci_bus_id)
        return [c.GPU_INFO.make(1.0, *lv, *gpu.info, self._driver)]  # driver: as of last init
