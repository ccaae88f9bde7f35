"""The fleet's topology for a node-restricted read (the sharded mode, issue 33): which nodes
exist and which comparison domains join them, from a few small instant queries, so that a
replica can decide what it owns before it reads the window of only those nodes.

Pure string building and assembly; the Prometheus source runs the queries. The topology is
what :func:`analyzer.replicas.ownership.units` needs: the nodes, the jobs (allocation series
live at the window's end, as the window's own job map), the NVLink domains (the GPUs' fabric
info) and the configured leaves. Every replica asks the same questions at the same grid time,
so every replica computes the same units.

A node is in the topology when one of :data:`PRESENCE` had a sample within the window plus
the lookback (a superset of the nodes the window would hold: a node with nothing left in the
window is owned and simply read as empty), or when a foreign dialect's series (read whole,
their ``node`` exists only after relabelling) name it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from analyzer.sources.queries import regex_literal
from analyzer.window import Window
from common import fabric as fabric_mod
from exporter import catalog

# the families every kind of node serves while it reports: a GPU node (gpu_up), a node read
# for its fabric only (port state), a storage or Fabric Manager-only node
PRESENCE = (
    catalog.GPU_UP,
    catalog.IB_PORT_STATE,
    catalog.STORAGE_PROBE_UP,
    catalog.FABRIC_SERVICE_UP,
    catalog.FABRIC_IMEX_READY,
)


def nodes_expr(span: float) -> str:
    """The nodes any presence family saw within ``span`` seconds before the evaluation time."""
    w = int(span)
    return " or ".join(f"group by (node) (last_over_time({m.name}[{w}s]))" for m in PRESENCE)


def jobs_expr() -> str:
    """(node, job) pairs live at the evaluation time: the window's ``jobs`` (its last column)."""
    return f'count by (node, job_id) ({catalog.GPU_ALLOCATION_INFO.name}{{job_id!=""}})'


def fabric_expr() -> str:
    """Per node and NVLink domain, how many GPUs name it (the identity read's shape)."""
    m = catalog.GPU_FABRIC_INFO.name
    return f'count by (node, cluster_uuid, clique_id) ({m}{{cluster_uuid!=""}})'


def node_matcher(nodes: Iterable[str]) -> str:
    """A matcher selecting exactly ``nodes`` (Prometheus and VictoriaMetrics match an
    alternation of literals as a set, not by backtracking)."""
    return f'node=~"{"|".join(regex_literal(n) for n in sorted(nodes))}"'


def topology_window(
    grid: np.ndarray,
    step: float,
    nodes: Iterable[str],
    jobs: Iterable[tuple[str, str]],
    fabric: Sequence[tuple[str, str, str]],
    leaf_of: Mapping[str, str],
) -> Window:
    """A window without series: nodes, jobs, NVLink domains and leaves only (what the
    ownership units are made of)."""
    names = tuple(sorted({n for n in nodes if n}))
    ix = {n: i for i, n in enumerate(names)}
    members: dict[str, set[int]] = {}
    for node, job in jobs:
        if job and node in ix:
            members.setdefault(job, set()).add(ix[node])
    domains = fabric_mod.nvlink_domains(fabric_mod.domains_from_fabric(fabric), {})
    return Window(
        t=np.asarray(grid, dtype=float),
        nodes=names,
        metrics={},
        step=step,
        jobs={j: tuple(sorted(v)) for j, v in members.items()},
        leaf_of={i: leaf_of[n] for i, n in enumerate(names) if n in leaf_of},
        nvlink_domain_of={ix[n]: d for n, d in domains.items() if n in ix},
    )
