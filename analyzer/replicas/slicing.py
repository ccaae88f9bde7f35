"""A replica's part of a window: the nodes of the units it owns, with every per-node array
and map re-indexed. Pure; sits between the source and the engine in the sharded mode.

Every array of a :class:`~analyzer.window.Window` has the node axis second (the time axis
first), and every map is keyed by node index, so one take along axis 1 and one renumbering
of the keys give a window that a detector cannot tell from a smaller fleet's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TypeVar

import numpy as np

from analyzer.window import Window

V = TypeVar("V")


def _per_node(seq: Sequence[str], keep: Sequence[int]) -> tuple[str, ...]:
    return tuple(seq[i] for i in keep) if seq else ()


def _renumber(of: Mapping[int, V], new: Mapping[int, int]) -> dict[int, V]:
    return {new[n]: v for n, v in of.items() if n in new}


def subwindow(window: Window, keep: Sequence[int]) -> Window:
    """``window`` restricted to the node indices ``keep`` (sorted, distinct), renumbered
    0..len(keep)-1 in that order."""
    keep = sorted(set(keep))
    if len(keep) == len(window.nodes):
        return window
    idx = np.array(keep, dtype=np.intp)
    new = {old: i for i, old in enumerate(keep)}
    jobs = {j: tuple(new[m] for m in ms if m in new) for j, ms in window.jobs.items()}
    return replace(
        window,
        nodes=tuple(window.nodes[i] for i in keep),
        metrics={k: np.take(a, idx, axis=1) for k, a in window.metrics.items()},
        ib_counters={k: np.take(a, idx, axis=1) for k, a in window.ib_counters.items()},
        xids=tuple(replace(x, node=new[x.node]) for x in window.xids if x.node in new),
        afids=tuple(replace(a, node=new[a.node]) for a in window.afids if a.node in new),
        jobs={j: ms for j, ms in jobs.items() if ms},
        leaf_of=_renumber(window.leaf_of, new),
        sku=_per_node(window.sku, keep),
        hca=_per_node(window.hca, keep),
        rack_of=_renumber(window.rack_of, new),
        port_leaf={(new[n], p): leaf for (n, p), leaf in window.port_leaf.items() if n in new},
        power_cap_w=_renumber(window.power_cap_w, new),
        nvlink_domain_of=_renumber(window.nvlink_domain_of, new),
        dialect_of=_renumber(window.dialect_of, new),
        dcgm_generation_of=_renumber(window.dcgm_generation_of, new),
        instances={(new[n], g, s): info for (n, g, s), info in window.instances.items()
                   if n in new},
    )  # fmt: skip


def window_bytes(window: Window) -> int:
    """The bytes of the dense arrays a replica holds for one cycle."""
    return sum(a.nbytes for a in window.metrics.values()) + sum(
        a.nbytes for a in window.ib_counters.values()
    )
