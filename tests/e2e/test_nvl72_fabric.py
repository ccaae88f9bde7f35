"""Two simulated NVL72 racks, served through the exporter's own collectors and scraped by a real
Prometheus with the shipped fabric rules: a switch tray down in rack 1 is ONE alert naming its
NVLink domain (and no per-GPU alert there); one GPU's route unhealthy in rack 2 is that GPU's
alert only; IMEX failed on one tray of rack 2 is that node's alert, not a domain's.

The rules wait 5 minutes (``for``); the test reads the alerts while pending (Prometheus'
``ALERTS{alertstate="pending"}``), which is the same expression result.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.exposition import render
from simulator.nvl72 import Nvl72Rack, tray_collectors
from tests.e2e.nodeserve import scrape_config, serve_nodes
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

    def body(node: str) -> bytes | None:
        cols = trays.get(node)
        return None if cols is None else render(s for col in cols for s in col.collect())

    with serve_nodes(body) as address:
        yield address


def test_nvl72_fabric_faults_page_per_domain_and_per_gpu_as_they_should(
    racks: list[Nvl72Rack], server: str
) -> None:
    nodes = [t.node for r in racks for t in r.trays]
    config = scrape_config(server, nodes, ["fabric.rules.yml"])
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
