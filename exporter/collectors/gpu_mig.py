"""MIG devices of one GPU -> per-instance identity and memory, labelled as dcgm-exporter labels
them (GPU_I_ID, GPU_I_PROFILE; GPU_CI_ID as ``compute_instance``).

Called by :class:`exporter.collectors.gpu.GpuCollector` for each healthy GPU. A GPU without MIG
(or a driver without the calls) answers NOT_SUPPORTED once and is not asked again until NVML is
re-initialised; a GPU with MIG mode off has no instances. Devices are enumerated every cycle:
instances are created and destroyed at run time (``nvidia-smi mig -cgi``). Per-instance
profiling (graphics engine, tensor pipe, DRAM) comes from GPM's MIG samples (Hopper and newer).
NVML MIG: https://docs.nvidia.com/deploy/nvml-api/group__nvmlMultiInstanceGPUQueries.html
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping
from typing import Any

import pynvml

from exporter import catalog as c
from exporter.catalog import MetricDef
from exporter.collectors.gpu_fields import GpuRead
from exporter.collectors.gpu_profiling import gpm_metrics
from exporter.collectors.gpu_reader import is_lost, text

_PROFILE = re.compile(r"\bMIG (\S+)\s*$")  # NVML names a MIG device "NVIDIA H100 ... MIG 1g.10gb"


def read_mig(g: GpuRead) -> dict[str, tuple[str, str, str]]:
    """Append every MIG device's info and memory samples of this GPU to ``g.out``; returns
    MIG UUID -> (GPU instance, compute instance, profile)."""
    n, h, r = g.nvml, g.handle, g.r
    found: dict[str, tuple[str, str, str]] = {}
    mode = r.read("mig", n.nvmlDeviceGetMigMode, h)
    if mode is None or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
        return found
    count = r.read("mig", n.nvmlDeviceGetMaxMigDeviceCount, h) or 0
    for index in range(count):
        try:
            mig = n.nvmlDeviceGetMigDeviceHandleByIndex(h, index)
        except pynvml.NVMLError as e:
            if e.value != pynvml.NVML_ERROR_NOT_FOUND:  # NOT_FOUND: an empty slot, normal
                r.errors.add("mig_device") if not is_lost(e) else r.failed("mig_device", e)
            continue
        found.update(_instance(g, mig))
    return found


def _instance(g: GpuRead, mig: object) -> dict[str, tuple[str, str, str]]:
    n, r = g.nvml, g.r
    gi = r.read("mig_identity", n.nvmlDeviceGetGpuInstanceId, mig)
    ci = r.read("mig_identity", n.nvmlDeviceGetComputeInstanceId, mig)
    uuid = r.read("mig_identity", n.nvmlDeviceGetUUID, mig)
    name = r.read("mig_identity", n.nvmlDeviceGetName, mig)
    if gi is None or ci is None or uuid is None:
        return {}
    m = _PROFILE.search(text(name or ""))
    labels = (str(gi), str(ci), m[1] if m else "")
    g.out.append(c.GPU_MIG_INFO.make(1.0, *g.lv, *labels, text(uuid)))
    mem = r.read("mig_memory", n.nvmlDeviceGetMemoryInfo, mig)
    if mem is not None:
        g.out.append(c.GPU_MIG_MEMORY_USED.make(mem.used, *g.lv, *labels))
        g.out.append(c.GPU_MIG_MEMORY_FREE.make(mem.free, *g.lv, *labels))
    return {text(uuid): labels}


MIG_GPM: tuple[tuple[int, MetricDef, float], ...] = (
    (pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL, c.GPU_MIG_GRAPHICS_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL, c.GPU_MIG_TENSOR_ACTIVE, 0.01),
    (pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL, c.GPU_MIG_DRAM_ACTIVE, 0.01),
)


class MigProfiler:
    """Per-instance GPM (``nvmlGpmMigSampleGet``): one previous sample per (GPU, instance).

    A GPU whose driver or generation has no MIG GPM answers NOT_SUPPORTED once and is not asked
    again; a destroyed instance's sample is freed the cycle it disappears.
    """

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._prev: dict[tuple[str, str], Any] = {}

    def read(self, g: GpuRead, uuid: str, instances: Mapping[str, tuple[str, str, str]]) -> None:
        live = {(uuid, gi) for gi, _, _ in instances.values()}
        for key in [k for k in self._prev if k[0] == uuid and k not in live]:
            self._free(self._prev.pop(key))
        if not instances or g.r.skip("mig_gpm"):
            return
        for gi, ci, profile in instances.values():
            sample = g.r.read("mig_gpm", self._take, g.handle, int(gi))
            if sample is None:
                return  # unsupported (remembered) or failing (counted): no instance gets one
            prev, self._prev[(uuid, gi)] = self._prev.get((uuid, gi)), sample
            if prev is None:
                continue
            try:
                values = g.r.read("mig_gpm", gpm_metrics, self.nvml, prev, sample, MIG_GPM)
            finally:
                self._free(prev)
            for metric, value in values or ():
                g.out.append(metric.make(value, *g.lv, gi, ci, profile))

    def close(self) -> None:
        for sample in self._prev.values():
            self._free(sample)
        self._prev.clear()

    def _take(self, handle: Any, gi: int) -> Any:
        sample = self.nvml.nvmlGpmSampleAlloc()
        try:
            return self.nvml.nvmlGpmMigSampleGet(handle, gi, sample)
        except Exception:
            self._free(sample)
            raise

    def _free(self, sample: Any) -> None:
        with contextlib.suppress(pynvml.NVMLError):
            self.nvml.nvmlGpmSampleFree(sample)
