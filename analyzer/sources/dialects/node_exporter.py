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

Where a site runs node_exporter's ethtool collector, the PFC pause time each RoCE netdev sent
per priority (``node_ethtool_transmitted_prio<N>_pause_duration``, collector/ethtool_linux.go:
``tx`` spelled ``transmitted``, microseconds as mlx5 reports them) is read as
``ROCE_PFC_PAUSE_SECONDS``, the netdev standing for the port.
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
    out += ethtool_queries(nm, present)
    return tuple(out)


@dataclass(frozen=True, eq=False)
class EthtoolRelabel:
    """One PFC statistic of node_exporter's ethtool collector -> the catalogue's labels: the
    netdev (label ``device``) stands for the RDMA device (node_exporter does not know which it
    carries), one port ``1`` (a netdev is one port), the statistic's direction and priority."""

    node_map: NodeMap
    direction: str
    priority: str

    def __call__(self, labels: dict[str, str]) -> dict[str, str]:
        return {"node": self.node_map(raw_identity(labels)), "device": labels.get("device", ""),
                "port": "1", "direction": self.direction, "priority": self.priority}  # fmt: skip


PFC_PRIORITIES = tuple(str(p) for p in range(8))


def ethtool_names() -> tuple[str, ...]:
    """node_exporter's names of the pause time RoCE ports SENT, per priority (the RoCE
    detector's storm signal)."""
    return tuple(catalog.node_ethtool_pfc("tx", p, True) for p in PFC_PRIORITIES)


def ethtool_queries(node_map: NodeMap | None = None, present: frozenset[str] | None = None
                    ) -> list[Query]:  # fmt: skip
    """node_exporter's ethtool collector (off by default: --collector.ethtool): the PFC pause
    time each netdev sent per priority, microseconds (mlx5) -> seconds, read moved-only (a
    priority without PFC never moves), one query per priority: a relabel cannot read the
    priority out of a name."""
    nm = node_map or NodeMap()
    out = []
    for prio, name in zip(PFC_PRIORITIES, ethtool_names(), strict=True):
        if present is None or name in present:
            out.append(Query(catalog.ROCE_PFC_PAUSE_SECONDS,
                             keep=(*_PORT, "direction", "priority"), dialect=NODE_EXPORTER,
                             source=name, by=(*IDENTITY_LABELS, "device"), divide=1e6,
                             relabel=EthtoolRelabel(nm, "tx", prio), moved_only=True))  # fmt: skip
    return out
