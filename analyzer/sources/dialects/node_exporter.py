"""Prometheus node_exporter's InfiniBand series, read as the catalogue's.

Edge of the analyzer (declarations). node_exporter's infiniband collector
(collector/infiniband_linux.go) reads the same sysfs files as gpuwarden's exporter and labels
each series ``device`` and ``port``; it sets no node label (Prometheus adds ``instance``).
State and rate map one to one (same numbering, bytes per second); the error counters the
infiniband detector judges (``catalog.IB_ERROR_COUNTERS``) are one counter each, each read by
a query of its own relabelled ``counter=<sysfs file>`` so that they land in
``Window.ib_counters`` exactly as the native ones do. The two hw_counters/ files
(``local_ack_timeout_err``, ``rnr_nak_retry_err``) are served from node_exporter v1.11.0 on
(prometheus/node_exporter#2827); an older one (1.5.0, as
tests/analyzer/test_recorded_node_exporter.py runs it) serves the other seven, and coverage
names the two it lacks. There is no per-port error sum to gate on: each counter is read
moved-only (an instant ``changes()`` query, then only the series that moved).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from analyzer.sources.dialects import NODE_EXPORTER
from analyzer.sources.dialects.identity import IDENTITY_LABELS, NodeMap, raw_identity
from analyzer.sources.queries import Query
from exporter import catalog

_PORT = ("node", "device", "port")
_BY = (*IDENTITY_LABELS, "device", "port")


@dataclass(frozen=True, eq=False)
class IbRelabel:
    node_map: NodeMap = field(default_factory=NodeMap)
    counter: str = ""  # the sysfs file an error counter family stands for

    def __call__(self, labels: dict[str, str]) -> dict[str, str]:
        out = {
            "node": self.node_map(raw_identity(labels)),
            "device": labels.get("device", ""),
            "port": labels.get("port", ""),
        }
        if self.counter:
            out["counter"] = self.counter
        return out


def queries(node_map: NodeMap | None = None, present: frozenset[str] | None = None
            ) -> tuple[Query, ...]:  # fmt: skip
    """node_exporter's reading of the IB state, rate and error counters."""
    nm = node_map or NodeMap()
    plain = IbRelabel(nm)
    out = []
    for metric, name in ((catalog.IB_PORT_STATE, catalog.NODE_IB_STATE),
                         (catalog.IB_PORT_RATE, catalog.NODE_IB_RATE)):  # fmt: skip
        if present is None or name in present:
            out.append(Query(metric, keep=_PORT, dialect=NODE_EXPORTER, source=name, by=_BY,
                             relabel=plain))  # fmt: skip
    for counter, name in catalog.NODE_IB_ERRORS.items():  # one query each: changes() drops
        if present is None or name in present:  # the name, so names cannot share a query
            out.append(Query(catalog.IB_COUNTER, keep=(*_PORT, "counter"), dialect=NODE_EXPORTER,
                             source=name, by=_BY, relabel=IbRelabel(nm, counter),
                             moved_only=True))  # fmt: skip
    return tuple(out)
