"""``gpuwarden-exporter --source simulated``: one simulated node behind the real collectors.

Registered as the ``simulated`` entry point of the exporter's ``gpuwarden.exporter_sources``
group, so the node agent never imports the simulator: the dependency runs from the
simulator to the exporter, as the layout contracts require. An explicit ``--sysfs-root`` or
``--kmsg`` replaces the simulated tree or log, so recorded fixtures can be replayed against
simulated GPUs.
"""

from __future__ import annotations

from exporter.assemble import Assembly, collectors_for, storage_prober
from exporter.settings import ExporterSettings
from exporter.sources.kmsg import KernelLogReader
from exporter.sources.protocols import KernelLog, SysfsRoot
from exporter.sources.sysfs import DirSysfs
from simulator import single_node


def assemble(settings: ExporterSettings) -> Assembly:
    """The collector set of one simulated node (8 GPUs x 18 NVLinks, 8 IB ports)."""
    sim = single_node(settings.node, seed=settings.seed)
    sysfs: SysfsRoot = DirSysfs(settings.sysfs_root) if settings.sysfs_root else sim.sysfs
    kmsg: KernelLog = KernelLogReader(settings.kmsg) if settings.kmsg else sim.kmsg
    cols = collectors_for(
        settings.node,
        sim.nvml,
        sysfs,
        kmsg,
        job_map_dir=settings.job_map_dir,
        kmsg_state=settings.kmsg_state,
        kmsg_backlog=settings.kmsg_backlog,
        storage=storage_prober(settings),
    )
    return Assembly(cols, before_cycle=sim.advance)
