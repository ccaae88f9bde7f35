"""Partitioned GPUs in the fleet: NVIDIA MIG instances and AMD compute partitions, and the
inference-style serving that runs on them (one replica pod per instance).

Sits beside :mod:`simulator.jobs`: a partitioned node runs no training job (the fleet blocks it
from the training scheduler); each of its GPU instances serves one replica of a deployment
chosen by the instance's profile, and its activity follows that deployment's load. The fleet
writes the per-instance activity into the frame as ``(nodes, gpus, MAX_INSTANCES)`` arrays
(NaN where a GPU has no such instance), and the node view copies it into the NVML fake's MIG
devices so the exporter's own MIG collector reads it.

Profiles and counts are NVIDIA's (MIG user guide, "Supported MIG Profiles", A100 80GB and
H100 80GB: https://docs.nvidia.com/datacenter/tesla/mig-user-guide/) and AMD's compute
partition modes of the MI300X (SPX 1, DPX 2, QPX 4, CPX 8 partitions per GPU: AMD Instinct
MI300X GPU partitioning overview,
https://instinct.docs.amd.com/projects/amdgpu-docs/en/latest/gpu-partitioning/mi300x/overview.html).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MAX_INSTANCES = 8  # a CPX MI300X has 8 partitions; an A100/H100 at most 7 MIG instances
# MIG profile -> (compute slices of 7, memory slices of 8, most instances on one GPU)
MIG_PROFILES: Mapping[str, tuple[int, int, int]] = {
    "1g.10gb": (1, 1, 7), "1g.20gb": (1, 2, 4), "2g.20gb": (2, 2, 3),
    "3g.40gb": (3, 4, 2), "4g.40gb": (4, 4, 1), "7g.80gb": (7, 8, 1),
}  # fmt: skip
MIG_SKUS = frozenset({"a100", "h100", "h200"})
# AMD compute partition mode -> partitions per MI300X (each an XCD share of 8)
AMD_MODES: Mapping[str, int] = {"spx": 1, "dpx": 2, "qpx": 4, "cpx": 8}
AMD_SKUS = frozenset({"mi300x"})
# GPU instance ids NVML gives each profile's instances on an empty GPU (the first placements)
_GI_IDS: Mapping[str, tuple[int, ...]] = {
    "1g.10gb": (7, 8, 9, 11, 12, 13, 14), "1g.20gb": (3, 4, 5, 6), "2g.20gb": (3, 4, 5),
    "3g.40gb": (1, 2), "4g.40gb": (1,), "7g.80gb": (0,),
}  # fmt: skip


class PartitionError(ValueError):
    """A layout the GPU model cannot have (the message says which part and why)."""


@dataclass(frozen=True)
class GpuPartition:
    """One GPU's partitioning: ``count`` instances of ``profile`` (a MIG profile or an AMD mode)."""

    profile: str
    count: int

    @property
    def amd(self) -> bool:
        return self.profile in AMD_MODES

    @property
    def compute_share(self) -> float:
        """Each instance's share of the GPU's compute."""
        return 1.0 / self.count if self.amd else MIG_PROFILES[self.profile][0] / 7.0

    def instance_ids(self) -> tuple[int, ...]:
        """The instances' ids: MIG GPU instance ids (GPU_I_ID), AMD partition ids."""
        return tuple(range(self.count)) if self.amd else _GI_IDS[self.profile][: self.count]


Layout = tuple[GpuPartition | None, ...]  # per GPU of a node; None: a whole GPU


