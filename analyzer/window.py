"""The analysis window: dense arrays of recent history, the one input every detector reads.

Sits in the middle of the analyzer's data flow: a :class:`~analyzer.sources.SeriesSource`
(Prometheus ``query_range``, the embedded scraper, or the simulator's virtual-time frames)
builds a :class:`Window`; detectors are pure functions of it. Arrays follow the fleet
``Frame`` contract (docs/contracts.md) with a leading time axis:

- per GPU ``(T, nodes, gpus)``; per NVLink ``(T, nodes, gpus, links)``; per IB port
  ``(T, nodes, ports)``; labelled families add the label as the last axis in catalogue
  order (ECC ``(T, nodes, gpus, 2, 2)``, throttle ``(T, nodes, gpus, reasons)``, NVLink
  errors ``(T, nodes, gpus, links, 4)``);
- IB counters by sysfs file name in ``ib_counters`` as ``(T, nodes, ports)``;
- per checkpoint mount ``(T, nodes, mounts)`` (storage probes; durations: fsync only);
- per GPU instance of a partitioned GPU ``(T, nodes, gpus, slots)``, the slot's instance
  (id, profile, workload) in ``instances``;
- a value the source did not deliver is NaN. Counters are raw (resets possible).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from analyzer.pools import Pool
from exporter import catalog

ECC_ERROR_TYPES = ("corrected", "uncorrected")
ECC_COUNTER_TYPES = ("volatile", "aggregate")
THROTTLE_REASONS = tuple(catalog.THROTTLE_REASONS)
REMAP_KINDS = ("correctable", "uncorrectable")
RAS_BLOCKS = catalog.RAS_BLOCKS
RAS_ERROR_TYPES = catalog.RAS_ERROR_TYPES


@dataclass(frozen=True, slots=True)
class XidEvent:
    """One XID occurrence (or a counter increase of ``count``) on one GPU at time ``t``."""

    t: float
    node: int
    gpu: int
    xid: int
    count: int = 1


@dataclass(frozen=True, slots=True)
class AfidEvent:
    """One AMD RAS event's AMD Field ID on one GPU at time ``t`` (``severity``: the CPER
    severity). ``last_only``: read from a last-event gauge (DME's ``gpu_afid_errors``), where
    a second event between two scrapes hides the first and a repeat of one list is invisible;
    False for a counter (nothing lost)."""

    t: float
    node: int
    gpu: int
    afid: int
    severity: str
    count: int = 1
    last_only: bool = False


@dataclass(frozen=True, slots=True)
class InstanceInfo:
    """One GPU instance (MIG) or compute partition (AMD) of a GPU: its id on the parent GPU
    (GPU_I_ID, or the AMD partition id), its profile (``1g.10gb``, ``cpx``) and the workload it
    serves (a job or deployment; "" unknown). Per-instance arrays index it by slot."""

    instance: str
    profile: str
    job: str = ""


@dataclass(frozen=True)
class Window:
    t: np.ndarray
    nodes: tuple[str, ...]
    metrics: Mapping[str, np.ndarray]
    ib_counters: Mapping[str, np.ndarray] = field(default_factory=dict)
    ports: tuple[str, ...] = ()
    xids: tuple[XidEvent, ...] = ()
    afids: tuple[AfidEvent, ...] = ()  # AMD RAS events (analyzer.detectors.afid)
    jobs: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    leaf_of: Mapping[int, str] = field(default_factory=dict)
    sku: tuple[str, ...] = ()  # per node: the GPU model's peer-group key (catalog_specs)
    hca: tuple[str, ...] = ()  # per node: the fabric generation its ports should run at
    rack_of: Mapping[int, str] = field(default_factory=dict)
    # (node, port) -> leaf where fabrics are built per port (rail-optimized: port i of every
    # node of a scalable unit on leaf i); when set, switch correlation is per port
    port_leaf: Mapping[tuple[int, int], str] = field(default_factory=dict)
    power_cap_w: Mapping[int, float] = field(default_factory=dict)  # inventory: admin caps
    # node -> its NVLink switch domain (an NVL72 rack: 18 nodes, 72 GPUs on one NVLink fabric)
    nvlink_domain_of: Mapping[int, str] = field(default_factory=dict)
    gpus: int = 8
    step: float = 15.0
    missing: tuple[str, ...] = ()  # series families the source could not read this cycle
    mounts: tuple[str, ...] = ()  # checkpoint mounts the storage arrays are indexed by
    # per node: the dialect its series were read in ("gpuwarden", "dcgm-exporter",
    # "dcgm-exporter+node_exporter", ...: analyzer.sources.dialects); empty: all gpuwarden
    dialect_of: Mapping[int, str] = field(default_factory=dict)
    # per dcgm-exporter node: the naming generation its names belong to ("4.8", "4.9": 4.9
    # and 4.10 name the default fields alike; exporter.catalog_dcgm)
    dcgm_generation_of: Mapping[int, str] = field(default_factory=dict)
    # partitioned GPUs: (node, gpu, slot) -> the instance whose values the per-instance arrays
    # (gpu_mig_*: ``(T, nodes, gpus, slots)``) hold at that slot
    instances: Mapping[tuple[int, int, int], InstanceInfo] = field(default_factory=dict)
    # a replica's part of the fleet (analyzer.replicas): per pooled quantity, what the other
    # replicas' nodes add to a like-with-like median (analyzer.pools); empty: the whole fleet
    elsewhere: Mapping[str, Pool] = field(default_factory=dict)

    @property
    def now(self) -> float:
        return float(self.t[-1]) if len(self.t) else 0.0

    @property
    def empty(self) -> bool:
        return len(self.t) == 0 or len(self.nodes) == 0

    def get(self, metric: catalog.MetricDef) -> np.ndarray | None:
        """The array for ``metric``, or None when the source has no such series at all."""
        a = self.metrics.get(metric.name)
        if a is None or a.size == 0 or a.shape[0] != len(self.t):
            return None
        return a

    def tail(self, seconds: float) -> slice:
        """Index slice of the samples within the last ``seconds``."""
        if self.empty:
            return slice(0, 0)
        first = int(np.searchsorted(self.t, self.now - seconds + 1e-9))
        return slice(first, len(self.t))

    def series_count(self) -> int:
        n = sum(int(np.prod(a.shape[1:])) for a in self.metrics.values())
        return n + sum(int(np.prod(a.shape[1:])) for a in self.ib_counters.values())

    def sku_of(self, n: int) -> str:
        return self.sku[n] if n < len(self.sku) else ""

    def port_name(self, p: int) -> str:
        return self.ports[p] if p < len(self.ports) else str(p)


def empty_window() -> Window:
    return Window(t=np.zeros(0), nodes=(), metrics={})
