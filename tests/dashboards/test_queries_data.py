"""Every panel and variable query returns data from a real Prometheus that scrapes the fleet
simulator (the real collectors), a real Alertmanager, and a stand-in for the analyzer and
remediation services, with the shipped rule files loaded.

The stand-in serves one sample of every catalogue metric the simulator does not produce
(analyzer, remediation, scheduler job map, pre-Ampere retired pages ...), built from the
catalogue itself, so every metric a dashboard reads exists and every query can be judged.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from exporter import catalog
from tests.alerts.ruleset import RULE_FILES, metric_names
from tests.dashboards.board import load_all, query_variables, substitute, targets, variable_selector
from tests.realcomp import (
    Prometheus,
    free_port,
    http_get,
    run_alertmanager,
    run_prometheus,
    wait_until,
)

pytestmark = pytest.mark.real
BOARDS = load_all()
NODES = 2
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


def _owner(name: str) -> str:
    return next((path for prefix, path in OWNERS.items() if name.startswith(prefix)), "/exporter")


def _stand_in(exported: set[str], node: str) -> dict[str, bytes]:
    """Path -> one sample of every catalogue metric the simulator does not export."""
    registries: dict[str, CollectorRegistry] = {}
    for m in catalog.all_metrics():
        if m.name in exported or m.name.startswith("DCGM_"):
            continue
        registry = registries.setdefault(_owner(m.name), CollectorRegistry())
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


def _serve(bodies: dict[str, bytes]) -> tuple[ThreadingHTTPServer, int]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = bodies.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, int(server.server_address[1])


@contextlib.contextmanager
def _simulator(d: Path) -> Iterator[tuple[str, Path]]:
    port, sd = free_port(), d / "targets.json"
    cmd = [sys.executable, "-m", "gpuwarden", "simulate", "--nodes", str(NODES), "--seed", "3",
           "--listen", f"127.0.0.1:{port}", "--file-sd", str(sd), "--log-level", "warning"]  # fmt: skip
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


def _inject(sim: str, fault: dict[str, Any]) -> None:
    req = urllib.request.Request(
        f"{sim}/inject", json.dumps(fault).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        assert r.status == 201


def _config(sd: Path, stand_in: int, alertmanager: str) -> str:
    static = [
        ("gpuwarden-analyzer", "/analyzer"),
        ("gpuwarden-remediation", "/remediation"),
        ("gpuwarden-exporter-stand-in", "/exporter"),
    ]
    # honor_labels: the series carry their own node label, equal to the target's.
    jobs = [{"job_name": "gpuwarden-exporter", "honor_labels": True,
             "file_sd_configs": [{"files": [str(sd)]}]}]  # fmt: skip
    jobs += [
        {"job_name": job, "metrics_path": path,
         "static_configs": [{"targets": [f"127.0.0.1:{stand_in}"]}]}
        for job, path in static
    ]  # fmt: skip
    jobs.append({"job_name": "alertmanager",
                 "static_configs": [{"targets": [alertmanager.removeprefix("http://")]}]})  # fmt: skip
    return json.dumps(
        {
            "global": {"scrape_interval": "2s", "scrape_timeout": "2s",
                       "evaluation_interval": "2s"},
            "rule_files": [f.name for f in RULE_FILES],
            "alerting": {"alertmanagers": [{"static_configs": [
                {"targets": [alertmanager.removeprefix("http://")]}]}]},
            "scrape_configs": jobs,
        }
    )  # fmt: skip


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    d = tmp_path_factory.mktemp("dash")
    am_config = "route: {receiver: none}\nreceivers: [{name: none}]\n"
    with _simulator(d) as (sim, sd), run_alertmanager(am_config) as am:
        nodes = [group["labels"]["node"] for group in json.loads(sd.read_text())]
        _inject(sim, {"node": nodes[0], "kind": "app_xid", "target": "gpu1",
                      "parameters": {"xid": 13}})  # fmt: skip
        _inject(
            sim, {"node": nodes[-1], "kind": "xid", "target": "gpu5", "parameters": {"xid": 79}}
        )
        exported = {
            line.split()[2]
            for node in nodes
            for line in http_get(f"{sim}/nodes/{node}/metrics").decode().splitlines()
            if line.startswith("# TYPE")
        }
        # the simulator's jobs come and go (the XID above ends one): its allocation series
        # may vanish, so a stand-in serves one too
        exported.discard(catalog.GPU_ALLOCATION_INFO.name)
        server, port = _serve(_stand_in(exported, nodes[0]))
        rules = {f.name: f.read_text() for f in RULE_FILES}
        try:
            with run_prometheus(_config(sd, port, am.url), rules) as p:
                # Rule groups run on their own schedules: wait until every series a
                # dashboard reads exists (recording rules included), then judge the queries.
                for name in sorted(_read_metrics()):
                    p.wait_for(f"count({name}) > 0", 60)
                yield p
        finally:
            server.shutdown()
            server.server_close()


def _first_values(p: Prometheus, board: dict[str, Any]) -> dict[str, str]:
    """Each template variable set to the first value its query offers, in order."""
    values: dict[str, str] = {}
    for v in query_variables(board):
        selector, label = variable_selector(v)
        result = p.query(substitute(selector, values))
        options = sorted({r["metric"][label] for r in result if label in r["metric"]})
        assert options, f"variable ${v['name']} ({v['definition']}) offers no value"
        values[v["name"]] = options[0]
    return values


def _targets() -> list[tuple[str, str, str]]:
    return [
        (uid, f"{uid}: {panel['title']} {t['refId']}", t["expr"])
        for uid, board in BOARDS.items()
        for panel, t in targets(board)
    ]


TARGETS = _targets()


@pytest.mark.parametrize("uid", sorted(BOARDS))
def test_every_template_variable_offers_values(prom: Prometheus, uid: str) -> None:
    values = _first_values(prom, BOARDS[uid])
    assert set(values) == {v["name"] for v in query_variables(BOARDS[uid])}


@pytest.mark.parametrize(("uid", "where", "expr"), TARGETS, ids=[w for _, w, _ in TARGETS])
def test_every_panel_query_returns_data(prom: Prometheus, uid: str, where: str, expr: str) -> None:
    query = substitute(expr, _first_values(prom, BOARDS[uid]))
    try:  # a rule group may not have evaluated this node's first samples yet
        wait_until(lambda: prom.query(query), 20, 0.5, where)
    except TimeoutError:
        pytest.fail(f"{where} returned nothing:\n{query}")


def _read_metrics() -> set[str]:
    return {n for _, _, expr in TARGETS for n in metric_names(substitute(expr, {}))}


def test_every_metric_a_dashboard_reads_has_series(prom: Prometheus) -> None:
    """A fallback (`or vector(0)`) must never hide a metric that does not exist."""
    empty = sorted(n for n in _read_metrics() if not prom.query(f"count({n})"))
    assert not empty, f"metrics the dashboards read but nothing exports: {empty}"


def test_a_misspelt_metric_is_caught_by_the_data_check(prom: Prometheus) -> None:
    wrong = catalog.GPU_UTILIZATION.name.replace("utilization", "utilisation")
    assert prom.query(f"avg by (node) ({catalog.GPU_UTILIZATION.name})")
    assert not prom.query(f"avg by (node) ({wrong})")


def test_a_fatal_xid_injected_into_the_simulator_fires_through_the_shipped_rules(
    prom: Prometheus,
) -> None:
    """End to end on real scrapes: the XID counter series is born at 1 and still alerts."""
    # Not matched on gpu: for a GPU lost with XID 79 the exporter labels the XID series with
    # the PCI address (it cannot map it to an index once NVML has lost the GPU).
    firing = 'ALERTS{alertname="GpuXidFatalHardware", alertstate="firing", xid="79"}'
    (alert,) = prom.wait_for(firing, 30)
    assert alert["metric"]["severity"] == "critical"
    assert alert["metric"]["action"] == "drain"
    assert alert["metric"]["node"] == f"gpu-node-{NODES:03d}"
    # The GPU fell off the bus too: GpuLost waits out its minute, pending, not firing yet.
    assert prom.wait_for('ALERTS{alertname="GpuLost", alertstate="pending", gpu="5"}', 30)
    # The application XID 13 on the other node alerts nothing on its own.
    assert not prom.query('ALERTS{xid="13"}')
