"""A real Prometheus over the fleet simulator, for the dashboard data checks of either telemetry.

The simulator serves the fleet through the real collectors (as gpuwarden's exporter, or as
dcgm-exporter + node_exporter); a stand-in serves one sample of every catalogue metric the
simulator does not produce (analyzer, remediation, ...), built from the catalogue itself, so
every metric a dashboard reads exists and every query can be judged; a real Alertmanager is
scraped for its own counters. Used by test_queries_data.py (native) and
test_queries_data_dcgm.py (dcgm-exporter).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import urllib.request
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from exporter import catalog
from tests.dashboards.board import query_variables, substitute, variable_selector
from tests.realcomp import Prometheus, free_port, wait_until

STAND_IN_LABELS = {
    "gpu": "0", "uuid": "GPU-stand-in", "kind": "straggler", "severity": "warning",
    "action": "notify", "subject": "gpu=0", "detector": "peer_compare", "state": "drained",
    "verdict": "allow", "guard": "policy", "outcome": "ok", "backend": "dry-run", "code": "200",
    "status": "firing", "reason": "unauthorized", "source": "prometheus", "collector": "gpu",
    "cause": "single_bit", "scheduler": "slurm", "job_id": "1234",
}  # fmt: skip

# Which stand-in path serves a catalogue metric: by the service that owns it.
OWNERS = {catalog.PREFIX + "analyzer": "/analyzer", catalog.FINDING.name: "/analyzer",
          catalog.PREFIX + "remediation": "/remediation",
          catalog.PREFIX + "accounting": "/remediation"}  # fmt: skip
EXPORTER = "/exporter"
JOBS = {"/analyzer": "gpuwarden-analyzer", "/remediation": "gpuwarden-remediation",
        EXPORTER: "gpuwarden-exporter-stand-in"}  # fmt: skip


def owner(name: str) -> str:
    return next((path for prefix, path in OWNERS.items() if name.startswith(prefix)), EXPORTER)


def stand_in(
    exported: set[str], node: str, paths: Collection[str] | None = None
) -> dict[str, bytes]:
    """Path -> one sample of every catalogue metric the simulator does not export (only those
    served under ``paths``, when given: a dcgm fleet has no gpuwarden exporter)."""
    registries: dict[str, CollectorRegistry] = {}
    for m in catalog.all_metrics():
        if m.name in exported or m.name.startswith("DCGM_"):
            continue
        if paths is not None and owner(m.name) not in paths:
            continue
        registry = registries.setdefault(owner(m.name), CollectorRegistry())
        labels = {k: node if k == "node" else STAND_IN_LABELS.get(k, "stand-in") for k in m.labels}
        if m.type == "histogram":
            h = Histogram(m.name, m.help, m.labels, buckets=m.buckets, registry=registry)
            (h.labels(**labels) if labels else h).observe(3.0)
        elif m.type == "counter":
            c = Counter(m.name, m.help, m.labels, registry=registry)
            (c.labels(**labels) if labels else c).inc()
        else:
            gauge = Gauge(m.name, m.help, m.labels, registry=registry)
            (gauge.labels(**labels) if labels else gauge).set(1)
    return {path: generate_latest(r) for path, r in registries.items()}


@contextlib.contextmanager
def simulator(d: Path, nodes: int, *extra: str) -> Iterator[tuple[str, Path]]:
    """The fleet simulator (``extra``: more of its flags, e.g. ``--telemetry``) -> (url, file_sd)."""
    port, sd = free_port(), d / "targets.json"
    cmd = [sys.executable, "-m", "gpuwarden", "simulate", "--nodes", str(nodes), "--seed", "3",
           "--listen", f"127.0.0.1:{port}", "--file-sd", str(sd), "--log-level", "warning",
           *extra]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(sd.exists, 30, what="simulator file_sd")
        yield f"http://127.0.0.1:{port}", sd
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


def inject(sim: str, fault: dict[str, Any]) -> None:
    req = urllib.request.Request(
        f"{sim}/inject", json.dumps(fault).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 201


def config(sd: Path, stand_in_port: int, alertmanager: str, rule_files: list[str],
           stand_in_jobs: dict[str, str] = JOBS) -> str:  # fmt: skip
    """prometheus.yml: the simulator's targets, the stand-in's paths (path -> job name),
    Alertmanager; the rules."""
    # honor_labels: the series carry their own node label, equal to the target's.
    jobs = [{"job_name": "gpuwarden-exporter", "honor_labels": True,
             "file_sd_configs": [{"files": [str(sd)]}]}]  # fmt: skip
    jobs += [
        {"job_name": job, "metrics_path": path,
         "static_configs": [{"targets": [f"127.0.0.1:{stand_in_port}"]}]}
        for path, job in stand_in_jobs.items()
    ]  # fmt: skip
    jobs.append({"job_name": "alertmanager",
                 "static_configs": [{"targets": [alertmanager.removeprefix("http://")]}]})  # fmt: skip
    return json.dumps(
        {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s",
                       "evaluation_interval": "2s"},
            "rule_files": rule_files,
            "alerting": {"alertmanagers": [{"static_configs": [
                {"targets": [alertmanager.removeprefix("http://")]}]}]},
            "scrape_configs": jobs,
        }
    )  # fmt: skip


def first_values(p: Prometheus, board: dict[str, Any]) -> dict[str, str]:
    """Each template variable set to the first value its query offers, in order."""
    values: dict[str, str] = {}
    for v in query_variables(board):
        selector, label = variable_selector(v)
        result = p.query(substitute(selector, values))
        options = sorted({r["metric"][label] for r in result if label in r["metric"]})
        assert options, f"variable ${v['name']} ({v['definition']}) offers no value"
        values[v["name"]] = options[0]
    return values
