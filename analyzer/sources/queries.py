"""What the analyzer asks Prometheus for: one declarative :class:`Query` per series family.

Adding a series to the analyzer's read path is one line in :data:`QUERIES` (the
heterogeneous-fleet inventory reads ``gpu_info`` the same way). Each query renders to PromQL
that returns only what the detectors use, with the identity labels they do not use dropped
server-side (``max by``: exact for one series per key, and it absorbs the duplicates of an HA
pair of Prometheus servers):

- plain: every series, e.g. ``max by (node,gpu) (gpuwarden_gpu_temperature_celsius)``;
- ``absent_means=v`` (sparse gauges): only samples ``!= v``; where the GPU reported
  ``gpu_up`` at that step and the series is absent, the value is ``v`` (never where the GPU
  did not report: a gap stays a gap);
- ``moved_only`` (error counters): only series whose value changed within the window
  (``changes(...[window]) > 0`` at the window's end, a small instant query); their full
  history is fetched once, when they start to move, then only their new points. A counter that did not move has no increase, which is all the
  detectors read from it.
"""

from __future__ import annotations

from dataclasses import dataclass

from exporter import catalog

IDENTITY = frozenset({"uuid", "scheduler"})  # labels no detector reads
IB_USED = (  # analyzer.detectors.infiniband RATE_LIMITS + ANY_INCREASE
    "symbol_error|link_error_recovery|port_rcv_errors|port_xmit_discards|local_ack_timeout_err"
    "|link_downed|local_link_integrity_errors|excessive_buffer_overrun_errors|rnr_nak_retry_err"
)


@dataclass(frozen=True)
class Query:
    metric: catalog.MetricDef
    keep: tuple[str, ...] = ()  # labels kept (default: the catalogue's, minus identity)
    matchers: str = ""  # extra PromQL label matchers, e.g. 'counter=~"a|b"'
    moved_only: bool = False
    absent_means: float | None = None
    anchored: bool = False  # counters whose increases become events: fetch a value before

    @property
    def name(self) -> str:
        return self.metric.name

    @property
    def labels(self) -> tuple[str, ...]:
        return self.keep or tuple(x for x in self.metric.labels if x not in IDENTITY)

    def selector(self, extra: str = "") -> str:
        m = ",".join(x for x in (self.matchers, extra) if x)
        return f"{self.name}{{{m}}}" if m else self.name

    def expr(self, window: float, extra: str = "", detail: bool = False) -> str:
        """The PromQL for a range read. ``detail``: the plain series (a moved-only query's
        backfill of chosen nodes), without the moved filter."""
        by = ",".join(self.labels)
        sel = self.selector(extra)
        if self.absent_means is not None:
            sel = f"{sel} != {self.absent_means:g}"
        base = f"max by ({by}) ({sel})"
        if not self.moved_only or detail:
            return base
        # 3 windows: a series that moved within the window ending at ``end`` has moved within
        # 3 windows before every fresh point of an incremental read (fresh points are < 1
        # window old); which series count as moved is decided by moved_expr at ``end``
        return f"{base} and on ({by}) ({self.moved_expr(3 * window, extra)})"

    def moved_expr(self, window: float, extra: str = "") -> str:
        by = ",".join(self.labels)
        return f"max by ({by}) (changes({self.selector(extra)}[{int(window)}s])) > 0"


c = catalog
QUERIES: tuple[Query, ...] = (
    Query(c.GPU_UP, keep=("node", "gpu")),
    Query(c.GPU_UTILIZATION),
    Query(c.GPU_TEMPERATURE),
    Query(c.GPU_MEMORY_TEMPERATURE),
    Query(c.GPU_POWER),
    Query(c.GPU_POWER_LIMIT),
    Query(c.GPU_SM_CLOCK),
    Query(c.GPU_THROTTLE, absent_means=0.0),
    Query(c.GPU_ECC_ERRORS, moved_only=True),
    Query(c.GPU_ROW_REMAP_PENDING),
    Query(c.GPU_ROW_REMAP_FAILED),
    Query(c.GPU_PCIE_GENERATION),
    Query(c.GPU_PCIE_GENERATION_MAX),
    Query(c.GPU_PCIE_WIDTH),
    Query(c.GPU_PCIE_WIDTH_MAX),
    Query(c.GPU_XID_ERRORS, anchored=True),
    Query(c.GPU_ALLOCATION_INFO, keep=("node", "gpu", "job_id")),
    Query(c.NVLINK_UP, absent_means=1.0),
    Query(c.NVLINK_ERRORS, moved_only=True),
    Query(c.IB_PORT_STATE),
    Query(c.IB_PORT_RATE),
    Query(c.IB_COUNTER, matchers=f'counter=~"{IB_USED}"', moved_only=True),
    Query(c.IB_HW_COUNTER, matchers=f'counter=~"{IB_USED}"', moved_only=True),
)


def node_matcher(nodes: list[str]) -> str:
    """``node=~"a|b"`` for exactly these node names (RE2-escaped)."""
    alt = "|".join(_re2(n) for n in sorted(set(nodes)))
    return f'node=~"{alt}"'


def _re2(s: str) -> str:
    out = []
    for ch in s:
        if ch in r"\.+*?()|[]{}^$":
            out.append("\\\\" + ch)  # PromQL string escape of a regex escape
        elif ch == '"':
            out.append('\\"')
        else:
            out.append(ch)
    return "".join(out)
