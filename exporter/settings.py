"""The exporter's settings: one frozen dataclass, validated before anything starts.

Flags > environment (``GPUWARDEN_<FIELD>``) > YAML file (``--config``), see
:mod:`common.settings`. A bad value stops the start with a one-line reason.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

from exporter.catalog import HOSTNAME_LABELS
from exporter.catalog_dcgm import generation
from exporter.sources.amdsmi_api import amdsmi_installed

# auto: amdsmi where AMD's amdsmi module is installed (an AMD node), nvml otherwise
SOURCES = ("auto", "nvml", "amdsmi", "simulated")
COMPAT = ("dcgm",)


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[::1]:PORT`` for IPv6) -> (host, port), or ValueError saying why."""
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"--listen: {value!r} is not HOST:PORT")
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass(frozen=True)
class ExporterSettings:
    listen: str = "0.0.0.0:9835"
    node: str = ""
    source: str = "auto"  # resolved at start-up: settings.source is never "auto"
    sysfs_root: str | None = None  # None: /sys (nvml) or the simulated tree (simulated)
    kmsg: str | None = None  # None: /dev/kmsg (nvml) or the simulated log (simulated)
    kmsg_state: str | None = None  # XID counts + log position kept across restarts (issue 17)
    kmsg_backlog: float = 600.0  # without a usable state: skip kmsg records older than this
    compat: str | None = None
    hostname_label: str = "Hostname"  # dcgm compat: Hostname (dcgm-exporter 3.x) or hostname
    kubelet_socket: str | None = None  # kubelet pod-resources socket; None: no pod attribution
    kubernetes_pod_labels: bool = False
    kubernetes_virtual_gpus: bool = False  # dcgm compat: a copy per pod of a shared GPU
    # per-pod memory and SM time of shared GPUs from NVML's process lists (needs hostPID and
    # the node's /var/log: exporter.sources.procpods)
    gpu_processes: bool = False
    proc_root: str = "/proc"  # the host's /proc
    pod_log_root: str = "/var/log"  # holds the kubelet's containers/ and pods/
    dcgm_hostengine: str | None = (
        None  # HOST:PORT of nv-hostengine, for pre-Hopper profiling  # dcgm compat: pod/namespace/container on GPU series
    )
    web_config: str | None = None
    job_map_dir: str | None = None
    step_dir: str | None = None  # training step times (remediation.checkpoint.publish_step)
    # 15 s: Prometheus' default scrape interval. A cycle more often than scrapes is work no
    # one reads; the scrape still never waits on collection.
    interval: float = 15.0
    stale_after: float = 0.0  # 0: 3 intervals (at least 15 s) without a good cycle
    seed: int = 0  # simulated source only
    storage_mounts: tuple[str, ...] = ()  # checkpoint mounts to probe (stat, write, fsync, read)
    storage_probe_timeout: float = 10.0
    storage_probe_interval: float = 30.0

    def __post_init__(self) -> None:
        parse_listen(self.listen)
        if not self.node:
            object.__setattr__(self, "node", socket.gethostname().split(".")[0])
        if self.source not in SOURCES:
            raise ValueError(f"--source: {self.source!r} is not one of {', '.join(SOURCES)}")
        if self.source == "auto":
            object.__setattr__(self, "source", "amdsmi" if amdsmi_installed() else "nvml")
        elif self.source == "amdsmi" and not amdsmi_installed():
            raise ValueError(
                "--source amdsmi: AMD's amdsmi Python module is not installed (pip install"
                " amdsmi, matching the node's ROCm; it loads ROCm's libamd_smi.so)"
            )
        kind, _, version = (self.compat or "").partition(":")
        if kind not in ("", *COMPAT) or (version and kind != "dcgm"):
            raise ValueError(f"--compat: {self.compat!r} is not one of {', '.join(COMPAT)}"
                             " (dcgm:VERSION picks dcgm-exporter's naming generation)")  # fmt: skip
        try:
            generation(version)
        except ValueError as e:
            raise ValueError(f"--compat: {e}") from None
        if self.hostname_label not in HOSTNAME_LABELS:
            raise ValueError(
                f"--hostname-label: {self.hostname_label!r} is not one of "
                + ", ".join(HOSTNAME_LABELS)
            )
        if not 0.05 <= self.interval <= 3600:
            raise ValueError(f"--interval: {self.interval} s is outside 0.05..3600")
        if self.kmsg_state and not os.path.isdir(os.path.dirname(os.path.abspath(self.kmsg_state))):
            raise ValueError(f"--kmsg-state: the directory of {self.kmsg_state} does not exist")
        if self.kmsg_backlog < 0:
            raise ValueError(f"--kmsg-backlog: {self.kmsg_backlog} must be >= 0")
        for mount in self.storage_mounts:
            if not mount.startswith("/"):
                raise ValueError(f"--storage-mounts: {mount!r} is not an absolute path")
        if not 0 < self.storage_probe_timeout < self.storage_probe_interval:
            raise ValueError(
                f"--storage-probe-timeout: {self.storage_probe_timeout} s must be > 0 and below"
                f" --storage-probe-interval ({self.storage_probe_interval} s)"
            )
        if self.stale_after < 0:
            raise ValueError(f"--stale-after: {self.stale_after} must be >= 0")

    @property
    def stale_seconds(self) -> float:
        return self.stale_after or max(3 * self.interval, 15.0)

    @property
    def dcgm(self) -> bool:
        return (self.compat or "").partition(":")[0] == "dcgm"

    @property
    def dcgm_generation(self) -> str:
        """dcgm-exporter's naming generation: ``dcgm`` is 4.8's, ``dcgm:4.9``/``dcgm:4.10``
        (or any ``dcgm:VERSION``) the generation of that release (exporter.catalog_dcgm)."""
        return generation((self.compat or "").partition(":")[2])
