"""Which dialects a Prometheus holds, and so which queries the analyzer runs.

Edge of the analyzer: one small instant query (``group by (__name__)`` over the names any
reader knows) at start and again every :data:`RECHECK` seconds. The answer picks the query
set: gpuwarden's own queries always (they cost nothing where no such series exist), plus a
dialect's reading of each field that exists. Nothing to configure: a dcgm-exporter fleet is
read as one the moment its names show up, a half-upgraded one in both naming generations.
A failed discovery keeps the last query set (at start: gpuwarden's own, re-tried next cycle).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass

from analyzer.sources.dialects import AMD, DCGM, NODE_EXPORTER, amd, dcgm, node_exporter
from analyzer.sources.dialects.dcgm import presence_names
from analyzer.sources.dialects.generations import generations_of, names_of, names_of_field
from analyzer.sources.dialects.identity import NodeMap
from analyzer.sources.queries import QUERIES, Query
from exporter import catalog

RECHECK = 3600.0  # seconds between discoveries
_NODE_PREFIXES = (catalog.NODE_IB_PREFIX, catalog.NODE_ETHTOOL_PREFIX)  # node_exporter's names


@functools.cache
def known_names() -> frozenset[str]:
    """Every foreign name some reader can translate."""
    dc = {n for f in catalog.dcgm_fields().values() for n, _ in names_of(f)}
    dc |= {*_markers(), *dcgm.clock_reason_names()}
    ib = {catalog.NODE_IB_STATE, catalog.NODE_IB_RATE, *catalog.NODE_IB_ERRORS.values()}
    ib |= set(node_exporter.ethtool_names())  # RoCE ports' PFC pause time
    return frozenset(dc | ib)


def _markers() -> frozenset[str]:
    """Names that say dcgm-exporter serves here, in any generation: presence, last XID."""
    fields = (catalog.DCGM_LAST_XID.name, *catalog.DCGM_PRESENCE_FIELDS)
    return frozenset(n for f in fields for n in names_of_field(f))


def discovery_expr() -> str:
    """The instant query: which of the known foreign names hold a series now (DME's fields
    behind any prefix: ``amd.discovery_regex``)."""
    names = "|".join([*sorted(known_names()), amd.discovery_regex()])
    return f'group by (__name__) ({{__name__=~"{names}"}})'


@dataclass(frozen=True)
class Discovered:
    """The foreign names present, and what they say about the fleet."""

    names: frozenset[str] = frozenset()
    dcgm_hostname: bool = False  # every dcgm series names its host (instance need not be read)

    @property
    def dialects(self) -> tuple[str, ...]:
        out = []
        if self.names & _markers():
            out.append(DCGM)
        if amd.is_dme(self.names):
            out.append(AMD)
        if any(n.startswith(_NODE_PREFIXES) for n in self.names):
            out.append(NODE_EXPORTER)
        return tuple(out)

    @property
    def generations(self) -> tuple[str, ...]:
        """The dcgm-exporter naming generations present (a fleet mid-upgrade has two), told
        apart by the names (exporter.catalog_dcgm): each node is read in the names it serves."""
        return generations_of({n for n in self.names if dialect_of_name(n) == DCGM})


def dialect_of_name(name: str) -> str:
    """Which reader a discovered name belongs to."""
    if name.startswith(_NODE_PREFIXES):
        return NODE_EXPORTER
    if name in known_names():
        return DCGM
    return AMD if amd.split(name) is not None else ""


def parse(names: Iterable[str], dcgm_hostname: bool = False) -> Discovered:
    return Discovered(frozenset(n for n in names if dialect_of_name(n)), dcgm_hostname)


def hostless_expr(found: Discovered) -> str | None:
    """The dcgm series that name no host (dcgm-exporter --no-hostname): none means the
    ``instance`` label is not needed to tell their nodes apart."""
    at = _present_markers(found)
    if not at:
        return None
    return f'count({{__name__=~"{"|".join(at)}",Hostname="",hostname="",node=""}})'


def _present_markers(found: Discovered) -> list[str]:
    """The presence field each generation present is read by (one per generation)."""
    return [x for x in presence_names(found.names) if x in found.names]


def _as_node(sel: str, dialect: str) -> str:
    """``sel`` with a ``node`` label as its identity gives it (before any site mapping)."""
    if dialect == NODE_EXPORTER:
        return f'label_replace({sel}, "node", "$1", "instance", "(.+):[0-9]+")'
    inner = f'label_replace({sel}, "node", "$1", "hostname", "(.+)")'
    return f'label_replace({inner}, "node", "$1", "Hostname", "(.+)")'


def foreign_only_exprs(found: Discovered) -> dict[str, str]:
    """Per dialect found, the PromQL counting its series on nodes gpuwarden's exporter does
    not serve. No answer: every such node is served natively (gpuwarden's ``--compat dcgm``,
    or node_exporter beside gpuwarden's exporter), and reading the dialect too would only
    double the read."""
    out = {}
    at = _present_markers(found)
    if DCGM in found.dialects and at:
        sel = _as_node(f'{{__name__=~"{"|".join(at)}"}}', DCGM)
        out[DCGM] = f"count({sel} unless on (node) {catalog.GPU_UP.name})"
    if NODE_EXPORTER in found.dialects and catalog.NODE_IB_STATE in found.names:
        sel = _as_node(catalog.NODE_IB_STATE, NODE_EXPORTER)
        out[NODE_EXPORTER] = f"count({sel} unless on (node) {catalog.IB_PORT_STATE.name})"
    return out


def without(found: Discovered, dialect: str) -> Discovered:
    """``found`` less one dialect's names (its nodes are all read natively)."""
    keep = {n for n in found.names if dialect_of_name(n) != dialect}
    return Discovered(frozenset(keep), found.dcgm_hostname)


def query_set(found: Discovered, node_map: NodeMap | None = None) -> tuple[Query, ...]:
    """gpuwarden's queries plus each discovered dialect's reading of what is present."""
    out = list(QUERIES)
    if DCGM in found.dialects:
        out += dcgm.queries(node_map, found.names, found.dcgm_hostname)
    if AMD in found.dialects:
        out += amd.queries(node_map, found.names)
    if NODE_EXPORTER in found.dialects:
        out += node_exporter.queries(node_map, found.names)
    return tuple(out)


__all__ = [
    "RECHECK",
    "Discovered",
    "dialect_of_name",
    "discovery_expr",
    "foreign_only_exprs",
    "hostless_expr",
    "parse",
    "query_set",
    "without",
]
