"""Kubernetes collector: kubelet pod-resources -> ``gpuwarden_gpu_kubernetes_pod_info``.

Between :class:`exporter.sources.kubelet.PodResources` and the exposition. One series per
allocated GPU or MIG device names its pod; dashboards and rules join it in PromQL, so pod
labels do not multiply every series (``--kubernetes-pod-labels`` adds them to the dcgm series
too, as dcgm-exporter's ``--kubernetes`` does).

The kubelet call runs on a worker thread with a deadline. A cycle waits at most ``wait`` seconds
for it; if the kubelet is slower, the cycle exports the last known allocations and
``gpuwarden_exporter_kubelet_up 0``, and the next cycle picks the answer up. A scrape never
waits at all (it serves the last snapshot).
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable, Mapping

from exporter.catalog import GPU_POD_INFO, KUBELET_UP, Sample
from exporter.collectors.base import ReadErrors
from exporter.sources.kubelet import PodDevice, PodResources
from exporter.sources.protocols import GpuLookup

MigLookup = Callable[[], Mapping[str, tuple[str, str, str]]]  # MIG UUID -> (gpu, uuid, GI)


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
        return [*self._samples(), KUBELET_UP.make(1 if self._up else 0, self._node)]

    def _samples(self) -> list[Sample]:
        by_uuid = {g.uuid: g for g in self._gpus().values()}
        by_index = {g.index: g for g in by_uuid.values()}
        migs = self._mig()
        out = []
        for d in self._devices:
            gpu, uuid, gi = "", d.device_id, ""
            if d.device_id in migs:
                gpu, uuid, gi = migs[d.device_id]
            elif (ident := by_uuid.get(d.device_id) or by_index.get(d.device_id)) is not None:
                gpu, uuid = ident.index, ident.uuid
            labels = (self._node, gpu, uuid, gi, d.resource, d.namespace, d.pod, d.container)
            out.append(GPU_POD_INFO.make(1, *labels))
        return out

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
