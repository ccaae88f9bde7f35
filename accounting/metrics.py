"""The live ``gpuwarden_accounting_*`` series, served on the remediation service's /metrics.

A custom collector: each scrape recomputes the report from the journal (read-only, cached
for ``ttl_s``) up to the clock's now, so a restarted service exports the same values from
the same journal: nothing is kept in memory that the journal does not hold. Exposure is
the known nodes' GPUs (the topology file's ``inventory`` section: a node's ``gpus`` and
``model``, else ``gpus_per_node`` and unknown) from the journal's first record to now, minus the journal's
out-of-service intervals. ETTR is exported when an ``Evidence`` (Prometheus: the service's
``--prometheus``) is injected and knows the job runs; from the journal alone it is unknown
and absent, as it is for a scrape when Prometheus cannot answer.
"""

from __future__ import annotations

import logging
import statistics
from collections.abc import Callable, Iterator, Mapping, Sequence
from http.client import HTTPException
from pathlib import Path

import yaml
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from accounting import ledger, outages, report
from accounting.report import Report
from common.settings import SettingsError
from exporter import catalog as c

BOUNDS = ("estimate", "lower90", "upper90")
LOG = logging.getLogger("gpuwarden.accounting")


def _gauge(d: c.MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(d.name, d.help, labels=list(d.labels))


def node_facts(
    topology_file: Path | None, nodes: Sequence[str]
) -> tuple[dict[str, int], dict[str, str]]:
    """GPUs per node and GPU model per node from the topology file's ``inventory`` section,
    in the analyzer inventory's shape (``defaults`` for every node, ``nodes`` per node)::

        inventory:
          defaults: {gpus: 8, model: H100}
          nodes: {gb200-001: {gpus: 4, model: GB200}}

    A section of its own: a key under ``nodes`` would be taken for a failure domain by the
    budgets and placement. A ``gpus`` that is not a count >= 1 stops the start."""
    if topology_file is None:
        return {}, {}
    data = yaml.safe_load(Path(topology_file).read_text()) or {}
    section = data.get("inventory") or {} if isinstance(data, dict) else {}
    if not isinstance(section, dict):
        raise SettingsError(f"topology {topology_file}: inventory: expected a mapping")
    defaults = section.get("defaults") or {}
    per_node = section.get("nodes") or {}
    if not isinstance(defaults, dict) or not isinstance(per_node, dict):
        raise SettingsError(
            f"topology {topology_file}: inventory: expected defaults/nodes mappings"
        )
    gpus, models = {}, {}
    for node in sorted({*nodes, *map(str, per_node)}):
        facts = {**defaults, **(per_node.get(node) or {})}
        if "gpus" in facts:
            value = facts["gpus"]
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise SettingsError(
                    f"topology {topology_file}: inventory {node}.gpus: {value!r} is not a count >= 1"
                )
            gpus[node] = value
        if facts.get("model"):
            models[node] = str(facts["model"])
    return gpus, models


def build_report(
    path: Path,
    now: float,
    nodes: Sequence[str],
    gpus_per_node: int = 8,
    gpus: Mapping[str, int] | None = None,
    models: Mapping[str, str] | None = None,
    evidence: ledger.Evidence | None = None,
) -> Report:
    evidence = evidence or ledger.NoEvidence(gpus_per_node, gpus, models)
    incidents, exposure, runs = ledger.from_journal(path, evidence, now=now)
    first = ledger.first_event(path)
    starts = [t for t in (first,) if t is not None] + [i.onset for i in incidents]
    if not starts:
        return report.build([], [], until=now)
    since = min(starts)
    if not exposure:  # no presence series: the known nodes, from the first record on
        exposure = outages.fleet_exposure(nodes, incidents, since, now, gpus_per_node, models, gpus)
    return report.build(incidents, exposure, since=since, until=max(now, since + 1.0), runs=runs)


def families(rep: Report) -> Iterator[GaugeMetricFamily]:
    lost, count = _gauge(c.ACCOUNTING_LOST), _gauge(c.ACCOUNTING_INCIDENTS)
    exposure, mtbf = _gauge(c.ACCOUNTING_EXPOSURE), _gauge(c.ACCOUNTING_MTBF)
    totals: dict[tuple[str, str], float] = {}
    for cost in rep.costs:
        comp = cost.incident.component
        for cause, hours in (
            ("restart", cost.restart_h),
            ("recompute", cost.recompute_known_h),
            ("capacity", cost.capacity_h),
        ):
            totals[(cause, comp)] = totals.get((cause, comp), 0.0) + hours * 3600.0
    for (cause, comp), seconds in sorted(totals.items()):
        lost.add_metric([cause, comp], seconds)
    for cell in rep.cells:
        labels = [cell.gpu_model, cell.component]
        count.add_metric(labels, cell.failures)
        if cell.exposure_hours is not None:
            exposure.add_metric(labels, cell.exposure_hours * 3600.0)
        bounds = (cell.mtbf_hours, cell.lower90, cell.upper90)
        for bound, value in zip(BOUNDS, bounds, strict=True):
            if value is not None:
                mtbf.add_metric([*labels, bound], value * 3600.0)
    ettr = _gauge(c.ACCOUNTING_ETTR)
    for weighting, value in (
        ("gpu_hour", rep.ettr.gpu_hour_weighted),
        ("job_count", rep.ettr.job_count_weighted),
    ):
        if value is not None:
            ettr.add_metric([weighting], value)
    unknown = _gauge(c.ACCOUNTING_UNKNOWN_RECOMPUTE)
    unknown.add_metric([], len(rep.unknown_recompute))
    yield from (lost, count, exposure, mtbf, ettr, unknown, _stages(rep))


def _stages(rep: Report) -> GaugeMetricFamily:
    stage = _gauge(c.ACCOUNTING_STAGE)
    for name, values in (
        ("ttd", [x.ttd_s for x in rep.costs]),
        ("ttm", [x.ttm_s for x in rep.costs if x.ttm_s is not None]),
        ("ttr", [x.ttr_s for x in rep.costs]),
    ):
        if values:
            ordered = sorted(values)
            stage.add_metric([name, "median"], statistics.median(ordered))
            stage.add_metric([name, "p90"], ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))])
    return stage


