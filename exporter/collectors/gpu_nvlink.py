"""One GPU's NVLink links and NVML field values -> catalogue samples.

Called by :class:`exporter.collectors.gpu.GpuCollector` after the per-device families. Links
are probed up to ``NVML_NVLINK_MAX_LINKS``; a link the GPU does not have answers
INVALID_ARGUMENT or NOT_SUPPORTED once and is not asked again. Memory temperature, the driver's
recovery action and NVLink throughput have no dedicated call: they come in one
``nvmlDeviceGetFieldValues`` batch whose entries each carry their own return code.
Field ids: https://docs.nvidia.com/deploy/nvml-api/group__nvmlFieldValueEnums.html
"""

from __future__ import annotations

from typing import Any

import pynvml

from exporter import catalog as c
from exporter.collectors.gpu_fields import GpuRead
from exporter.collectors.gpu_reader import field_number

ERROR_COUNTERS = {
    "crc_flit": pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    "crc_data": pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    "replay": pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    "recovery": pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
}
MEMORY_TEMP = pynvml.NVML_FI_DEV_MEMORY_TEMP
RECOVERY_ACTION = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
TX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX
RX = pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX
KIB = 1024  # NVLink throughput fields count KiB (nvml.h NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_*)


def read_nvlink(g: GpuRead, max_links: int = pynvml.NVML_NVLINK_MAX_LINKS) -> list[int]:
    """State and error counters of every link this GPU has, and their per-GPU sums (links
    down, errors of every link and type) when every one of them was read; returns the links."""
    links: list[int] = []
    down = total = 0.0
    states = counters = True  # every link's state / counters read: that per-GPU sum is served
    for link in range(max_links):
        if g.r.skip("nvlink_state", link):
            continue
        state = g.r.read(
            "nvlink_state", g.nvml.nvmlDeviceGetNvLinkState, g.handle, link, scope=link
        )
        if g.r.skip("nvlink_state", link):
            continue  # no such link on this GPU
        links.append(link)
        lv = str(link)
        if state is None:
            states = False
        else:
            up = 1.0 if state == pynvml.NVML_FEATURE_ENABLED else 0.0
            g.gauge(c.NVLINK_UP, up, lv)
            down += 1.0 - up
        for name, counter in ERROR_COUNTERS.items():
            fn = g.nvml.nvmlDeviceGetNvLinkErrorCounter
            raw = g.r.read("nvlink_errors", fn, g.handle, link, counter, scope=(link, counter))
            if raw is None:
                counters = False
                continue
            g.counter(c.NVLINK_ERRORS, raw, lv, name)
            total += g.out[-1].value  # the exported (reset-absorbing) value: the sum is monotonic
    if links and states:
        g.gauge(c.GPU_NVLINK_DOWN, down)
    if links and counters:
        g.out.append(c.GPU_NVLINK_ERRORS.make(total, *g.lv))
    return links


def read_field_values(g: GpuRead, links: list[int]) -> None:
    """Memory temperature, recovery action and per-link NVLink bytes in one NVML call."""
    wanted: list[tuple[int, int, str]] = [
        (MEMORY_TEMP, 0, "memory_temperature"),
        (RECOVERY_ACTION, 0, "recovery_action"),
    ]
    wanted += [(f, link, "nvlink_throughput") for link in links for f in (TX, RX)]
    wanted = [w for w in wanted if not g.r.skip(w[2], (w[0], w[1]))]
    if not wanted:
        return
    request = [(fid, scope) for fid, scope, _ in wanted]
    values = g.r.read("field_values", g.nvml.nvmlDeviceGetFieldValues, g.handle, request)
    if values is None:
        return
    for (fid, scope, what), fv in zip(wanted, values, strict=False):
        if fv.nvmlReturn != pynvml.NVML_SUCCESS:
            g.r.failed(what, pynvml.NVMLError(fv.nvmlReturn), (fid, scope))
            continue
        _emit_field(g, fid, scope, fv)


def _emit_field(g: GpuRead, fid: int, scope: int, fv: Any) -> None:
    v = field_number(fv)
    if fid == MEMORY_TEMP:
        g.gauge(c.GPU_MEMORY_TEMPERATURE, v)
    elif fid == RECOVERY_ACTION:
        g.gauge(c.GPU_RECOVERY_ACTION, v)
    else:
        metric = c.NVLINK_TRANSMIT if fid == TX else c.NVLINK_RECEIVE
        g.counter(metric, v, str(scope), scale=KIB)
