"""Outputs: findings as ``gpuwarden_finding`` series, ``/findings`` JSON, Alertmanager v2 alerts,
and the analyzer's self-metrics. Pure rendering; the HTTP edges live in :mod:`analyzer.service`.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from analyzer.engine import CycleStats
from analyzer.findings import CLUSTER, Finding, subject_labels
from exporter import catalog

ALERTNAME = "GpuwardenFinding"
DOMAIN = "domain"  # the scope label of a finding about an NVLink domain


def _family(m: catalog.MetricDef, rows: Iterable[tuple[Mapping[str, str], float]]) -> Metric:
    family = (CounterMetricFamily if m.type == "counter" else GaugeMetricFamily)(
        m.name, m.help, labels=list(m.labels)
    )
    for labels, value in rows:
        family.add_metric([labels[k] for k in m.labels], value)
    return family


class _Snapshot(Collector):
    """The families of one render, handed to prometheus_client's text writer (the same
    writer remediation's registry uses), so the text format has one implementation."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self.families)


def render_metrics(
    findings: Sequence[Finding],
    stats: CycleStats,
    source_errors: Mapping[str, int],
    reads: Any = None,
    replica: Any = None,
) -> str:
    """Prometheus text exposition of findings and self-metrics (``replica``: the sharded
    mode's :class:`analyzer.replicas.role.ReplicaStats`)."""
    families = [
        _family(catalog.FINDING, ((_labels(f, catalog.FINDING), 1.0) for f in findings)),
        _family(
            catalog.FINDING_CONFIDENCE,
            ((_labels(f, catalog.FINDING_CONFIDENCE), f.confidence) for f in findings),
        ),
        _family(
            catalog.ANALYZER_CYCLE_DURATION,
            (({"detector": d}, s) for d, s in sorted(stats.durations.items())),
        ),
        _family(
            catalog.ANALYZER_DETECTOR_ERRORS,
            (({"detector": d}, float(n)) for d, n in sorted(stats.errors.items())),
        ),
        _family(catalog.ANALYZER_CYCLES, [({}, float(stats.cycles))]),
        _family(catalog.ANALYZER_SERIES_READ, [({}, float(stats.series_read))]),
        _family(
            catalog.ANALYZER_SOURCE_ERRORS,
            (({"source": s}, float(n)) for s, n in sorted(source_errors.items())),
        ),
        _family(catalog.ANALYZER_LAST_CYCLE, [({}, stats.last_cycle)]),
        _family(catalog.ANALYZER_WINDOW_NODES, [({}, float(stats.nodes))]),
        *(_read_families(reads) if reads is not None else []),
        *(_replica_families(replica) if replica is not None else []),
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Snapshot(families))
    return generate_latest(registry).decode()


def _read_families(r: Any) -> list[Metric]:
    """The Prometheus source's read accounting (analyzer.sources.promhttp.QueryStats)."""

    def per_query(m: catalog.MetricDef, d: Mapping[str, float]) -> Metric:
        return _family(m, (({"query": q}, v) for q, v in sorted(d.items())))

    return [
        per_query(catalog.ANALYZER_QUERY_BYTES, r.bytes),
        per_query(catalog.ANALYZER_QUERY_SAMPLES, r.samples),
        per_query(catalog.ANALYZER_QUERY_SECONDS, r.seconds),
        per_query(catalog.ANALYZER_QUERY_FAILURES, r.failures),
        per_query(catalog.ANALYZER_QUERY_WARNINGS, r.warnings),
        per_query(catalog.ANALYZER_QUERY_SERIES, r.series),
        _family(catalog.ANALYZER_READ_DURATION, [({}, r.cycle_seconds)]),
        _family(catalog.ANALYZER_READ_BYTES, [({}, r.cycle_bytes)]),
        _family(catalog.ANALYZER_READ_SAMPLES, [({}, r.cycle_samples)]),
    ]