class AccountingCollector(Collector):
    def __init__(
        self,
        state_db: Path,
        now: Callable[[], float],
        nodes: Sequence[str] = (),
        gpus_per_node: int = 8,
        ttl_s: float = 60.0,
        gpus: Mapping[str, int] | None = None,
        models: Mapping[str, str] | None = None,
        evidence: ledger.Evidence | None = None,
    ) -> None:
        self.state_db, self.now, self.nodes = state_db, now, list(nodes)
        self.gpus_per_node, self.ttl_s = gpus_per_node, ttl_s
        self.gpus, self.models, self.evidence = dict(gpus or {}), dict(models or {}), evidence
        self._cached: tuple[float, list[GaugeMetricFamily]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.now()
        if self._cached is None or now - self._cached[0] >= self.ttl_s or now < self._cached[0]:
            self._cached = (now, list(families(self._report(now))))
        yield from self._cached[1]

    def _report(self, now: float) -> Report:
        """With Prometheus when given; when it cannot answer (down, slow, a bad reply),
        from the journal alone for this scrape: observing fails soft, and the series
        Prometheus alone can give (ETTR) are absent rather than the scrape failing."""
        facts = (self.state_db, now, self.nodes, self.gpus_per_node, self.gpus, self.models)
        if self.evidence is None:
            return build_report(*facts)
        try:
            return build_report(*facts, self.evidence)
        except (OSError, ValueError, KeyError, TypeError, HTTPException) as exc:
            LOG.warning("accounting: Prometheus evidence unavailable (%s); journal only", exc)
            return build_report(*facts)
