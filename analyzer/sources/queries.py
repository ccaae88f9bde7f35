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
- ``moved_only`` (error counters): only series whose value changed within the window (a
  small instant query at the window's end, ``changes()`` over the window); their full history is fetched once, when they start to move, then only their
  new points, with label matchers narrowed to the rows that moved. A counter that did not move has no increase, which is all the
  detectors read from it.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from exporter import catalog


class Relabel(Protocol):
    """Foreign labels -> the catalogue's (``node``, ``gpu``, ...); hashable by identity."""

    def __call__(self, labels: dict[str, str]) -> dict[str, str]: ...


IDENTITY = frozenset({"uuid", "scheduler"})  # labels no detector reads
IB_USED = "|".join(catalog.IB_ERROR_COUNTERS)  # the detector's RATE_LIMITS + ANY_INCREASE
# the RoCE detector's hw_counters/ files: congestion (ECN, CNP) and loss (out of sequence, ...)
ROCE_USED = "|".join((*catalog.ROCE_CONGESTION_COUNTERS, *catalog.ROCE_RETRANSMIT_COUNTERS))


@dataclass(frozen=True)
class Gate:
    """A coarser series the exporter serves beside a large family, which says which of its
    units (GPUs, IB ports) are worth reading: ``moved`` (a counter summing the unit's
    counters: units whose sum changed within the window) or ``above_zero`` (a gauge: units
    where it was above 0 within the window). Prometheus then touches one series per unit per
    cycle instead of 72 (NVLink: 18 links x 4 types) or 9 (IB error counters). Units that
    report (``present``) but serve no gate series (an older exporter, a counter that could not
    be read) are read series by series as without a gate."""

    metric: catalog.MetricDef
    kind: str  # "moved" | "above_zero"
    labels: tuple[str, ...] = ("node", "gpu")
    present: catalog.MetricDef = catalog.GPU_UP  # every unit that reports has this series

    def __post_init__(self) -> None:
        if self.kind not in ("moved", "above_zero"):
            raise ValueError(f"{self.metric.name}: gate kind must be moved or above_zero")

    def expr(self, window: float, extra: str = "") -> str:
        """The units whose series are read now (of those ``extra`` selects)."""
        fn = "changes" if self.kind == "moved" else "max_over_time"
        by = ",".join(self.labels)
        return f"max by ({by}) ({fn}({_sel(self.metric, extra)}[{int(window)}s]) > 0)"

    def uncovered_expr(self, window: float, extra: str = "") -> str:
        """Units whose gate series is missing at any scrape within the window where the unit
        reported (an older exporter, a sum withheld because a series could not be read, a
        node gone quiet): fewer gate samples than presence samples, or none."""
        by = ",".join(self.labels)
        w = int(window)
        seen = f"max by ({by}) (count_over_time({_sel(self.present, extra)}[{w}s]))"
        gated = f"max by ({by}) (count_over_time({_sel(self.metric, extra)}[{w}s]))"
        return f"({seen} > on ({by}) {gated}) or ({seen} unless on ({by}) {gated})"


@dataclass(frozen=True)
class Query:
    metric: catalog.MetricDef
    keep: tuple[str, ...] = ()  # labels kept (default: the catalogue's, minus identity)
    matchers: str = ""  # extra PromQL label matchers, e.g. 'counter=~"a|b"'
    moved_only: bool = False
    absent_means: float | None = None
    anchored: bool = False  # counters whose increases become events: fetch a value before
    moved_shards: int = 1  # check 1/k of the GPUs for moved series per cycle (1, 2, 5 or 10)
    gate: Gate | None = None  # read only the rows of the GPUs it names (and of uncovered nodes)
    # a foreign dialect's reading of ``metric`` (analyzer.sources.dialects): ``source`` is the
    # PromQL over the foreign names, grouped ``by`` the foreign labels, divided by ``divide``
    # into the catalogue's unit; ``relabel`` turns each answer's labels into the catalogue's
    dialect: str = ""
    source: str = ""
    by: tuple[str, ...] = ()
    divide: float = 1.0
    relabel: Relabel | None = None
    # a short name for a long ``source`` expression (the query's key in stats and logs); on a
    # native query, what tells a second reading of the same family (other rows) from the first
    label: str = ""
    # an info series read for its labels only (identity that changes rarely, e.g. a GPU's
    # NVLink domain): one instant query at the window's end, ``count by`` the kept labels (the
    # value: how many series name that row), at a cold start and then every ``every`` seconds;
    # the rows hold between reads. 0: a range read every cycle like any other family.
    every: float = 0.0

    def __post_init__(self) -> None:
        if self.moved_shards not in (1, 2, 5, 10):
            raise ValueError(f"{self.name}: moved_shards must be 1, 2, 5 or 10")
        if self.dialect and (self.gate is not None or not self.source):
            raise ValueError(f"{self.name}: a dialect query reads its source, without a gate")
        if self.every and (self.every < 0 or self.moved_only or self.gate or self.dialect):
            raise ValueError(f"{self.name}: an identity read is a plain native info series")

    def shard_matcher(self, cycle: int) -> str:
        """GPUs whose index ends in a digit of this cycle's shard (all when unsharded)."""
        k = self.moved_shards
        if k == 1:
            return ""
        digits = "".join(str(d) for d in range(10) if d % k == cycle % k)
        return f'gpu=~".*[{digits}]"'

    @property
    def name(self) -> str:
        """The query's key in the source's state and stats: the metric's name, or
        ``dialect:metric:source`` for a foreign reading of it."""
        if self.dialect:
            return f"{self.dialect}:{self.metric.name}:{self.label or self.source}"
        if self.label:  # a second reading of a native family (other rows of it)
            return f"{self.metric.name}:{self.label}"
        return self.metric.name

    @functools.cached_property  # read per series of every response
    def labels(self) -> tuple[str, ...]:
        return self.keep or tuple(x for x in self.metric.labels if x not in IDENTITY)

    def selector(self, extra: str = "") -> str:
        m = ",".join(x for x in (self.matchers, extra) if x)
        name = self.metric.name  # not self.name: a second reading's key is not a series name
        return f"{name}{{{m}}}" if m else name

    def source_selector(self, extra: str = "") -> str:
        """A dialect's source narrowed by ``extra``, matchers on its own (foreign) labels, in
        each of its series selectors (a presence or reasons expression has several)."""
        return with_matchers(self.source, extra) if extra else self.source

    def identity_expr(self, extra: str = "") -> str:
        """The instant read of an identity query: its rows and how many series name each."""
        return f"count by ({','.join(self.labels)}) ({self.selector(extra)})"

    def expr(self, extra: str = "") -> str:
        """The PromQL for a range read (of a moved-only query: of the series chosen by
        ``extra``, the matchers of the rows that moved)."""
        if self.dialect:
            div = (
                ""
                if self.divide == 1.0
                else (f" * {1 / self.divide:g}" if self.divide < 1.0 else f" / {self.divide:g}")
            )
            return f"max by ({','.join(self.by)}) ({self.source_selector(extra)}){div}"
        by = ",".join(self.labels)
        sel = self.selector(extra)
        if self.absent_means is not None:
            sel = f"{sel} != {self.absent_means:g}"
        return f"max by ({by}) ({sel})"

    def moved_expr(self, window: float, extra: str = "") -> str:
        """Series whose value changed within the window ending at the evaluation time: a
        counter that moved. ``changes()`` over the range, measured 3-6x cheaper for Prometheus
        than comparing each series with itself one window earlier (``offset``: two instant
        selections, each decoding the chunk up to its point, and a vector match)."""
        if self.dialect:
            # grouped by the foreign labels (they select the rows to read), across the series
            # a row is made of: dcgm's hpc_job and pod labels start a new series with each job,
            # and a fault that ends a job moves its counter exactly there, where changes() of
            # either series sees nothing. The row's highest value against its lowest does.
            sel, by, w = self.source_selector(extra), ",".join(self.by), int(window)
            return (f"max by ({by}) (max_over_time({sel}[{w}s]))"
                    f" - min by ({by}) (min_over_time({sel}[{w}s])) > 0")  # fmt: skip
        by = ",".join(self.labels)
        return f"max by ({by}) (changes({self.selector(extra)}[{int(window)}s]) > 0)"


c = catalog
_PORT = ("node", "device", "port")
_IB_GATE = Gate(c.IB_PORT_ERRORS, "moved", ("node", "device", "port"), c.IB_PORT_STATE)
QUERIES: tuple[Query, ...] = (
    Query(c.GPU_UP, keep=("node", "gpu")),
    Query(c.GPU_INFO, keep=("node", "gpu", "name")),  # the model: peer groups, inventory
    Query(c.GPU_UTILIZATION),
    Query(c.GPU_TEMPERATURE),
    Query(c.GPU_MEMORY_TEMPERATURE),
    Query(c.GPU_POWER),
    Query(c.GPU_POWER_LIMIT),
    Query(c.GPU_SM_CLOCK),
    Query(c.GPU_SM_ACTIVE),  # straggler signals that survive collective waits, when served
    Query(c.GPU_TENSOR_ACTIVE),
    Query(c.JOB_STEP_SECONDS),
    Query(c.GPU_THROTTLE, absent_means=0.0),
    Query(c.GPU_ECC_ERRORS, moved_only=True),
    Query(c.GPU_ROW_REMAP_PENDING),
    Query(c.GPU_ROW_REMAP_FAILED),
    # rows remapped so far, only GPUs with any (a healthy GPU costs nothing): the marginal
    # detector's correctable_remaps signal
    Query(c.GPU_REMAPPED_ROWS, absent_means=0.0),
    Query(c.GPU_PCIE_GENERATION),
    Query(c.GPU_PCIE_GENERATION_MAX),
    Query(c.GPU_PCIE_WIDTH),
    Query(c.GPU_PCIE_WIDTH_MAX),
    Query(c.GPU_XID_ERRORS, anchored=True),
    # AMD RAS (served where the exporter reads amdsmi): events per AFID, decoded like XIDs
    # into Window.afids; errors per block, only the GPUs whose counters moved
    Query(c.GPU_RAS_EVENTS, keep=("node", "gpu", "afid", "severity"), anchored=True),
    Query(c.GPU_RAS_ERRORS, moved_only=True),
    Query(c.GPU_ALLOCATION_INFO, keep=("node", "gpu", "job_id")),
    # partitioned GPUs: each MIG instance's activity and the pod on it (the workload it
    # serves; analyzer.sources.instances), absent on nodes without MIG
    Query(c.GPU_MIG_GRAPHICS_ACTIVE, keep=("node", "gpu", "gpu_instance", "profile")),
    Query(
        c.GPU_POD_INFO,
        keep=("node", "gpu", "gpu_instance", "namespace", "pod"),
        matchers='gpu_instance!=""',
    ),
    # the largest families (18 links, x 4 error types, per GPU): read through the exporter's
    # per-GPU sums; on nodes that lack them a fifth of the GPUs is checked for newly moving
    # links each cycle (links already moving are read every cycle)
    Query(c.NVLINK_UP, absent_means=1.0, gate=Gate(c.GPU_NVLINK_DOWN, "above_zero")),
    Query(
        c.NVLINK_ERRORS, moved_only=True, moved_shards=5, gate=Gate(c.GPU_NVLINK_ERRORS, "moved")
    ),
    # XGMI traffic per link (AMD Instinct): a link gone flat beside its rising siblings
    Query(c.GPU_XGMI_TRANSMIT),
    Query(c.GPU_XGMI_RECEIVE),
    Query(c.IB_PORT_STATE),
    Query(c.IB_PORT_RATE),
    # the error counters of every port (9 per port): through the exporter's per-port sum
    Query(c.IB_COUNTER, matchers=f'counter=~"{IB_USED}"', moved_only=True, gate=_IB_GATE),
    Query(c.IB_HW_COUNTER, matchers=f'counter=~"{IB_USED}"', moved_only=True, gate=_IB_GATE),
    # RoCE (analyzer.detectors.roce): the congestion and loss counters of hw_counters/, not
    # behind the error gate (congestion is not an error), and the PFC pause time and storm
    # events of each port's netdev; all moved-only (an idle port, or an InfiniBand one, costs
    # one changes() row, not a range read)
    Query(c.IB_HW_COUNTER, matchers=f'counter=~"{ROCE_USED}"', moved_only=True, label="roce"),
    Query(
        c.ROCE_PFC_PAUSE_SECONDS,
        keep=("node", "device", "port", "direction", "priority"),
        moved_only=True,
    ),
    Query(c.ROCE_PFC_STORM_EVENTS, keep=(*_PORT, "level"), moved_only=True),
    # NVLink fabric (NVL72, HGX with NVSwitch): the health bits per GPU, only those set
    # (a healthy fabric costs nothing), for analyzer.detectors.fabric; and each node's NVLink
    # domain (cluster UUID + clique id) from its GPUs' fabric info, an identity read every
    # 5 min, per node and domain (not per GPU): Window.nvlink_domain_of
    Query(c.GPU_FABRIC_HEALTH, keep=("node", "gpu", "check"), absent_means=0.0),
    Query(
        c.GPU_FABRIC_INFO,
        keep=("node", "cluster_uuid", "clique_id"),
        matchers='cluster_uuid!=""',
        every=300.0,
    ),
    # Fabric Manager / IMEX units per node (at most 2 series a node, only on nodes that run
    # them), for analyzer.detectors.fabric_services. Read whole, not sparse: an absent series
    # means "not installed here" (Fabric Manager on a GB200 compute tray), not "active", and
    # the domain's share is of the nodes that run the service
    Query(c.FABRIC_SERVICE_UP, keep=("node", "service")),
    # the IMEX daemon's own answer (nvidia-imex-ctl -q), one series a node where IMEX runs
    Query(c.FABRIC_IMEX_READY, keep=("node",)),
    # checkpoint storage, per (node, mount): analyzer.detectors.storage
    Query(c.STORAGE_PROBE_UP, keep=("node", "mount")),
    Query(c.STORAGE_PROBE_DURATION, keep=("node", "mount"), matchers='op="fsync"'),
)


def _sel(metric: catalog.MetricDef, extra: str) -> str:
    return f"{metric.name}{{{extra}}}" if extra else metric.name


def rows_matchers(labels: tuple[str, ...], keys: list[tuple[str, ...]]) -> list[str]:
    """Label matchers selecting exactly these rows, as few as possible: either one matcher set
    per node (``node="n"``, each other label the alternation of the values that node's rows
    have: a small superset) or one per combination of the other labels (``node=~"a|b"`` and
    each other label exact: exact), whichever needs fewer sets (each set is one selector of an
    ``or`` chain, which Prometheus evaluates step by step). Never one set across nodes and
    labels: its cross product can be 1,000x the rows."""
    n = labels.index("node")
    by_node: dict[str, list[tuple[str, ...]]] = {}
    by_rest: dict[tuple[str, ...], set[str]] = {}
    for k in keys:
        by_node.setdefault(k[n], []).append(k)
        by_rest.setdefault(k[:n] + k[n + 1 :], set()).add(k[n])
    if len(by_rest) < len(by_node):
        out = []
        for rest, nodes in sorted(by_rest.items()):
            parts = [f'node=~"{"|".join(regex_literal(x) for x in sorted(nodes))}"']
            others = [x for i, x in enumerate(labels) if i != n]
            parts += [f'{label}="{quote_value(v)}"' for label, v in zip(others, rest, strict=True)]
            out.append(",".join(parts))
        return out
    out = []
    for node, group in sorted(by_node.items()):
        parts = [f'node="{quote_value(node)}"']
        for i, label in enumerate(labels):
            if i == n:
                continue
            values = sorted({k[i] for k in group})
            if len(values) == 1:
                parts.append(f'{label}="{quote_value(values[0])}"')
            else:
                parts.append(f'{label}=~"{"|".join(regex_literal(v) for v in values)}"')
        out.append(",".join(parts))
    return out


def quote_value(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


@functools.lru_cache(maxsize=1 << 16)
def regex_literal(s: str) -> str:
    """``s`` as a literal inside a PromQL regex matcher. Cached: the same node, GPU and port
    names are rendered into the row matchers every cycle (5 % of a 1,024-node cycle's CPU)."""
    out = []
    for ch in s:
        if ch in r"\.+*?()|[]{}^$":
            out.append("\\\\" + ch)  # PromQL string escape of a regex escape
        elif ch == '"':
            out.append('\\"')
        else:
            out.append(ch)
    return "".join(out)


# PromQL's lexical pieces, enough to find the series selectors of an expression: strings
# (label_replace's arguments name fields), matcher blocks, ranges, numbers and durations,
# identifiers (metric names, functions, keywords, label names of a grouping), anything else
_TOKEN = re.compile(
    r"""(?P<str>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`)"""
    r"""|(?P<block>\{(?:[^{}"']|"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')*\})"""
    r"|(?P<range>\[[^\]]*\])|(?P<num>[0-9.][\w.]*)|(?P<ident>[a-zA-Z_:][\w:]*)|(?P<other>.)",
    re.S,
)
_KEYWORDS = frozenset({"and", "or", "unless", "bool", "offset", "inf", "nan", "atan2"})
_GROUPING = frozenset({"by", "without", "on", "ignoring", "group_left", "group_right"})


def with_matchers(expr: str, extra: str) -> str:
    """``expr`` with the label matchers ``extra`` added to every series selector in it
    (``x`` -> ``x{extra}``, ``x{a="1"}`` -> ``x{extra,a="1"}``); functions, keywords, strings,
    durations and the label lists of ``by``/``on``/... are left as they are."""

    def add(name: str, inner: str, ranged: bool) -> str:
        return f"{name}{{{extra},{inner}}}" if inner.strip() else f"{name}{{{extra}}}"

    return map_selectors(expr, add)


def over_time(expr: str, fn: str, window: float) -> str:
    """``expr`` with every series selector ``x`` read as ``fn(x[window])`` (the nodes an
    expression names within a window: ``last_over_time``). A selector already read over a
    range cannot be: ValueError."""

    def wrap(name: str, inner: str, ranged: bool) -> str:
        if ranged:
            raise ValueError(f"{expr!r}: {name} is read over a range already")
        sel = f"{name}{{{inner}}}" if inner.strip() else name
        return f"{fn}({sel}[{int(window)}s])"

    return map_selectors(expr, wrap)


def map_selectors(expr: str, fn: Callable[[str, str, bool], str]) -> str:
    """``expr`` with each series selector replaced by ``fn(name, matchers, ranged)``: its
    metric name ("" for ``{__name__=~...}``), the text inside its braces ("" for none), and
    whether a range ``[...]`` follows it (kept after the replacement)."""
    toks = [(m.lastgroup or "", m.group()) for m in _TOKEN.finditer(expr)]

    def ahead(i: int) -> int:  # the next token that is not white space
        while i < len(toks) and toks[i][1].isspace():
            i += 1
        return i

    def kind_at(i: int) -> tuple[str, str]:
        return toks[i] if i < len(toks) else ("", "")

    out: list[str] = []
    i = 0
    while i < len(toks):
        kind, text = toks[i]
        j = ahead(i + 1)
        nxt = kind_at(j)
        if kind == "ident" and text.lower() in _GROUPING:
            out.append(text)
            if nxt[1] == "(":  # the label list, as it is
                k = j
                while k < len(toks) and toks[k][1] != ")":
                    k += 1
                out.append("".join(t for _, t in toks[i + 1 : k + 1]))
                i = k + 1
            else:
                i += 1
            continue
        aggregation = nxt[0] == "ident" and nxt[1].lower() in _GROUPING  # max by (...)
        name = kind == "ident" and text.lower() not in _KEYWORDS and nxt[1] != "("
        if (name and not aggregation) or kind == "block":
            inner, end = "", i + 1
            if kind == "block":
                inner, text = text[1:-1], ""
            elif nxt[0] == "block":  # name{...}
                inner, end = nxt[1][1:-1], j + 1
            ranged = kind_at(ahead(end))[0] == "range"
            out.append(fn(text, inner, ranged))
            i = end
            continue
        out.append(text)
        i += 1
    return "".join(out)
