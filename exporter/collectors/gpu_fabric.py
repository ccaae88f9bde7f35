"""One GPU's place and health in the NVLink fabric -> ``gpu_fabric_info`` and ``gpu_fabric_health``.

Called by :class:`exporter.collectors.gpu.GpuCollector` after the NVLink reads. One call,
``nvmlDeviceGetGpuFabricInfoV``, fills an ``nvmlGpuFabricInfo_v2_t`` the caller allocates with
its ``version`` set (nvml.h; pynvml ``c_nvmlGpuFabricInfoV_t``): ``clusterUuid`` (16 bytes),
``status`` (an nvmlReturn_t: why registration failed), ``cliqueId``, ``state``
(NVML_GPU_FABRIC_STATE_*) and ``healthMask``, whose 2-bit fields each say NOT_SUPPORTED /
TRUE / FALSE (NVML_GPU_FABRIC_HEALTH_MASK_*; ``incorrect_configuration`` is a 4-bit enum).
gpud reads the same struct (pkg/nvidia/nvml/device/fabric_state.go) and decodes the mask the
same way.

Where the fabric does not exist (PCIe GPUs, GPUs without NVSwitch, drivers before 550 that lack
the entry point) ``gpuwarden_exporter_field_unavailable{metric="gpuwarden_gpu_fabric_info"}``
says why instead: ``fabric_unsupported`` (NOT_SUPPORTED, or the struct's own state
NOT_SUPPORTED) or ``driver_too_old`` (FUNCTION_NOT_FOUND).
"""

from __future__ import annotations

import ctypes
import uuid
from typing import Any

import pynvml

from exporter import catalog as c
from exporter.collectors.gpu_fields import GpuRead
from exporter.collectors.gpu_reader import ABSENT, is_lost

STATES = {
    pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED: "not_supported",
    pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED: "not_started",
    pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS: "in_progress",
    pynvml.NVML_GPU_FABRIC_STATE_COMPLETED: "completed",
}
# check -> (shift, width, value meaning "set", value meaning "clear"); NOT_SUPPORTED is 0.
TRI_STATE = {
    "degraded_bandwidth": ("DEGRADED_BW", "DEGRADED_BW_TRUE", "DEGRADED_BW_FALSE"),
    "route_recovery": ("ROUTE_RECOVERY", "ROUTE_RECOVERY_TRUE", "ROUTE_RECOVERY_FALSE"),
    "route_unhealthy": ("ROUTE_UNHEALTHY", "ROUTE_UNHEALTHY_TRUE", "ROUTE_UNHEALTHY_FALSE"),
    "access_timeout_recovery": (
        "ACCESS_TIMEOUT_RECOVERY",
        "ACCESS_TIMEOUT_RECOVERY_TRUE",
        "ACCESS_TIMEOUT_RECOVERY_FALSE",
    ),
    "gfm_disconnected": ("GFM_STATE", "GFM_STATE_DISCONNECTED", "GFM_STATE_CONNECTED"),
}
_MASK = "NVML_GPU_FABRIC_HEALTH_MASK_"
CHECKS: dict[str, tuple[int, int, int, int]] = {
    check: (
        getattr(pynvml, f"{_MASK}SHIFT_{field}"),
        getattr(pynvml, f"{_MASK}WIDTH_{field}"),
        getattr(pynvml, _MASK + true),
        getattr(pynvml, _MASK + false),
    )
    for check, (field, true, false) in TRI_STATE.items()
}
CONFIG_SHIFT = getattr(pynvml, f"{_MASK}SHIFT_INCORRECT_CONFIGURATION")
CONFIG_WIDTH = getattr(pynvml, f"{_MASK}WIDTH_INCORRECT_CONFIGURATION")
CONFIG_NONE = getattr(pynvml, f"{_MASK}INCORRECT_CONFIGURATION_NONE")
CONFIG_NOT_SUPPORTED = getattr(pynvml, f"{_MASK}INCORRECT_CONFIGURATION_NOT_SUPPORTED")
# nvmlReturn_t -> a label value: NVML_ERROR_NOT_READY -> "not_ready" (no library call needed)
RETURNS = {
    v: k.removeprefix("NVML_ERROR_").lower()
    for k, v in vars(pynvml).items()
    if k.startswith("NVML_ERROR_") and isinstance(v, int)
} | {pynvml.NVML_SUCCESS: "success"}
FABRIC_UNSUPPORTED = "fabric_unsupported"
DRIVER_TOO_OLD = "driver_too_old"


def decode_health(mask: int) -> dict[str, float]:
    """Each health check the mask reports: 1.0 set, 0.0 clear; unreported ones are left out."""
    out = {}
    for check, (shift, width, true, false) in CHECKS.items():
        v = (mask >> shift) & width
        if v in (true, false):
            out[check] = 1.0 if v == true else 0.0
    config = (mask >> CONFIG_SHIFT) & CONFIG_WIDTH
    if config != CONFIG_NOT_SUPPORTED:
        out["incorrect_configuration"] = 0.0 if config == CONFIG_NONE else 1.0
    return out


def cluster_uuid(raw: Any) -> str:
    """The 16 bytes of ``clusterUuid`` as a UUID string ("" when all zero: no cluster)."""
    data = bytes(raw)
    return "" if not any(data) else str(uuid.UUID(bytes=data[:16]))


def read_fabric(g: GpuRead) -> None:
    """The fabric info series and health checks of one GPU, or why it has none."""
    for reason in (FABRIC_UNSUPPORTED, DRIVER_TOO_OLD):  # absence is remembered per GPU
        if g.r.skip("fabric", reason):
            _unavailable(g, reason)
            return
    info = _query(g)
    if info is None:
        return
    if info.state == pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED:
        _unavailable(g, FABRIC_UNSUPPORTED)
        return
    state = STATES.get(info.state, f"unknown_{info.state}")
    status = RETURNS.get(info.status, f"error_{info.status}")
    labels = (state, status, cluster_uuid(info.clusterUuid), str(info.cliqueId))
    g.out.append(c.GPU_FABRIC_INFO.make(1.0, *g.lv, *labels))
    for check, value in decode_health(info.healthMask).items():
        g.out.append(c.GPU_FABRIC_HEALTH.make(value, *g.lv, check))


def _query(g: GpuRead) -> Any:
    """The filled struct, or None (absence remembered and reported, a failure counted)."""
    info = pynvml.c_nvmlGpuFabricInfoV_t()  # its __init__ sets version = nvmlGpuFabricInfo_v2
    fn = getattr(g.nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    try:
        if fn is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        fn(g.handle, ctypes.byref(info))
    except pynvml.NVMLError as e:
        if is_lost(e):
            raise
        if e.value not in ABSENT:
            g.r.errors.add("fabric")
            return None
        reason = (
            DRIVER_TOO_OLD
            if e.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
            else (FABRIC_UNSUPPORTED)
        )
        g.r.unsupported.add((g.r.gpu, "fabric", reason))
        _unavailable(g, reason)
        return None
    except Exception:  # a binding quirk costs this series, not the GPU
        g.r.errors.add("fabric")
        return None
    return info


def _unavailable(g: GpuRead, reason: str) -> None:
    node, gpu = g.lv[0], g.lv[1]
    g.out.append(c.FIELD_UNAVAILABLE.make(1.0, node, gpu, c.GPU_FABRIC_INFO.name, reason))
