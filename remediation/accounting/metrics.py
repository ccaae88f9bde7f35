"""The live ``gpuwarden_accounting_*`` series, served on the remediation service's /metrics.

A custom collector: each scrape recomputes the report from the journal (read-only, cached
for ``ttl_s``) up to the clock's now, so a restarted service exports the same values from
the same journal: nothing is kept in memory that the journal does not hold. Exposure is
the known nodes' GPUs (the topology file) minus the journal's out-of-service intervals.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from exporter import catalog as c
from remediation.accounting import ledger, outages, report
from remediation.accounting.report import Report

BOUNDS = ("estimate", "lower90", "upper90")


def _gauge(d: c.MetricDef) -> GaugeMetricFamily:
    return GaugeMetricFamily(d.name, d.help, labels=list(d.labels))


def build_report(path: Path, now: float, nodes: Sequence[str], gpus_per_node: int) -> Report:
    incidents, _, _ = ledger.from_journal(path)
    if not incidents:
        return report.build([], [], until=now)
    since = min(i.onset for i in incidents)
    exposure = outages.fleet_exposure(nodes, incidents, since, now, gpus_per_node)
    return report.build(incidents, exposure, since=since, until=max(now, since + 1.0))


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
    ) -> None:
        self.state_db, self.now, self.nodes = state_db, now, list(nodes)
        self.gpus_per_node, self.ttl_s = gpus_per_node, ttl_s
        self._cached: tuple[float, list[GaugeMetricFamily]] | None = None

    def collect(self) -> Iterator[GaugeMetricFamily]:
        now = self.now()
        if self._cached is None or now - self._cached[0] >= self.ttl_s or now < self._cached[0]:
            rep = build_report(self.state_db, now, self.nodes, self.gpus_per_node)
            self._cached = (now, list(families(rep)))
        yield from self._cached[1]
