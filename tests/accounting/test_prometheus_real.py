"""PrometheusEvidence against a real Prometheus scraping a stand-in node: its PromQL is
valid and presence, allocation and GPU identity come back as the ledger needs them."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accounting.prometheus_evidence import PrometheusEvidence
from exporter import catalog as c
from remediation.clock import SystemClock
from tests.accounting.helpers import prometheus_scraping
from tests.accounting.helpers import service as accounting_service
from tests.realcomp import Prometheus
from tests.remediation.helpers import alert

pytestmark = pytest.mark.real


def _node_metrics() -> bytes:
    reg = CollectorRegistry()
    info = Gauge(c.GPU_INFO.name, c.GPU_INFO.help, list(c.GPU_INFO.labels), registry=reg)
    alloc = Gauge(
        c.GPU_ALLOCATION_INFO.name,
        c.GPU_ALLOCATION_INFO.help,
        list(c.GPU_ALLOCATION_INFO.labels),
        registry=reg,
    )
    up = Gauge(c.GPU_UP.name, c.GPU_UP.help, list(c.GPU_UP.labels), registry=reg)
    up.labels("n1", "0", "GPU-0", "fallen_off_bus").set(0)  # GPU 0 lost since the first scrape
    up.labels("n1", "1", "GPU-1", "").set(1)
    for g in range(2):
        info.labels("n1", str(g), f"GPU-{g}", "NVIDIA H100 80GB HBM3", "0", f"S{g}", "v", "d").set(
            1
        )
        alloc.labels("n1", str(g), f"GPU-{g}", "42", "slurm").set(1)
    return generate_latest(reg)


STARTED = time.time()


@pytest.fixture(scope="module")
def prom() -> Iterator[Prometheus]:
    with prometheus_scraping(_node_metrics(), f"count_over_time({c.GPU_INFO.name}[1m]) >= 4") as p:
        yield p


def test_presence_allocation_and_identity_come_back_from_a_real_prometheus(
    prom: Prometheus,
) -> None:
    evidence = PrometheusEvidence(prom.url, step_s=1.0)
    now = time.time()
    rows = evidence.exposure(now - 120, now)
    assert sorted(str(r.unit) for r in rows) == ["S0", "S1"]
    assert all(r.end is None and r.gpu_model == "NVIDIA H100 80GB HBM3" for r in rows)
    assert evidence.gpu_model("n1") == "NVIDIA H100 80GB HBM3"
    assert evidence.gpus("n1") == 2
    (run,) = evidence.runs(now - 120, now)
    assert run.job_id == "42" and run.gpus == 2 and run.end is None
    # the job runs on: a failure that did not stop it did not hit it
    assert evidence.jobs("n1", "0", onset=now - 30, at=now - 20) == []
    assert evidence.onset("n1", "1", detected=now) is None  # no finding, GPU up: no onset


def test_a_lost_gpu_reported_as_up_zero_gives_its_onset_from_a_real_prometheus(
    prom: Prometheus,
) -> None:
    # gpu_up is 0 for GPU 0 from the first scrape: the onset is that scrape, not "unknown"
    # (a query of "gpu_up == 0" returns those zeros, and zeros are not evidence)
    evidence = PrometheusEvidence(prom.url, step_s=1.0)
    now = time.time()
    onset = evidence.onset("n1", "0", detected=now)
    assert onset is not None
    # four scrapes (1 s apart) were waited for; the range's step grid adds up to a second
    assert STARTED - 2.0 <= onset <= now - 1.0
    assert evidence.onset("n1", None, detected=now) == onset  # the node's: any GPU lost


def test_the_service_given_its_prometheus_serves_the_ettr_series(
    prom: Prometheus, tmp_path: Path
) -> None:
    # the demo's case: the remediation service with --prometheus (the umbrella wires accounting
    # in) exports ETTR from the job runs Prometheus knows; job 42 runs on, hit by nothing
    svc = accounting_service(tmp_path, clock=SystemClock(), prometheus=prom.url)
    a = alert(
        node="n1", action="notify", starts_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    )
    svc.journal.accept([a], time.time())
    svc.engine.decide(a)
    time.sleep(0.5)
    try:
        families = {
            f.name: f for f in text_string_to_metric_families(svc.metrics.render().decode())
        }
    finally:
        svc.journal.close()
    ettr = {s.labels["weighting"]: s.value for s in families[c.ACCOUNTING_ETTR.name].samples}
    assert ettr == {"gpu_hour": 1.0, "job_count": 1.0}
