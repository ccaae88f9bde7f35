"""dcgm-exporter's pod labels on the drop-in's series (``--kubernetes-pod-labels``), and its
copies per shared GPU (``--kubernetes-virtual-gpus``).

Part of the exposition (:func:`exporter.exposition.render_dcgm` asks :func:`pod_rows` for the
label sets and values of each dcgm series). From ``gpuwarden_gpu_kubernetes_pod_info`` every
allocated GPU or MIG device gets ``pod``, ``namespace``, ``container`` (and for a DRA claim's
GPU dcgm-exporter's ``dra_*`` labels). A shared GPU has several pods:

- by default the first container's labels, as dcgm-exporter without virtual GPUs;
- with virtual GPUs, as dcgm-exporter ``--kubernetes-virtual-gpus`` does, one copy of each
  series per sharing pod with ``vgpu`` naming the device plugin's replica. The copies of
  ``DCGM_FI_DEV_GPU_UTIL`` and ``DCGM_FI_DEV_FB_USED`` carry what the pod itself used (its
  processes' SM time and memory, from ``--gpu-processes``; 0 for a pod with no process on
  the GPU); every other field is the whole GPU's, in every copy. Without ``--gpu-processes``
  every copy carries the GPU's value.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from exporter.catalog import (
    DCGM_DRA_LABELS,
    DCGM_POD_LABELS,
    DCGM_VGPU_LABEL,
    GPU_MEMORY_USED,
    GPU_POD_INFO,
    GPU_POD_MEMORY_USED,
    GPU_POD_SM_UTILIZATION,
    GPU_UTILIZATION,
    MetricDef,
    Sample,
)

Labels = tuple[tuple[str, str], ...]
Device = tuple[str, str]  # GPU index, GPU instance ("" for a whole GPU)

# dcgm field -> the per-pod series that splits it between the pods of a shared GPU, and the
# scale from the catalogue's unit to dcgm's (the same as the GPU series')
PER_POD_FIELDS: dict[str, tuple[MetricDef, float]] = {
    GPU_UTILIZATION.dcgm[0].name: (GPU_POD_SM_UTILIZATION, GPU_UTILIZATION.dcgm[0].scale),
    GPU_MEMORY_USED.dcgm[0].name: (GPU_POD_MEMORY_USED, GPU_MEMORY_USED.dcgm[0].scale),
}


@dataclass(frozen=True)
class PodEntry:
    labels: Labels  # dcgm-exporter's pod (and DRA) labels
    pod: tuple[str, str]  # namespace, pod
    replica: str


@dataclass
class DcgmPods:
    """Who holds each GPU, and what each pod used of it, from one cycle's samples."""

    devices: dict[Device, list[PodEntry]]
    used: dict[str, dict[tuple[str, str, str, str], float]]  # field -> (gpu, gi, ns, pod)
    virtual: bool = False

    def rows(self, field: str, key: Device, value: float) -> list[tuple[Labels, float]]:
        """(pod labels, value) of one dcgm series of this GPU or MIG device."""
        entries = self.devices.get(key, [])
        if not entries:
            return [((), value)]
        if not self.virtual or not any(e.replica for e in entries):
            return [(entries[0].labels, value)]
        used = self.used.get(field, {})
        measured = any(k[:2] == key for k in used)  # the processes were read on this GPU
        out, seen = [], set()
        for e in entries:
            own = used.get((*key, *e.pod), 0.0) if measured else value
            if measured and e.pod in seen:  # a pod on two replicas: its use counted once
                own = 0.0
            seen.add(e.pod)
            out.append(((*e.labels, (DCGM_VGPU_LABEL, e.replica)), own))
        return out


def dcgm_pods(grouped: dict[MetricDef, list[Sample]], virtual: bool = False) -> DcgmPods:
    devices: dict[Device, list[PodEntry]] = defaultdict(list)
    for s in grouped.get(GPU_POD_INFO, []):
        lab = s.labels
        pod = (lab["pod"], lab["namespace"], lab["container"])
        labels = tuple(zip(DCGM_POD_LABELS, pod, strict=True))
        if lab["claim"]:  # a claim is always in its pod's namespace
            dra = (lab["claim"], lab["namespace"], lab["dra_device"], lab["resource"],
                   lab["dra_pool"])  # fmt: skip
            labels += tuple(zip(DCGM_DRA_LABELS, dra, strict=True))
        entry = PodEntry(labels, (lab["namespace"], lab["pod"]), lab["replica"])
        devices[(lab["gpu"], lab["gpu_instance"])].append(entry)
    used: dict[str, dict[tuple[str, str, str, str], float]] = {}
    for field, (metric, scale) in PER_POD_FIELDS.items():
        per_pod: dict[tuple[str, str, str, str], float] = defaultdict(float)
        for s in grouped.get(metric, []):
            lab = s.labels
            per_pod[(lab["gpu"], lab["gpu_instance"], lab["namespace"], lab["pod"])] += (
                s.value * scale
            )
        used[field] = dict(per_pod)
    return DcgmPods(dict(devices), used, virtual)
