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
window is owned and simply read as empty), or when a foreign dialect's presence series name
it: one more instant query per such family, grouped by the labels its node is derived from
(relabelled by the reader), and one per foreign allocation family for the jobs. These stay
fleet-wide while the replica's own reads of the foreign families are narrowed to its nodes.

Replicas need not each ask: a :class:`Sharing` hook (the elected leader's read, shared through
:mod:`analyzer.replicas.sharing`) may hand the source this cycle's :class:`Topology` instead.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from analyzer.sources.dialects.identity import IDENTITY_LABELS
from analyzer.sources.queries import Query, over_time, regex_literal
from analyzer.window import Window
from common import fabric as fabric_mod
from exporter import catalog
from exporter import catalog_amd as dme

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


@dataclass(frozen=True)
class Topology:
    """What the topology read derives: the window the ownership units are made of, and per
    foreign exporter the labels its hosts were named by (which of a family's identity labels
    narrow a replica's read of it)."""

    window: Window
    host_labels: Mapping[str, frozenset[str]]


class Sharing(Protocol):
    """How a replica's source gets the topology it would read, or leaves the one it read."""

    def shared(self, at: float, grid: np.ndarray) -> Topology | None:
        """The topology read at ``at`` over ``grid`` by another replica this cycle; None:
        read it yourself (the same queries at the same time give the same answer)."""

    def read(self, at: float, topology: Topology) -> None:
        """This replica read ``topology`` at ``at`` itself (the leader leaves it for the
        others; never raises)."""


# a foreign series' labels that name a GPU (or a partition of one), not its node or its job
_UNIT_LABELS = frozenset({"gpu", dme.GPU_ID, dme.PARTITION_ID, dme.PARTITION_TYPE})


_PLAIN = re.compile(r"[a-zA-Z_:][\w:]*(\{[^{}]*\})?")


def foreign_host_queries(queries: Iterable[Query]) -> list[Query]:
    """The foreign families the topology learns hosts from: per dialect its presence
    families (:data:`PRESENCE`), or, for one that serves none (node_exporter serving only
    ethtool's PFC counters), each of its families that reads a plain series."""
    foreign = [q for q in queries if q.dialect]
    out = [q for q in foreign if q.metric in PRESENCE]
    have = {dialect_base(q) for q in out}
    return out + [q for q in foreign if dialect_base(q) not in have and _PLAIN.fullmatch(q.source)]


def dialect_base(q: Query) -> str:
    """The exporter a foreign query reads (``dcgm-exporter/pod`` is dcgm-exporter's)."""
    return q.dialect.split("/", 1)[0]


def foreign_nodes_expr(q: Query, span: float) -> str:
    """A foreign presence family's hosts seen within ``span`` seconds (one row per host, in
    the labels its node is derived from)."""
    by = ",".join(x for x in q.by if x in IDENTITY_LABELS)
    return f"group by ({by}) ({over_time(q.source, 'last_over_time', span)})"


def foreign_jobs_expr(q: Query) -> str:
    """A foreign allocation family's (host, job) pairs live at the evaluation time (one row
    per host and job: its GPUs' labels dropped)."""
    by = ",".join(x for x in q.by if x not in _UNIT_LABELS)
    return f"count by ({by}) ({q.source})"


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
