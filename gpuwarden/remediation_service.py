"""`gpuwarden remediation` and `gpuwarden-remediation`: the remediation service with failure
accounting's live series (``gpuwarden_accounting_*``) on its /metrics.

Where it sits: the umbrella assembles the parts. Remediation never imports accounting
(docs/architecture.md, the import contracts); this module hands the service accounting's
collector through ``remediation.service.build``'s ``collectors``. ``python -m remediation``
runs the bare service, without these series.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from prometheus_client.registry import Collector

from accounting.metrics import AccountingCollector, node_facts
from accounting.prometheus_evidence import PrometheusEvidence, UrllibApi
from remediation import cli, service
from remediation.clock import Clock
from remediation.settings import Settings

PROMETHEUS_TIMEOUT_S = 10.0  # per query, on the scrape's thread: a slow Prometheus costs ETTR


def collectors(s: Settings, clock: Clock, nodes: Sequence[str]) -> list[Collector]:
    """Accounting's collector over the service's journal; a node's GPU count and model from
    the topology file's ``inventory`` section (a bad count stops the start); with
    ``--prometheus``, exposure, jobs and ETTR from there."""
    gpus, models = node_facts(s.topology, list(nodes))
    evidence = None
    if s.prometheus:  # exposure, the jobs hit and the job runs (ETTR) from Prometheus
        evidence = PrometheusEvidence(UrllibApi(s.prometheus, timeout_s=PROMETHEUS_TIMEOUT_S))
    return [
        AccountingCollector(
            s.state_db, clock.now, nodes=nodes, gpus=gpus, models=models, evidence=evidence
        )
    ]


def build(s: Settings, **kw: Any) -> service.Service:
    """``remediation.service.build`` with accounting's collector (tests, the lab)."""
    return service.build(s, collectors=collectors, **kw)


def main(argv: Sequence[str] | None = None) -> int:
    return cli.main(argv, collectors=collectors)
