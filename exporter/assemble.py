"""Wires sources to collectors for one node, from the exporter's settings.

``--source nvml``: the pynvml module, /sys (or ``--sysfs-root``), /dev/kmsg (or ``--kmsg``)
with NVML XID events as the fallback. ``--source simulated``: one simulated node of the fleet
model (8 GPUs x 18 NVLinks, 8 IB ports); an explicit ``--sysfs-root`` or ``--kmsg`` replaces
the simulated tree or log, so recorded fixtures can be replayed against simulated GPUs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from exporter.collectors.base import Collector
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.infiniband import InfinibandCollector
from exporter.collectors.jobs import JobsCollector
from exporter.collectors.xid import XidCollector
from exporter.settings import ExporterSettings
from exporter.sources.jobmap import DirJobMap
from exporter.sources.kmsg import KernelLogReader
from exporter.sources.nvml_events import NvmlXidEvents
from exporter.sources.protocols import KernelLog, NvmlApi, SysfsRoot, XidEventSource
from exporter.sources.sysfs import DirSysfs


@dataclass
class Assembly:
    collectors: list[Collector]
    before_cycle: Callable[[float], None] | None = None


def _real_nvml() -> NvmlApi:
    import pynvml  # imported here: the simulated source must not need the driver bindings

    nvml: Any = pynvml
    return nvml  # type: ignore[no-any-return]


def collectors_for(
    node: str,
    nvml: NvmlApi,
    sysfs: SysfsRoot,
    kmsg: KernelLog,
    *,
    nvml_xid_events: bool = False,
    job_map_dir: str | None = None,
) -> list[Collector]:
    """The collector set of one node; the real exporter and the simulator both use it.

    ``nvml_xid_events``: NVML XID events back the kernel log up (their read failures are
    counted with the GPU collector's).
    """
    gpu = GpuCollector(nvml, node)
    fallback: XidEventSource | None = (
        NvmlXidEvents(nvml, read_errors=gpu.read_errors) if nvml_xid_events else None
    )
    out: list[Collector] = [
        gpu,
        InfinibandCollector(sysfs, node),
        XidCollector(kmsg, gpu.identities, node, fallback=fallback),
    ]
    if job_map_dir:
        out.append(JobsCollector(DirJobMap(job_map_dir), gpu.identities, node))
    return out


def assemble(settings: ExporterSettings) -> Assembly:
    if settings.source == "simulated":
        from exporter.fleet import single_node  # the fleet model is only loaded when asked

        sim = single_node(settings.node, seed=settings.seed)
        sysfs: SysfsRoot = DirSysfs(settings.sysfs_root) if settings.sysfs_root else sim.sysfs
        kmsg: KernelLog = KernelLogReader(settings.kmsg) if settings.kmsg else sim.kmsg
        cols = collectors_for(
            settings.node, sim.nvml, sysfs, kmsg, job_map_dir=settings.job_map_dir
        )
        return Assembly(cols, before_cycle=sim.advance)
    nvml = _real_nvml()
    cols = collectors_for(
        settings.node,
        nvml,
        DirSysfs(settings.sysfs_root or "/sys"),
        KernelLogReader(settings.kmsg or "/dev/kmsg"),
        nvml_xid_events=True,
        job_map_dir=settings.job_map_dir,
    )
    return Assembly(cols)
