"""Per-instance series of partitioned GPUs (MIG) into the window's ``(T, nodes, gpus, slots)``
array and ``Window.instances``; pure, shared by the embedded scraper and the Prometheus source.

Sits in the analyzer's source layer, after the series are read: each row is one GPU instance's
activity (``gpuwarden_gpu_mig_graphics_engine_active_ratio{node,gpu,gpu_instance,profile}``);
a GPU's instances take the slots in the order of their GPU instance ids. The workload an
instance serves comes from the pod the exporter attributes to it
(``gpuwarden_gpu_kubernetes_pod_info{gpu_instance}``), named by its controller: a Deployment's
pod ``<name>-<pod-template-hash>-<suffix>`` and a StatefulSet's ``<name>-<ordinal>`` serve
``<name>`` (Kubernetes names them so: the ReplicaSet controller appends the pod template hash,
the pod's generated name five characters of the same alphabet). Unknown: "".
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping

import numpy as np

from analyzer.window import InstanceInfo

MIN_SLOTS = 8  # a CPX MI300X has 8 partitions, an A100/H100 at most 7 MIG instances
# k8s.io/apimachinery rand.SafeEncodeString's alphabet (no vowels, no 0/1/3): pod name suffixes
_SAFE = "[bcdfghjklmnpqrstvwxz2456789]"
_DEPLOYMENT = re.compile(rf"^(.+)-{_SAFE}{{6,10}}-{_SAFE}{{5}}$")
_STATEFUL = re.compile(r"^(.+)-\d+$")

Row = tuple[int, int, str, str, np.ndarray]  # node index, gpu, gpu instance, profile, (T,)


def workload(namespace: str, pod: str) -> str:
    """The workload a pod belongs to: its Deployment's or StatefulSet's name, else the pod."""
    m = _DEPLOYMENT.match(pod) or _STATEFUL.match(pod)
    return f"{namespace}/{m[1] if m else pod}" if pod else ""


def place(rows: Iterable[Row], pods: Mapping[tuple[int, int, str], str], T: int, N: int,
          G: int) -> tuple[np.ndarray, dict[tuple[int, int, int], InstanceInfo]]:  # fmt: skip
    """The ``(T, N, G, slots)`` array and each slot's instance; ``pods``: (node, gpu, gpu
    instance) -> the workload it serves."""
    per_gpu: dict[tuple[int, int], dict[str, Row]] = defaultdict(dict)
    for r in rows:  # one row per instance (a duplicate, e.g. an HA pair's, counts once)
        if 0 <= r[0] < N and 0 <= r[1] < G and r[2].isdigit():
            per_gpu[(r[0], r[1])][r[2]] = r
    slots = max([MIN_SLOTS, *(len(v) for v in per_gpu.values())])
    out = np.full((T, N, G, slots), np.nan)
    infos: dict[tuple[int, int, int], InstanceInfo] = {}
    for (n, g), found in per_gpu.items():
        ordered = sorted(found.values(), key=lambda r: int(r[2]))
        for s, (_, _, gi, profile, values) in enumerate(ordered):
            out[:, n, g, s] = values
            infos[(n, g, s)] = InstanceInfo(gi, profile, pods.get((n, g, gi), ""))
    return out, infos