def _replica_families(r: Any) -> list[Metric]:
    me = {"replica": r.replica}
    return [
        _family(catalog.ANALYZER_REPLICA_UNITS, [(me, float(r.units))]),
        _family(catalog.ANALYZER_REPLICA_NODES, [(me, float(r.nodes))]),
        _family(catalog.ANALYZER_REPLICA_MEMBERS, [(me, float(r.members))]),
        _family(catalog.ANALYZER_REPLICA_LEADER, [(me, 1.0 if r.leader else 0.0)]),
        _family(catalog.ANALYZER_REPLICA_MISSED, [(me, float(r.missed))]),
        _family(catalog.ANALYZER_REPLICA_SCORES_MISSING, [(me, float(r.scores_missing))]),
        _family(catalog.ANALYZER_REPLICA_POOLS_DROPPED, [(me, float(r.pools_dropped))]),
        _family(catalog.ANALYZER_REPLICA_TOPOLOGY_FALLBACKS, [(me, float(r.topology_fallbacks))]),
        _family(catalog.ANALYZER_REPLICA_TOPOLOGY_WAIT, [(me, float(r.topology_waited))]),
        _family(catalog.ANALYZER_REPLICA_MEMORY_ADOPTED, [(me, float(r.memory_adopted))]),
        _family(catalog.ANALYZER_REPLICA_MEMORY_FRESH, [(me, float(r.memory_fresh))]),
    ]


def _labels(f: Finding, metric: catalog.MetricDef) -> dict[str, str]:
    """The finding's values for exactly the metric's catalogue labels (one source for the
    finding series, its confidence series and the Alertmanager alert)."""
    return {k: str(getattr(f, k)) for k in metric.labels}


def findings_json(
    findings: Sequence[Finding], now: float, missing: Sequence[str] = ()
) -> dict[str, Any]:
    """``missing_data``: series families the source could not read for this cycle (a
    degraded cycle: its findings may lack what those series would have shown)."""
    return {
        "generated_at": now,
        "count": len(findings),
        "missing_data": list(missing),
        "findings": [f.to_json() for f in findings],
    }


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, tz=dt.UTC).isoformat().replace("+00:00", "Z")


def marginal_annotations(f: Finding) -> dict[str, str]:
    """metric, value, peer percentile, group size and the PromQL of an ``avoid`` finding."""
    from analyzer.detectors.marginal import promql_for

    out = {k: f"{f.evidence[k]:.6g}" for k in ("value", "peer_percentile", "group_size")
           if k in f.evidence}  # fmt: skip
    signal = f.subject.removeprefix("signal=")
    return {**out, "metric": signal, "promql": promql_for(signal)}


def alertmanager_alerts(
    findings: Sequence[Finding], now: float, resolve_after: float, generator_url: str = ""
) -> list[dict[str, Any]]:
    """Alertmanager v2 ``POST /api/v2/alerts`` body: one alert per finding, ending
    ``resolve_after`` seconds from now unless re-sent (so vanished findings resolve)."""
    out = []
    for f in findings:
        labels = {
            "alertname": ALERTNAME,
            **_labels(f, catalog.FINDING),
            "fault_class": f.fault_class,
            **subject_labels(f.subject),
        }
        if "xid" in f.evidence:
            labels["xid"] = str(int(f.evidence["xid"]))
        if f.node == CLUSTER:  # a shared fault (storage): about no node; remediation reads scope
            del labels["node"]
            labels["scope"] = CLUSTER
        elif "nvlink_domain" in labels:  # a whole NVLink domain (its switch tray, fabric, IMEX):
            # about no node, as alerts/fabric.rules.yml's domain alerts; remediation reads
            # scope + nvlink_domain (remediation/nvlink.py) and holds the domain's nodes
            del labels["node"]
            labels["scope"] = DOMAIN
        evidence = ", ".join(f"{k}={v:.4g}" for k, v in f.evidence.items())
        alert: dict[str, Any] = {
            "labels": labels,
            "annotations": {
                "summary": f.summary or f.kind,
                "description": f"{f.kind} on {f.node} {f.subject}: {evidence}"
                f" (confidence {f.confidence:.2f})",
            },
            "startsAt": _iso(f.since),
            "endsAt": _iso(now + resolve_after),
        }
        if f.action == "avoid":  # placement evidence, read by remediation's placement tiers
            alert["annotations"].update(marginal_annotations(f))
        if generator_url:
            alert["generatorURL"] = generator_url
        out.append(alert)
    return out