def parse_gpu(spec: str, sku: str) -> GpuPartition:
    """``1g.10gb*7``, ``3g.40gb*2``, ``7g.80gb`` (one), ``cpx``, ``dpx`` (every partition)."""
    profile, _, n = spec.strip().partition("*")
    if profile in AMD_MODES:
        if sku not in AMD_SKUS:
            raise PartitionError(f"{profile}: an AMD compute partition mode, {sku} is not AMD")
        count = AMD_MODES[profile]
        if n and int(n) != count:
            raise PartitionError(f"{profile} has {count} partitions per GPU, not {n}")
        return GpuPartition(profile, count)
    if profile not in MIG_PROFILES:
        known = ", ".join([*MIG_PROFILES, *AMD_MODES])
        raise PartitionError(f"unknown partition profile {profile!r} (known: {known})")
    if sku not in MIG_SKUS:
        raise PartitionError(f"{profile}: MIG needs an A100/H100/H200, {sku} has no MIG")
    if n and not n.isdigit():
        raise PartitionError(f"{spec!r}: the count after '*' must be a whole number")
    count, most = int(n or 1), MIG_PROFILES[profile][2]
    if not 1 <= count <= most:
        raise PartitionError(f"{profile}: 1 to {most} instances per GPU, not {count}")
    return GpuPartition(profile, count)


def parse_layout(spec: str, sku: str, gpus: int = 8) -> Layout:
    """One spec for every GPU of the node (``1g.10gb*7``), or one per GPU separated by ``,``
    (``-`` for a whole GPU): ``1g.10gb*7,1g.10gb*7,-,-,7g.80gb,7g.80gb,3g.40gb*2,-``."""
    parts = [p.strip() for p in spec.split(",")]
    if len(parts) == 1:
        parts *= gpus
    if len(parts) != gpus:
        raise PartitionError(f"{spec!r}: one spec for all GPUs or {gpus}, not {len(parts)}")
    return tuple(None if p in ("-", "") else parse_gpu(p, sku) for p in parts)


def deployment(profile: str) -> str:
    """The serving deployment an instance of ``profile`` runs (one per profile)."""
    return "infer-" + profile.replace(".", "-")


@dataclass(frozen=True)
class Instance:
    """One GPU instance (MIG) or compute partition (AMD) and the replica pod it serves."""

    node: int
    gpu: int
    slot: int  # its index among the GPU's instances (the frame's last axis)
    instance_id: int  # MIG GPU instance id (GPU_I_ID) or AMD partition id
    profile: str
    pod: str

    @property
    def job(self) -> str:
        return deployment(self.profile)


def instances(node: int, name: str, layout: Layout) -> list[Instance]:
    out = []
    for g, part in enumerate(layout):
        if part is None:
            continue
        for slot, iid in enumerate(part.instance_ids()):
            pod = f"{deployment(part.profile)}-{name}-g{g}-{iid}"
            out.append(Instance(node, g, slot, iid, part.profile, pod))
    return out


def load(profile: str, t: float) -> float:
    """A deployment's load at virtual time ``t``: a daily cycle around its own level."""
    h = sum(map(ord, profile))  # a fixed phase and level per deployment
    level = 0.55 + 0.25 * ((h % 7) / 6)
    return level * (0.8 + 0.2 * math.sin(2 * math.pi * t / 86400.0 + h))


def activity(
    layouts: Mapping[int, Layout],
    n_nodes: int,
    t: float,
    rng: np.random.Generator,
    speed: np.ndarray,
) -> np.ndarray:
    """Per-instance engine activity ``(nodes, gpus, MAX_INSTANCES)``, NaN where no instance;
    ``speed`` (same shape): 1 nominal, lower where a fault stalls the instance."""
    out = np.full((n_nodes, 8, MAX_INSTANCES), np.nan)
    for n, layout in layouts.items():
        for g, part in enumerate(layout):
            if part is None:
                continue
            k = part.count
            noise = rng.normal(0.0, 0.02, k)
            out[n, g, :k] = np.clip((load(part.profile, t) + noise) * speed[n, g, :k], 0.0, 1.0)
    return out


def gpu_utilization(layout: Sequence[GpuPartition | None], act: np.ndarray) -> np.ndarray:
    """What the parent GPU's utilization reads: its instances' activity by compute share."""
    util = np.full(len(layout), np.nan)
    for g, part in enumerate(layout):
        if part is not None:
            util[g] = float(np.nansum(act[g, : part.count]) * part.compute_share)
    return util
