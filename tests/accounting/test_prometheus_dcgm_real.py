"""Failure accounting on a dcgm-exporter fleet, against a real Prometheus: presence, GPU
identity and job allocation come from dcgm-exporter's own series (its presence field with
``Hostname`` or 4.x's ``hostname``, ``modelName``, ``UUID``, and ``hpc_job``), so exposure and
ETTR need no gpuwarden exporter (the dcgm demo's Reliability board)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from accounting.prometheus_evidence import PrometheusEvidence
from exporter import catalog as c
from tests.accounting.helpers import prometheus_scraping
from tests.realcomp import Prometheus

pytestmark = pytest.mark.real
PRESENCE = c.DCGM_PRESENCE_FIELDS[0]
MODEL = "NVIDIA A100-SXM4-80GB"


def _scrape() -> bytes:
    """Two nodes as dcgm-exporter 3.x (Hostname) and 4.x (hostname) render them; job 7 holds
    GPU 0 of each, GPU 1 is idle (no hpc_job)."""
    lines = [f"# TYPE {PRESENCE} gauge"]
    for host_label, node in (("Hostname", "d1"), ("hostname", "d2")):
        for gpu in ("0", "1"):
            job = ',hpc_job="7"' if gpu == "0" else ""
            lines.append(
                f'{PRESENCE}{{gpu="{gpu}",UUID="GPU-{node}-{gpu}",device="nvidia{gpu}",'
                f'modelName="{MODEL}",{host_label}="{node}"{job}}} 0'  # 0 degrees: still there
            )
    return ("\n".join(lines) + "\n").encode()


@pytest.fixture(scope="module")
def prom() -> Iterator[Prometheus]:
    with prometheus_scraping(_scrape(), f"count_over_time({PRESENCE}[1m]) >= 4") as p:
        yield p


def test_a_dcgm_fleets_gpus_are_exposure_with_node_model_and_uuid(prom: Prometheus) -> None:
    evidence = PrometheusEvidence(prom.url, step_s=1.0)
    now = time.time()
    rows = evidence.exposure(now - 120, now)
    assert sorted((r.node, r.gpu, str(r.unit)) for r in rows) == [
        ("d1", "0", "GPU-d1-0"), ("d1", "1", "GPU-d1-1"),
        ("d2", "0", "GPU-d2-0"), ("d2", "1", "GPU-d2-1"),
    ]  # fmt: skip
    assert all(r.end is None and r.gpu_model == MODEL for r in rows)
    assert evidence.gpu_model("d1") == evidence.gpu_model("d2") == MODEL
    assert evidence.gpus("d1") == evidence.gpus("d2") == 2


def test_a_dcgm_fleets_hpc_job_label_is_the_job_run_on_every_gpu_it_holds(
    prom: Prometheus,
) -> None:
    evidence = PrometheusEvidence(prom.url, step_s=1.0)
    now = time.time()
    (run,) = evidence.runs(now - 120, now)
    assert (run.job_id, run.gpus, run.end) == ("7", 2, None)  # GPU 0 of d1 and of d2
    assert evidence.jobs("d2", "0", onset=now - 30, at=now - 20) == []  # runs on: not hit
