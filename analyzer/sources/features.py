"""Feature reduction: the per-GPU and per-node inputs the detectors read, as PromQL that a rule
engine records (issue 33). Pure data and string rendering; no I/O.

Where this sits: the analyzer reads raw series (:mod:`analyzer.sources.queries`) and reduces
them in numpy. At 100,000 GPUs the reduction moves to the site's rule engine (sharded
Prometheus, vmalert over a VictoriaMetrics cluster, Mimir's or Thanos' ruler):
``alerts/generate_feature_rules.py`` renders every :class:`Feature` once per shard, each shard
selecting its nodes by the ``gpuwarden_shard`` target label (a hashmod of ``node`` at scrape
time, :func:`shard_of`). Each feature is one expression over raw series (never over another
recording: vmalert writes its results asynchronously, so a rule reading another rule of the
same group may read the previous cycle's value), equal to what the analyzer computes from
the raw read:

- ``mean``: the window mean of a gauge per row, ``avg_over_time`` over ``span`` seconds (the
  straggler detector averages its last 12 samples at 15 s: 180 s);
- ``increase``: a counter's rise over the analyzer's window, ``M - M offset window``, only
  rows that rose (sparse: a healthy fleet records nothing; the analyzer reads only moved
  counters too, ``Query.moved_only``). Equal to :func:`analyzer.detectors.series.total_increase`
  for a counter present at both ends of the window that did not reset inside it; a row born
  or reset inside the window has no feature sample (read it raw);
- ``lost``: per node, how many of its GPUs report ``up == 0`` now;
- ``moved``: the analyzer's own moved-counter check (``Query.moved_expr``: rows whose counter
  changed within the window, the value how often), which the Prometheus source reads instead
  of scanning the raw counters of every node the rule engine covers;
- ``present``: per node, its GPUs reporting; a node with this series at the read's time is
  covered by the rule engine (the source falls back to raw reads for the others);
- ``job_z``: the robust z-score of each GPU's sample among the GPUs of its job
  (``gpu_allocation_info``'s ``job_id``, the domain), median and MAD with the peer detector's
  floors (:data:`analyzer.detectors.peer.FEATURES`): :func:`analyzer.detectors.series.robust_z`
  with ``floor = max(abs, rel * |median|)`` per step. A job spans shards, so its statistics
  come from the job's GPUs in every shard, in two stages: the *job statistics*
  (:attr:`Feature.job_stats`: the median and the MAD per job, ``gpuwarden_job:<metric>:median``
  and ``:mad``) are recorded once for the whole fleet, and each shard scores its own GPUs
  against the recorded ones. Scoring inside every shard's group read the whole fleet once per
  shard (measured: ~22 s a group at 12,500 nodes, over the interval); the stages read it once.
  Both need the global view (a VictoriaMetrics cluster, Mimir, Thanos Query), never one
  Prometheus shard's. The price is a lag: a shard scores the sample at ``t`` against the
  statistics the last evaluation of the statistics group recorded, at most one interval old
  (exact where the statistics group is evaluated first, as in promtool's ``group_eval_order``).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from exporter import catalog

SHARD_LABEL = "gpuwarden_shard"
KINDS = ("mean", "increase", "lost", "moved", "present", "job_z")
# a node's own series: any shard can compute these
NODE_LOCAL = ("mean", "increase", "lost", "moved", "present")
JOB_STATS = ("median", "mad")  # job_z's statistics stage, recorded once for the fleet


@dataclass(frozen=True)
class Feature:
    metric: catalog.MetricDef
    kind: str
    labels: tuple[str, ...]  # the rows (the analyzer query's labels)
    span: float = 0.0  # seconds: the mean's window, the increase's window
    matchers: str = ""  # extra label matchers on the raw series
    floor_abs: float = 0.0  # job_z: the robust scale's absolute floor
    floor_rel: float = 0.0  # job_z: its floor as a fraction of the job's |median|

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"{self.metric.name}: feature kind must be one of {KINDS}")
        if self.kind in ("mean", "increase", "moved") and self.span <= 0:
            raise ValueError(f"{self.metric.name}: a {self.kind} needs a span in seconds")

    @property
    def record(self) -> str:
        """``gpuwarden_feature:<metric>:<reduction>`` (the level:metric:operation convention)."""
        base = self.metric.name.removeprefix("gpuwarden_").removesuffix("_total")
        op = {
            "mean": f"avg{_dur(self.span)}",
            "increase": f"increase{_dur(self.span)}",
            "lost": "lost_by_node",
            "moved": f"changes{_dur(self.span)}",
            "present": "count_by_node",
            "job_z": "job_z",
        }[self.kind]
        return f"gpuwarden_feature:{base}:{op}"

    @property
    def node_local(self) -> bool:
        return self.kind in NODE_LOCAL

    def expr(self, shard: int | None = None) -> str:
        """The PromQL; ``shard``: only the rows of that shard (all when None)."""
        sel = self._selector(shard)
        by = ",".join((*self.labels, SHARD_LABEL))
        if self.kind == "mean":
            return f"max by ({by}) (avg_over_time({sel}[{_dur(self.span)}]))"
        if self.kind == "increase":
            off = _dur(self.span)
            return f"max by ({by}) ({sel}) - max by ({by}) ({sel} offset {off}) > 0"
        if self.kind == "lost":
            return f"count by (node,{SHARD_LABEL}) ({sel} == 0)"
        if self.kind == "moved":  # Query.moved_expr's shape, the range in seconds as there
            return f"max by ({by}) (changes({sel}[{int(self.span)}s]) > 0)"
        if self.kind == "present":
            return f"count by (node,{SHARD_LABEL}) ({sel})"
        return self._job_z(shard)

    def _selector(self, shard: int | None) -> str:
        m = [x for x in (self.matchers, "" if shard is None else f'{SHARD_LABEL}="{shard}"') if x]
        return f"{self.metric.name}{{{','.join(m)}}}" if m else self.metric.name

    def _in_job(self, shard: int | None) -> str:
        """Each GPU's sample with its job's ``job_id`` (GPUs in no job drop out); ``shard``:
        only that shard's GPUs, their allocations read from that shard too (the node's
        exporter serves both, so both carry its shard label)."""
        only = "" if shard is None else f'{{{SHARD_LABEL}="{shard}"}}'
        alloc = f"group by (node,gpu,job_id) ({catalog.GPU_ALLOCATION_INFO.name}{only})"
        keep = f"max by (node,gpu,{SHARD_LABEL})"
        return f"({keep} ({self._selector(shard)}) * on (node,gpu) group_left (job_id) ({alloc}))"

    def job_record(self, stat: str) -> str:
        """``gpuwarden_job:<metric>:<stat>``, one of the job statistics (``median``, ``mad``)."""
        if self.kind != "job_z" or stat not in JOB_STATS:
            raise ValueError(f"{self.metric.name}: no job statistic {stat!r} for a {self.kind}")
        base = self.metric.name.removeprefix("gpuwarden_")
        return f"gpuwarden_job:{base}:{stat}"

    @property
    def job_stats(self) -> tuple[tuple[str, str], ...]:
        """``job_z`` only: (record, PromQL) of the job statistics stage, the median and the
        MAD of the job's GPUs in every shard, once for the fleet. Each rule is whole in itself
        (the MAD computes its own median): a rule engine that writes results asynchronously
        (vmalert) would hand a rule reading another rule of its group a cycle-old value."""
        x_all = self._in_job(None)
        med = f"quantile by (job_id) (0.5, {x_all})"
        mad = f"quantile by (job_id) (0.5, abs({x_all} - on (job_id) group_left () ({med})))"
        return ((self.job_record("median"), med), (self.job_record("mad"), mad))

    def _job_z(self, shard: int | None) -> str:
        """(x - median) / max(1.4826 * MAD, abs floor, rel floor * |median|) within each job,
        for the shard's GPUs, against the job statistics recorded for the fleet."""
        med = f"max by (job_id) ({self.job_record('median')})"
        mad = f"max by (job_id) ({self.job_record('mad')})"
        floor = max(self.floor_abs, 1e-9)
        rel = f"clamp_min({self.floor_rel:g} * abs({med}), {floor:g})"
        scale = f"((1.4826 * {mad}) > {rel} or {rel})"
        x = self._in_job(shard)
        return f"({x} - on (job_id) group_left () {med}) / on (job_id) group_left () {scale}"


