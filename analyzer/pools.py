"""What a like-with-like median is taken over, mergeable across analyzer replicas (issue 33).

Several checks judge a node against the median of the nodes of its GPU model or configuration
across the fleet: a power limit against its model's (throttling), a port's rate against its
fabric's (InfiniBand), a PCIe link against its model's busy links where no maximum is
exported, a busy clock against its configuration's (fail-slow). A replica of the sharded
analyzer holds only its part of the fleet, so it leaves its part's :class:`Pool` of each such
quantity beside its marginal scores (:class:`analyzer.detectors.marginal.Scores`) and judges
its nodes against its pool joined with the other replicas' (:attr:`analyzer.window.Window.
elsewhere`): the median of the joined values is the median of the same multiset one analyzer
takes over the whole fleet, bit for bit. Pure; no I/O.

The same exchange carries what other fleet-wide comparisons take from the nodes, as values
and counts per group: a storage mount's tally, RoCE port rates per rail and of every leaf,
MIG instance activity per workload, the idle peer pool's GPUs (each detector's ``pools``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from analyzer.window import Window

# the quantities pooled (the key under which a replica leaves each)
POWER_LIMIT = "power_limit_w"  # per model: the enforced limits of GPUs not capped by an admin
IB_RATE = "ib_rate"  # per model: the ports' last rates
PCIE_WIDTH = "pcie_width"  # per model: each GPU's typical link width
PCIE_GENERATION = "pcie_generation"  # per model: each busy GPU's typical link generation
BUSY_CLOCK = "busy_clock"  # per configuration: each busy GPU's mean SM clock (fail-slow)
# joins the parts of a pooled group's key (an idle GPU's group, node and index; a MIG
# workload's model, profile and name)
SEP = "\x1f"


@dataclass(frozen=True)
class Pool:
    """Of a set of nodes, per group (a model, a configuration): the values the group's median
    is taken over (NaN dropped) and how many nodes have one. The pools of disjoint node sets,
    joined, are the pool of their union."""

    values: Mapping[str, np.ndarray] = field(default_factory=dict)
    nodes: Mapping[str, int] = field(default_factory=dict)

    def join(self, other: Pool) -> Pool:
        empty = np.zeros(0)
        return Pool(
            {k: np.concatenate([self.values.get(k, empty), other.values.get(k, empty)])
             for k in {*self.values, *other.values}},
            {k: self.nodes.get(k, 0) + other.nodes.get(k, 0) for k in {*self.nodes, *other.nodes}},
        )  # fmt: skip


def pool_of(values: np.ndarray, groups: Iterable[tuple[str, np.ndarray]]) -> Pool:
    """The pool of ``values`` (nodes first: (N, ...)) over ``groups`` ``[(key, node
    indices)]``: a node counts where any of its values is finite, as in the median below."""
    flat = values.reshape(values.shape[0], -1) if values.ndim else values
    out: dict[str, np.ndarray] = {}
    nodes: dict[str, int] = {}
    for key, idx in groups:
        have = idx[np.isfinite(flat[idx]).any(axis=1)]
        v = flat[have].ravel()
        out[key], nodes[key] = v[~np.isnan(v)], len(have)
    return Pool(out, nodes)


def medians(here: Pool, elsewhere: Pool | None, min_nodes: int) -> dict[str, float]:
    """Per group of ``here``, the median of its values joined with ``elsewhere``'s (the other
    replicas' nodes; None: ``here`` is the whole fleet), where at least ``min_nodes`` nodes
    have a value; ``numpy.nanmedian`` over those nodes' values, exactly."""
    pool = here if elsewhere is None else here.join(elsewhere)
    out = {}
    for key in here.nodes:
        v = pool.values.get(key, np.zeros(0))
        if pool.nodes.get(key, 0) >= min_nodes and len(v):
            out[key] = float(np.median(v))
    return out


def joined(pools: Iterable[Mapping[str, Pool]]) -> dict[str, Pool]:
    """Per quantity, the pools of several node sets joined."""
    out: dict[str, Pool] = {}
    for part in pools:
        for q, p in part.items():
            out[q] = out[q].join(p) if q in out else p
    return out


@runtime_checkable
class Pools(Protocol):
    """A detector that judges against a like-with-like median of pooled quantities."""

    name: str

    def pools(self, window: Window) -> dict[str, Pool]:
        """What ``window``'s nodes add to each of its quantities' pools."""
