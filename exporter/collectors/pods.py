"""Kubernetes collector: kubelet pod-resources -> ``gpuwarden_gpu_kubernetes_pod_info``.

Between :class:`exporter.sources.kubelet.PodResources` and the exposition. One series per
allocated GPU or MIG device names its pod; dashboards and rules join it in PromQL, so pod
labels do not multiply every series (``--kubernetes-pod-labels`` adds them to the dcgm series
too, as dcgm-exporter's ``--kubernetes`` does).

The kubelet call runs on a worker thread with a deadline. A cycle waits at most ``wait`` seconds
for it; if the kubelet is slower, the cycle exports the last known allocations and
``gpuwarden_exporter_kubelet_up 0``, and the next cycle picks the answer up. A scrape never
waits at all (it serves the last snapshot).

How a device id names its GPU: a GPU UUID, an NVML index, a MIG UUID (device plugin); a
shared replica ``<id>::<n>`` (NVIDIA's plugin with time-slicing or MPS) or ``nvidia<minor>``
/ ``nvidia<minor>/vgpu<n>`` (GKE) by the id before the suffix; a DRA device ``gpu-<minor>``
(NVIDIA's DRA driver) by its device minor number, and ``gpu-<minor>-mig-...`` by its parent
GPU (the placement in the name is not the GPU instance id, so ``gpu_instance`` stays empty).
A device no GPU answers to is still exported (``gpu`` empty, the device named) and counted in
``read_errors`` (``device_unmapped``, ``dra_device_unmapped``).
"""

from __future__ import annotations

import concurrent.futures
import re
from collections.abc import Callable, Mapping

from exporter.catalog import GPU_POD_INFO, KUBELET_UP, Sample
from exporter.collectors.base import ReadErrors
from exporter.sources.kubelet import PodDevice, PodResources
from exporter.sources.protocols import GpuIdentity, GpuLookup

MigLookup = Callable[[], Mapping[str, tuple[str, str, str]]]  # MIG UUID -> (gpu, uuid, GI)

DRA_GPU = re.compile(r"gpu-(\d+)(?:-mig-\d+-\d+-\d+)?")  # NVIDIA DRA driver device names
GKE_GPU = re.compile(r"nvidia(\d+)(?:/vgpu(\d+))?")  # GKE's device plugin, shared or not
REPLICA = "::"  # NVIDIA's device plugin: <id>::<replica> for time-sliced / MPS replicas


class PodsCollector:
    name = "kubernetes"

    def __init__(
        self,
        source: PodResources,
        gpus: GpuLookup,
        node: str,
        *,
        mig: MigLookup | None = None,
        wait: float = 0.25,
    ) -> None:
        self._source = source
        self._gpus = gpus
        self._mig = mig or dict
        self._node = node
        self._wait = wait
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kubelet")
        self._pending: concurrent.futures.Future[list[PodDevice]] | None = None
        self._devices: list[PodDevice] = []
        self._up = False
        self.read_errors = ReadErrors()

    def collect(self) -> list[Sample]:
        if self._pending is None:
            self._pending = self._pool.submit(self._source.list_devices)
        try:
            devices = self._pending.result(timeout=self._wait)
        except concurrent.futures.TimeoutError:  # slow kubelet: keep the call, not the cycle
            self._up = False
            self.read_errors.add("kubelet_slow")
        except Exception:  # absent socket, RPC error: the last allocations stay
            self._pending, self._up = None, False
            self.read_errors.add("kubelet_list")
        else:
            self._pending, self._devices, self._up = None, devices, True
            return [*self._samples(count=True), KUBELET_UP.make(1, self._node)]
        return [*self._samples(), KUBELET_UP.make(0, self._node)]

    def _samples(self, count: bool = False) -> list[Sample]:
        """The allocations known last; ``count``: a fresh kubelet answer, whose unmapped
        devices are counted once (not again each cycle that re-exports them)."""
        lookup = _Lookup(list(self._gpus().values()), self._mig())
        out = []
        for d in self._devices:
            gpu, uuid, gi, replica = lookup.place(d)
            if not gpu and count:
                self.read_errors.add("dra_device_unmapped" if d.dra else "device_unmapped")
            labels = (self._node, gpu, uuid, gi, d.resource, d.namespace, d.pod, d.container)
            dra = (d.claim, d.pool, d.device_id if d.dra else "")
            out.append(GPU_POD_INFO.make(1, *labels, *dra, replica))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)


class _Lookup:
    """This node's GPUs and MIG devices by every name a device id may use."""

    def __init__(self, gpus: list[GpuIdentity], migs: Mapping[str, tuple[str, str, str]]) -> None:
        self.by_uuid = {g.uuid: g for g in gpus if g.uuid}
        self.by_index = {g.index: g for g in gpus}
        self.by_minor = {g.minor: g for g in gpus if g.minor}
        self.migs = migs

    def place(self, d: PodDevice) -> tuple[str, str, str, str]:
        """(gpu, uuid, gpu_instance, replica) of a device; gpu "" when no GPU answers to it
        (uuid then keeps a device plugin's id)."""
        if d.dra:
            m = DRA_GPU.fullmatch(d.device_id)
            return self._of(self.by_minor.get(m[1]) if m else None, "", "")
        device_id, _, replica = d.device_id.partition(REPLICA)
        if device_id in self.migs:
            gpu, uuid, gi = self.migs[device_id]
            return gpu, uuid, gi, replica
        if (m := GKE_GPU.fullmatch(device_id)) is not None:
            return self._of(self.by_minor.get(m[1]), d.device_id, m[2] or "")
        ident = self.by_uuid.get(device_id) or self.by_index.get(device_id)
        return self._of(ident, d.device_id, replica)

    @staticmethod
    def _of(ident: GpuIdentity | None, device_id: str, replica: str) -> tuple[str, str, str, str]:
        if ident is None:
            return "", device_id, "", replica
        return ident.index, ident.uuid, "", replica