def _dur(seconds: float) -> str:
    s = int(seconds)
    if s % 3600 == 0:
        return f"{s // 3600}h"
    if s % 60 == 0:
        return f"{s // 60}m"
    return f"{s}s"


def shard_of(node: str, shards: int) -> int:
    """The shard Prometheus' ``hashmod`` relabel action gives ``node``: the last 8 bytes of
    the MD5 of the value, big-endian, modulo ``shards`` (prometheus/model/relabel)."""
    digest = hashlib.md5(node.encode(), usedforsecurity=False).digest()
    return int.from_bytes(digest[8:], "big") % shards


c = catalog
MEAN_SPAN = 180.0  # the straggler detector's n=12 samples at the analyzer's 15 s step
WINDOW = 600.0  # the analyzer's window (AnalyzerSettings.window)
_GPU = ("node", "gpu")
FEATURES: tuple[Feature, ...] = (
    # straggler / fail-slow / peer signals, averaged over the detector's samples
    *(
        Feature(m, "mean", _GPU, MEAN_SPAN)
        for m in (
            c.GPU_UTILIZATION,
            c.GPU_SM_CLOCK,
            c.GPU_SM_ACTIVE,
            c.GPU_TENSOR_ACTIVE,
            c.GPU_POWER,
            c.GPU_TEMPERATURE,
            c.GPU_MEMORY_TEMPERATURE,
        )
    ),
    Feature(c.JOB_STEP_SECONDS, "mean", ("node", "gpu", "job_id"), MEAN_SPAN),
    # error counters: the rise over the window, only rows that rose. Not NVLink's: over its
    # 576 series a node, ``M - M offset`` cost as much as every other node-local rule together
    # (1.0 of 2.1 s a 256-node shard, benchmarks/bench_features.py); its moved check below
    # is what the analyzer reads
    Feature(c.GPU_ECC_ERRORS, "increase", ("node", "gpu", "error_type", "counter_type"), WINDOW),
    Feature(c.GPU_XID_ERRORS, "increase", ("node", "gpu", "xid"), WINDOW),
    *(
        Feature(
            m,
            "increase",
            ("node", "device", "port", "counter"),
            WINDOW,
            matchers=f'counter=~"{"|".join(catalog.IB_ERROR_COUNTERS)}"',
        )
        for m in (c.IB_COUNTER, c.IB_HW_COUNTER)
    ),
    # the moved-counter checks of the analyzer's moved-only queries (its QUERIES' labels)
    Feature(c.GPU_ECC_ERRORS, "moved", ("node", "gpu", "error_type", "counter_type"), WINDOW),
    Feature(c.NVLINK_ERRORS, "moved", ("node", "gpu", "link", "error_type"), WINDOW),
    *(
        Feature(
            m,
            "moved",
            ("node", "device", "port", "counter"),
            WINDOW,
            matchers=f'counter=~"{"|".join(catalog.IB_ERROR_COUNTERS)}"',
        )
        for m in (c.IB_COUNTER, c.IB_HW_COUNTER)
    ),
    # per node: GPUs that report down now; GPUs reporting (the rule engine covers the node)
    Feature(c.GPU_UP, "lost", ("node",)),
    Feature(c.GPU_UP, "present", ("node",)),
    # the peer detector's per-sample robust z-scores, within the job (its floors)
    Feature(c.GPU_SM_CLOCK, "job_z", _GPU, floor_rel=0.01),
    Feature(c.GPU_TEMPERATURE, "job_z", _GPU, floor_abs=1.5),
    Feature(c.GPU_POWER, "job_z", _GPU, floor_abs=5.0, floor_rel=0.02),
    Feature(c.GPU_UTILIZATION, "job_z", _GPU, floor_abs=0.02),
)
