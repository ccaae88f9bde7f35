"""Two simulated NVL72 racks, served through the exporter's own collectors and scraped by a real
Prometheus with the shipped fabric rules: a switch tray down in rack 1 is ONE alert naming its
NVLink domain (and no per-GPU alert there); one GPU's route unhealthy in rack 2 is that GPU's
alert only; IMEX failed on one tray of rack 2 is that node's alert, not a domain's.

The rules wait 5 minutes (``for``); the test reads the alerts while pending (Prometheus'
``ALERTS{alertstate="pending"}``), which is the same expression result.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from exporter.exposition import render
from simulator.nvl72 import Nvl72Rack, tray_collectors
from tests.realcomp import run_prometheus

pytestmark = pytest.mark.real
RULES = Path(__file__).resolve().parents[2] / "alerts" / "fabric.rules.yml"


@pytest.fixture
def racks() -> list[Nvl72Rack]:
    one, two = Nvl72Rack.build(0), Nvl72Rack.build(1)
    one.switch_tray_down()
    two.route_unhealthy(tray=7, gpu=1)
    two.imex_unhealthy([3])
    return [one, two]


@pytest.fixture
def server(racks: list[Nvl72Rack]) -> Iterator[str]:
    trays = {t.node: tray_collectors(t) for r in racks for t in r.trays}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            node = self.path.removeprefix("/nodes/").removesuffix("/metrics")
            if node not in trays:
                self.send_error(404)
                return
            body = render(s for col in trays[node] for s in col.collect())
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _config(address: str, nodes: list[str]) -> str:
    jobs = "\n".join(
        f"  - job_name: {n}\n    metrics_path: /nodes/{n}/metrics\n"
        f"    static_configs: [{{targets: ['{address}']}}]"
        for n in nodes
    )
    return (
        "global: {scrape_interval: 2s, scrape_timeout: 2s, evaluation_interval: 1s}\n"
        "rule_files: [fabric.rules.yml]\n"
        f"scrape_configs:\n{jobs}\n"
    )


def test_nvl72_fabric_faults_page_per_domain_and_per_gpu_as_they_should(
    racks: list[Nvl72Rack], server: str
) -> None:
    nodes = [t.node for r in racks for t in r.trays]
    config = _config(server, nodes)
    with run_prometheus(config, {"fabric.rules.yml": RULES.read_text()}) as prom:
        prom.wait_for("count(up == 1) == 36", timeout=120)
        # 72 GPUs of rack 1 degraded and one of rack 2, all recorded: still one domain alert
        prom.wait_for("count(gpuwarden:gpu_fabric_degraded:by_gpu) == 73", timeout=60)
        domain = prom.wait_for('ALERTS{alertname="NvlinkDomainFabricDegraded"}', timeout=30)
        assert [a["metric"]["nvlink_domain"] for a in domain] == [racks[0].domain]
        gpu = prom.wait_for('ALERTS{alertname="GpuFabricDegraded"}', timeout=30)
        assert [(a["metric"]["node"], a["metric"]["gpu"]) for a in gpu] == [
            (racks[1].trays[7].node, "1")
        ]
        imex = prom.wait_for('ALERTS{alertname="ImexDown"}', timeout=30)
        assert [a["metric"]["node"] for a in imex] == [racks[1].trays[3].node]
        assert prom.query('ALERTS{alertname="ImexDomainDown"}') == []
        assert len(prom.query('ALERTS{alertname="NvlinkDomainFabricDegraded"}')) == 1
