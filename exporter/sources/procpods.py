"""Which Kubernetes pod and container a host process belongs to, from files on the node.

Sits at the exporter's edge, under :class:`exporter.collectors.gpu_processes.GpuProcessesCollector`,
which asks it about the pids NVML says hold a context on a GPU. Nothing here talks to the API
server or the kubelet: three node-local facts join a pid to its pod.

1. ``/proc/<pid>/cgroup`` names the process's cgroup. The kubelet puts every container in
   ``kubepods``: with the systemd driver ``.../kubepods-<qos>-pod<uid_with_underscores>.slice/
   cri-containerd-<id>.scope`` (``crio-<id>.scope``, ``docker-<id>.scope``), with cgroupfs
   ``/kubepods/<qos>/pod<uid>/<id>``. The pod UID and the 64-hex container id are read
   wherever they stand in the path (seen from a private cgroup namespace it starts ``/..``).
   A process outside ``kubepods`` (a host process, an MPS server started outside a pod) is in
   no pod: not an error.
2. ``/var/log/containers/<pod>_<namespace>_<container>-<id>.log``: the kubelet's symlink per
   container names pod, namespace and container by container id (pod names, namespaces and
   container names cannot contain ``_``; the id is the last 64 hex digits).
3. ``/var/log/pods/<namespace>_<pod>_<uid>/``: the kubelet's directory per pod, for a
   container whose symlink is not there (yet): pod and namespace, container unknown.

The exporter's DaemonSet needs ``hostPID: true`` (NVML reports host pids, and only a process
in the host's pid namespace can read their ``/proc`` entries) and ``/var/log`` mounted
read-only; ``proc_root`` and ``log_root`` point at them.

Bad input never loses a process: one whose cgroup cannot be read, or whose pod the kubelet's
files do not name, comes back with ``problem`` set (the collector counts it and reports the
process unattributed).
"""

from __future__ import annotations

import os
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

POD_UID = re.compile(
    r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})"
)
CONTAINER_ID = re.compile(r"(?:^|[-/])([0-9a-f]{64})(?:\.scope)?$")
CONTAINER_LOG = re.compile(r"([^_]+)_([^_]+)_(.+)-([0-9a-f]{64})\.log")
POD_LOG_DIR = re.compile(r"([^_]+)_([^_]+)_([0-9a-f-]{36})")
MAX_CGROUP_BYTES = 64 * 1024  # a cgroup file is a few lines; more is not a cgroup file


@dataclass(frozen=True)
class Owner:
    """Who a process belongs to. All empty: a process in no pod. ``problem``: why its pod
    could not be told (``process_cgroup``: unreadable cgroup file; ``process_pod_unknown``:
    a kubepods cgroup no kubelet file names)."""

    namespace: str = ""
    pod: str = ""
    container: str = ""
    problem: str = ""


class ProcessOwners(Protocol):
    """pid -> its pod, for the pids asked about (every pid asked gets an answer)."""

    def owners(self, pids: Collection[int]) -> dict[int, Owner]: ...


@dataclass(frozen=True)
class CgroupRef:
    pod_uid: str  # with dashes
    container_id: str  # "" when the path ends above the container (the pod's own cgroup)


def parse_cgroup(text: str) -> CgroupRef | None:
    """The pod UID and container id in a ``/proc/<pid>/cgroup`` file, or None (no pod)."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        if "kubepods" not in path:
            continue
        uid = POD_UID.search(path)
        if uid is None:
            continue
        container = CONTAINER_ID.search(path.rstrip("/"))
        return CgroupRef(uid[1].replace("_", "-"), container[1] if container else "")
    return None


class ProcPodOwners:
    """The real one: ``/proc`` and the kubelet's log directories under injectable roots."""

    def __init__(self, proc_root: str = "/proc", log_root: str = "/var/log") -> None:
        self.proc_root = proc_root
        self.log_root = log_root
        self._containers: dict[str, Owner] = {}
        self._pods: dict[str, Owner] = {}

    def owners(self, pids: Collection[int]) -> dict[int, Owner]:
        refs: dict[int, CgroupRef | Owner | None] = {pid: self._cgroup(pid) for pid in pids}
        wanted = [r for r in refs.values() if isinstance(r, CgroupRef)]
        if any(self._stale(r) for r in wanted):  # new containers since the last listing
            self._relist()
        out: dict[int, Owner] = {}
        for pid, ref in refs.items():
            if ref is None:
                out[pid] = Owner()
            elif isinstance(ref, Owner):
                out[pid] = ref
            else:
                out[pid] = self._lookup(ref) or Owner(problem="process_pod_unknown")
        return out

    def _cgroup(self, pid: int) -> CgroupRef | Owner | None:
        try:
            with open(os.path.join(self.proc_root, str(pid), "cgroup"), "rb") as f:
                raw = f.read(MAX_CGROUP_BYTES)
        except FileNotFoundError:  # exited since NVML listed it: no longer anyone's
            return None
        except OSError:
            return Owner(problem="process_cgroup")
        return parse_cgroup(raw.decode("utf-8", errors="replace"))

    def _stale(self, ref: CgroupRef) -> bool:
        if ref.container_id:
            return ref.container_id not in self._containers
        return ref.pod_uid not in self._pods

    def _lookup(self, ref: CgroupRef) -> Owner | None:
        return self._containers.get(ref.container_id) or self._pods.get(ref.pod_uid)

    def _relist(self) -> None:
        containers: dict[str, Owner] = {}
        for name in _listdir(os.path.join(self.log_root, "containers")):
            if (m := CONTAINER_LOG.fullmatch(name)) is not None:
                containers[m[4]] = Owner(m[2], m[1], m[3])
        pods: dict[str, Owner] = {}
        for name in _listdir(os.path.join(self.log_root, "pods")):
            if (m := POD_LOG_DIR.fullmatch(name)) is not None:
                pods[m[3]] = Owner(m[1], m[2])
        self._containers, self._pods = containers, pods


def _listdir(path: str) -> list[str]:
    try:
        return os.listdir(path)
    except OSError:  # not mounted: every kubepods process is then "process_pod_unknown"
        return []


class DictProcessOwners:
    """The fake: pid -> owner set directly (a pid not in the map is in no pod)."""

    def __init__(self, owners: dict[int, Owner] | None = None) -> None:
        self.map = dict(owners or {})

    def owners(self, pids: Collection[int]) -> dict[int, Owner]:
        return {pid: self.map.get(pid, Owner()) for pid in pids}
