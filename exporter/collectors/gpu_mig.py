"""MIG devices of one GPU -> per-instance identity and memory, labelled as dcgm-exporter labels
them (GPU_I_ID, GPU_I_PROFILE; GPU_CI_ID as ``compute_instance``).

Called by :class:`exporter.collectors.gpu.GpuCollector` for each healthy GPU. A GPU without MIG
(or a driver without the calls) answers NOT_SUPPORTED once and is not asked again until NVML is
re-initialised; a GPU with MIG mode off has no instances. Devices are enumerated every cycle:
instances are created and destroyed at run time (``nvidia-smi mig -cgi``).
NVML MIG: https://docs.nvidia.com/deploy/nvml-api/group__nvmlMultiInstanceGPUQueries.html
"""

from __future__ import annotations

import re

import pynvml

from exporter import catalog as c
from exporter.collectors.gpu_fields import GpuRead
from exporter.collectors.gpu_reader import is_lost, text

_PROFILE = re.compile(r"\bMIG (\S+)\s*$")  # NVML names a MIG device "NVIDIA H100 ... MIG 1g.10gb"


def read_mig(g: GpuRead) -> dict[str, str]:
    """Append every MIG device's info and memory samples of this GPU to ``g.out``; returns
    MIG UUID -> GPU instance id (for attributing MIG devices to pods)."""
    n, h, r = g.nvml, g.handle, g.r
    found: dict[str, str] = {}
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


def _instance(g: GpuRead, mig: object) -> dict[str, str]:
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
    return {text(uuid): str(gi)}
