"""Per-pod use of shared GPUs: NVML's process lists, joined to pods through each process.

Between NVML (:class:`exporter.sources.protocols.NvmlApi`), the node's process-to-pod facts
(:class:`exporter.sources.procpods.ProcessOwners`) and the exposition. Each cycle, per GPU:

- ``nvmlDeviceGetComputeRunningProcesses``: the pids with a context on it and the frame
  buffer each holds (MIG: per GPU instance) -> ``gpuwarden_gpu_pod_memory_used_bytes`` and
  ``gpuwarden_gpu_pod_processes``;
- ``nvmlDeviceGetProcessUtilization`` since the last sample seen: the share of SM time each
  pid's kernels took (the mean of its samples) -> ``gpuwarden_gpu_pod_sm_utilization_ratio``.

Both summed per (GPU instance, namespace, pod, container); the row with empty pod labels
(processes in no pod) is there for every GPU read, 0 when there are none. That is what time-slicing leaves
to tell the pods of one GPU apart (every device-level field is the whole GPU's). Under MPS the
clients' memory is theirs but the SM time is sampled on the MPS server's context, so it goes
to the server's pod (or to no pod). dcgm-exporter has no per-process series; these are
native only.

Failure policy: a GPU whose process list fails costs its own series (counted); a process
whose pod cannot be told is reported with empty pod labels and counted, so the per-pod sums
still add up to the GPU's; utilization unsupported (MIG mode, old GPUs) means no utilization
series, not zeros.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pynvml

from exporter.catalog import (
    GPU_POD_MEMORY_USED,
    GPU_POD_PROCESSES,
    GPU_POD_SM_UTILIZATION,
    Sample,
)
from exporter.collectors.base import ReadErrors
from exporter.collectors.gpu_reader import ABSENT
from exporter.sources.procpods import Owner, ProcessOwners
from exporter.sources.protocols import GpuIdentity, GpuLookup, NvmlApi

NOT_MIG = 0xFFFFFFFF  # NVML's gpuInstanceId of a process on a whole GPU
_Key = tuple[str, str, str, str]  # gpu_instance, namespace, pod, container


class GpuProcessesCollector:
    name = "gpu_processes"

    def __init__(
        self,
        nvml: NvmlApi,
        gpus: GpuLookup,
        node: str,
        owners: ProcessOwners,
        *,
        lookback: float = 60.0,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._nvml = nvml
        self._gpus = gpus
        self._node = node
        self._owners = owners
        self._lookback = lookback  # first cycle: utilization samples at most this old
        self._wall = wall
        self._last_sample: dict[str, int] = {}  # GPU UUID -> newest sample timestamp seen (us)
        self.read_errors = ReadErrors()

    def collect(self) -> list[Sample]:
        out: list[Sample] = []
        for ident in sorted(self._gpus().values(), key=lambda g: (len(g.index), g.index)):
            if ident.uuid:
                out += self._gpu(ident)
        return out

    def _gpu(self, ident: GpuIdentity) -> list[Sample]:
        try:
            handle = self._nvml.nvmlDeviceGetHandleByIndex(int(ident.index))
            procs = list(self._nvml.nvmlDeviceGetComputeRunningProcesses(handle))
        except pynvml.NVMLError as e:  # lost, or no process list: this GPU's series only
            if e.value not in ABSENT and not isinstance(e, pynvml.NVMLError_GpuIsLost):
                self.read_errors.add("processes")
            return []
        util = self._utilization(ident.uuid, handle)
        owners = self._owners.owners({p.pid for p in procs} | set(util or {}))
        for owner in owners.values():
            if owner.problem:
                self.read_errors.add(owner.problem)
        memory: dict[_Key, float] = defaultdict(float)
        count: dict[_Key, int] = defaultdict(int)
        count[_key("", Owner())] = 0  # the unattributed row, always: this GPU was read
        memory[_key("", Owner())] = 0.0
        where: dict[int, str] = {}  # pid -> its GPU instance (utilization samples lack it)
        for p in procs:
            gi = "" if p.gpuInstanceId in (NOT_MIG, None) else str(p.gpuInstanceId)
            where[p.pid] = gi
            key = _key(gi, owners[p.pid])
            count[key] += 1
            memory[key] += float(p.usedGpuMemory or 0)
        busy: dict[_Key, float] = defaultdict(float)
        for pid, ratio in (util or {}).items():
            busy[_key(where.get(pid, ""), owners[pid])] += ratio
        lv = (self._node, ident.index, ident.uuid)
        out = [GPU_POD_PROCESSES.make(n, *lv, *k) for k, n in count.items()]
        out += [GPU_POD_MEMORY_USED.make(v, *lv, *k) for k, v in memory.items()]
        if util is not None:  # no samples since the last cycle: the pods' kernels did not run
            out += [GPU_POD_SM_UTILIZATION.make(busy.get(k, 0.0), *lv, *k) for k in count]
            out += [
                GPU_POD_SM_UTILIZATION.make(v, *lv, *k) for k, v in busy.items() if k not in count
            ]
        return out

    def _utilization(self, uuid: str, handle: Any) -> dict[int, float] | None:
        """pid -> mean SM busy fraction of its samples since the last call; None: unknown."""
        since = self._last_sample.get(uuid) or int((self._wall() - self._lookback) * 1e6)
        try:
            samples = list(self._nvml.nvmlDeviceGetProcessUtilization(handle, since))
        except pynvml.NVMLError as e:
            if e.value == pynvml.NVML_ERROR_NOT_FOUND:  # no sample since: nothing ran
                return {}
            if e.value not in ABSENT:
                self.read_errors.add("process_utilization")
            return None
        sums: dict[int, list[float]] = defaultdict(list)
        for s in samples:
            if s.timeStamp > since:  # a sample at exactly ``since`` was counted last cycle
                sums[s.pid].append(min(max(float(s.smUtil), 0.0), 100.0) / 100.0)
        if samples:
            self._last_sample[uuid] = max(since, *(s.timeStamp for s in samples))
        return {pid: sum(v) / len(v) for pid, v in sums.items()}


def _key(gi: str, owner: Owner) -> _Key:
    return (gi, owner.namespace, owner.pod, owner.container)
