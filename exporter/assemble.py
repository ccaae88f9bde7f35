"""Wires sources to collectors for one node, from the exporter's settings.

``--source amdsmi``: AMD's amdsmi module, with the same sysfs, kernel log, jobs, pods and
storage; amdgpu kernel-log events take the place of XIDs (``auto``, the default, is resolved
by the settings). ``--source nvml``: the pynvml module, /sys (or ``--sysfs-root``), /dev/kmsg (or ``--kmsg``)
with NVML XID events as the fallback. Any other ``--source`` is a plugin: an entry point in
the ``gpuwarden.exporter_sources`` group, a callable ``(settings) -> Assembly``. The node
agent carries no simulator code: ``--source simulated`` is provided by the ``simulator``
package (:mod:`simulator.exporter_source`), loaded only when asked for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any

from exporter.collectors.amd_gpu import AmdGpuCollector
from exporter.collectors.amdgpu_log import AmdgpuLogCollector
from exporter.collectors.base import Collector
from exporter.collectors.fabric_services import FabricServicesCollector
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.infiniband import InfinibandCollector
from exporter.collectors.jobs import JobsCollector
from exporter.collectors.pods import PodsCollector
from exporter.collectors.roce_pfc import RocePfcCollector
from exporter.collectors.steps import StepsCollector
from exporter.collectors.storage import StorageCollector
from exporter.collectors.xid import XidCollector
from exporter.settings import ExporterSettings
from exporter.sources.amdsmi_api import AmdSmiApi, load_amdsmi
from exporter.sources.dcgm import DcgmProfiling, load_bindings
from exporter.sources.ethtool import EthtoolStats, IoctlEthtool
from exporter.sources.imex_ctl import ImexCtl, ImexCtlRunner
from exporter.sources.jobmap import DirJobMap
from exporter.sources.kmsg import KernelLogReader
from exporter.sources.kmsg_state import XidStateFile
from exporter.sources.kubelet import KubeletPodResources, PodResources
from exporter.sources.nvml_events import NvmlXidEvents
from exporter.sources.pci import nvidia_gpu_addresses
from exporter.sources.procpods import ProcessOwners, ProcPodOwners
from exporter.sources.protocols import KernelLog, NvmlApi, SysfsRoot, XidEventSource
from exporter.sources.steps import DirSteps
from exporter.sources.storage_probe import StorageProber
from exporter.sources.sysfs import DirSysfs
from exporter.sources.systemd_units import SystemctlUnits, UnitReader


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
    pod_resources: PodResources | None = None,
    dcgm: DcgmProfiling | None = None,
    kmsg_state: str | None = None,
    kmsg_backlog: float | None = None,
    storage: StorageProber | None = None,
    step_dir: str | None = None,
    fabric_units: UnitReader | None = None,
    imex: ImexCtl | None = None,
    process_owners: ProcessOwners | None = None,
    ethtool: EthtoolStats | None = None,
) -> list[Collector]:
    """The collector set of one node; the real exporter and the simulator both use it.

    ``nvml_xid_events``: NVML XID events back the kernel log up (their read failures are
    counted with the GPU collector's).
    """
    gpu = GpuCollector(nvml, node, dcgm=dcgm, pci_addresses=lambda: nvidia_gpu_addresses(sysfs))
    fallback: XidEventSource | None = (
        NvmlXidEvents(nvml, read_errors=gpu.read_errors) if nvml_xid_events else None
    )
    out: list[Collector] = [
        gpu,
        InfinibandCollector(sysfs, node),
        XidCollector(
            kmsg,
            gpu.identities,
            node,
            fallback=fallback,
            state=XidStateFile(kmsg_state) if kmsg_state else None,
            backlog_seconds=kmsg_backlog,
        ),
    ]
    if ethtool is not None:  # RoCE ports' PFC pause counters (nothing where no port is RoCE)
        out.append(RocePfcCollector(sysfs, ethtool, node))
    if job_map_dir:
        out.append(JobsCollector(DirJobMap(job_map_dir), gpu.identities, node))
    if step_dir:  # the training side's step times, checked against the job map when there is one
        owner = DirJobMap(job_map_dir) if job_map_dir else None
        out.append(StepsCollector(DirSteps(step_dir), gpu.identities, node, owner))
    if pod_resources is not None:
        out.append(PodsCollector(pod_resources, gpu.identities, node, mig=gpu.mig_devices))
    if process_owners is not None:  # who uses a shared GPU, pod by pod
        out.append(GpuProcessesCollector(nvml, gpu.identities, node, process_owners))
    if storage is not None and storage.mounts:
        out.append(StorageCollector(storage, node))
    if fabric_units is not None:  # Fabric Manager / IMEX units (or why they cannot be read)
        out.append(FabricServicesCollector(fabric_units, node, imex=imex))
    return out


def amd_collectors_for(
    node: str,
    smi: AmdSmiApi,
    sysfs: SysfsRoot,
    kmsg: KernelLog,
    *,
    job_map_dir: str | None = None,
    pod_resources: PodResources | None = None,
    storage: StorageProber | None = None,
    step_dir: str | None = None,
    kmsg_backlog: float | None = None,
) -> list[Collector]:
    """The collector set of an AMD node: amdsmi in place of NVML, amdgpu kernel-log events in
    place of XIDs; InfiniBand, jobs, pods, steps and storage as on any node."""
    gpu = AmdGpuCollector(smi, node)
    out: list[Collector] = [
        gpu,
        InfinibandCollector(sysfs, node),
        AmdgpuLogCollector(kmsg, gpu.identities, node, backlog_seconds=kmsg_backlog),
    ]
    if job_map_dir:
        out.append(JobsCollector(DirJobMap(job_map_dir), gpu.identities, node))
    if step_dir:
        owner = DirJobMap(job_map_dir) if job_map_dir else None
        out.append(StepsCollector(DirSteps(step_dir), gpu.identities, node, owner))
    if pod_resources is not None:
        out.append(PodsCollector(pod_resources, gpu.identities, node))
    if storage is not None and storage.mounts:
        out.append(StorageCollector(storage, node))
    return out


SOURCE_PLUGIN_GROUP = "gpuwarden.exporter_sources"


class SourceUnavailable(ValueError):
    """The asked-for ``--source`` is not installed here (no plugin provides it)."""


def plugin_source(name: str) -> Callable[[ExporterSettings], Assembly]:
    """The callable that a ``gpuwarden.exporter_sources`` entry point named ``name`` provides."""
    found = [ep for ep in entry_points(group=SOURCE_PLUGIN_GROUP) if ep.name == name]
    if not found:
        raise SourceUnavailable(
            f"no plugin provides --source {name} (entry point group {SOURCE_PLUGIN_GROUP}); "
            "install the full gpuwarden distribution for the simulated source"
        )
    factory: Callable[[ExporterSettings], Assembly] = found[0].load()
    return factory


def storage_prober(settings: ExporterSettings) -> StorageProber | None:
    if not settings.storage_mounts:
        return None
    return StorageProber(
        settings.storage_mounts,
        settings.node,
        timeout=settings.storage_probe_timeout,
        interval=settings.storage_probe_interval,
    )


def assemble_amd(settings: ExporterSettings) -> Assembly:
    """``--source amdsmi``: the amdsmi module (ImportError/OSError when ROCm cannot load)."""
    try:
        smi = load_amdsmi()
    except ImportError as e:
        raise ValueError(
            f"amdsmi cannot be loaded: {e} (is ROCm's libamd_smi.so installed?)"
        ) from e
    cols = amd_collectors_for(
        settings.node,
        smi,
        DirSysfs(settings.sysfs_root or "/sys"),
        KernelLogReader(settings.kmsg or "/dev/kmsg"),
        job_map_dir=settings.job_map_dir,
        pod_resources=KubeletPodResources(settings.kubelet_socket)
        if settings.kubelet_socket
        else None,
        storage=storage_prober(settings),
        step_dir=settings.step_dir,
        kmsg_backlog=settings.kmsg_backlog,
    )
    return Assembly(cols)


def assemble(settings: ExporterSettings) -> Assembly:
    if settings.source == "amdsmi":
        return assemble_amd(settings)
    if settings.source != "nvml":
        return plugin_source(settings.source)(settings)
    nvml = _real_nvml()
    cols = collectors_for(
        settings.node,
        nvml,
        DirSysfs(settings.sysfs_root or "/sys"),
        KernelLogReader(settings.kmsg or "/dev/kmsg"),
        nvml_xid_events=True,
        job_map_dir=settings.job_map_dir,
        pod_resources=KubeletPodResources(settings.kubelet_socket)
        if settings.kubelet_socket
        else None,
        dcgm=DcgmProfiling(settings.dcgm_hostengine, load_bindings())
        if settings.dcgm_hostengine
        else None,
        kmsg_state=settings.kmsg_state,
        kmsg_backlog=settings.kmsg_backlog,
        storage=storage_prober(settings),
        step_dir=settings.step_dir,
        # always: without systemctl the collector says so (exporter_field_unavailable)
        fabric_units=SystemctlUnits(),
        imex=ImexCtlRunner(),
        process_owners=ProcPodOwners(settings.proc_root, settings.pod_log_root)
        if settings.gpu_processes
        else None,
        ethtool=IoctlEthtool(),
    )
    return Assembly(cols)
