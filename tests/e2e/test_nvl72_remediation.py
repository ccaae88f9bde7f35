"""A switch tray down on an NVL72 rack, end to end: ``gpuwarden simulate --skus gb200-nvl72:2``
(two racks of 18 trays x 4 GB200, served through the exporter's own collectors) -> a real
Prometheus with EVERY shipped rule file -> the alerts, as Alertmanager delivers them, to the
remediation engine on the shipped default policy and the dry-run backend, on a Slurm-like site
whose topology names no NVLink domain (the domain comes from the alerts themselves).

Rack 0 loses a switch tray: every GPU at degraded bandwidth with 2 of its 18 links down. That
is ONE alert naming the domain (NvlinkDomainFabricDegraded), no NvlinkDown or per-GPU alert,
and in remediation ONE incident for the domain and no drain of any of its trays, even when
node alerts arrive first. Rack 1 has one GPU's route unhealthy: that GPU's alert, and the
drain the default policy allows for it, on that tray only.

The domain and GPU alerts wait 5 minutes (``for``); the test reads them while pending
(``ALERTS{alertstate="pending"}``, the same expression result) and delivers them as firing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.fabric import fabric_domain
from exporter import catalog as c
from remediation import nvlink
from remediation import policy as policy_mod
from remediation.backends.dryrun import DryRunBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Alert
from simulator import nvl72
from simulator.cli import SimulateSettings, make_simulator
from simulator.simulator import Simulator
from tests.e2e.nodeserve import scrape_config, serve_simulator
from tests.realcomp import run_prometheus
from tests.simulator.test_server import Clock

pytestmark = pytest.mark.real
ALERTS = Path(__file__).resolve().parents[2] / "alerts"
RULES = {p.name: p.read_text() for p in sorted(ALERTS.glob("*.rules.yml"))}
TRAY, GPU = 20, 2  # rack 1's tray (fleet node index) and GPU whose route is unhealthy


@pytest.fixture
def sim() -> Simulator:
    clock = Clock()
    s = Simulator(make_simulator(SimulateSettings(skus="gb200-nvl72:2")).fleet, clock=clock,
                  wall=lambda: 1.8e9)  # fmt: skip
    nodes = s.fleet.nodes
    s.inject({"node": nodes[3], "kind": "nvlink_switch_tray_down"})  # rack 0
    s.inject({"node": nodes[TRAY], "kind": "fabric_route_unhealthy", "target": f"gpu{GPU}"})
    clock.t += 5.0  # past the faults' onset
    return s


@pytest.fixture
def server(sim: Simulator) -> Iterator[str]:
    with serve_simulator(sim) as address:
        yield address


def _delivered(alerts: list[dict[str, Any]]) -> list[Alert]:
    """ALERTS series as Alertmanager's webhook would carry them once they fire."""
    out = []
    for a in alerts:
        labels = {k: v for k, v in a["metric"].items() if k not in ("__name__", "alertstate")}
        fp = "|".join(f"{k}={v}" for k, v in sorted(labels.items()))
        out.append(Alert(fp, "2026-12-03T10:00:00Z", "firing", labels, {"summary": "x"}))
    return out


class Remediation:
    """The engine on the shipped default policy, dry-run backend, no NVLink domain in the
    topology (the trays are known to the scheduler, nothing more)."""

    def __init__(self, tmp: Path, nodes: list[str]) -> None:
        self.clock = FakeClock()
        self.journal = Journal(tmp / "state.db")
        pol = policy_mod.load(None)
        self.backend = DryRunBackend(self.journal, {n: {} for n in nodes}, self.clock.now)
        self.engine = Engine(self.journal, self.backend, pol, self.clock, Metrics())
        self.executor = Executor(self.journal, self.backend, pol, self.clock.now)

    def deliver(self, alerts: list[Alert]) -> None:
        self.journal.accept(alerts, self.clock.now())
        self.decide_all()

    def decide_all(self) -> None:
        for _, a in self.journal.todo(1000):
            aid = self.engine.decide(a)
            if aid is not None:
                self.executor.run({"id": aid})

    def actions(self) -> list[tuple[str, str]]:
        return [(r["node"], r["action"]) for r in self.journal.rows("SELECT * FROM actions")]


def test_a_switch_tray_down_is_one_incident_and_no_drain_and_one_bad_route_drains_its_tray(
    sim: Simulator, server: str, tmp_path: Path
) -> None:
    nodes = list(sim.fleet.nodes)
    rack0 = fabric_domain(*(str(v) for v in nvl72.domain(0)))
    with run_prometheus(scrape_config(server, nodes, RULES), RULES) as prom:
        prom.wait_for("count(up == 1) == 36", timeout=120)
        # the tray's links are down on every GPU of rack 0: 72 GPUs x 2 links
        prom.wait_for(f"count({c.NVLINK_UP.name} == 0) == 144", timeout=60)
        domain = prom.wait_for('ALERTS{alertname="NvlinkDomainFabricDegraded"}', timeout=60)
        prom.wait_for('ALERTS{alertname="GpuFabricDegraded"}', timeout=60)
        time.sleep(6)  # a few more evaluations: NvlinkDown (for: 2m) would be pending by now
        assert prom.query('ALERTS{alertname="NvlinkDown"}') == []
        firing = prom.query("ALERTS")
    assert [a["metric"]["nvlink_domain"] for a in domain] == [rack0]
    gpu = [a["metric"] for a in firing if a["metric"]["alertname"] == "GpuFabricDegraded"]
    assert [(m["node"], m["gpu"]) for m in gpu] == [(nodes[TRAY], str(GPU))]
    assert gpu[0]["nvlink_domain"] == fabric_domain(*(str(v) for v in nvl72.domain(1)))
    rack0_alerts = [
        a["metric"]
        for a in firing
        if a["metric"].get("node") in nodes[:18] and a["metric"].get("action") != "hold"
    ]  # (a scrape timed out on a busy machine may show a node as unwatched: hold)
    # per GPU of the broken rack only the link XIDs its driver logs (149 NETIR_LINK_DOWN, the
    # peer gone: 2 links x 4 GPUs x 18 trays), each labelled with the rack's domain so that
    # Alertmanager's inhibition and remediation's domain guard hold them under the one incident
    xids = [m for m in rack0_alerts if m["alertname"] == "GpuXidNvlink5"]
    assert len({(m["node"], m["gpu"]) for m in xids}) == 72
    assert {(m["xid"], m["unit"], m["subcode"], m["nvlink_domain"]) for m in xids} == {
        ("149", "NETIR_LINK_EVT/NETIR_LINK_DOWN", "32", rack0)
    }
    assert [m for m in rack0_alerts if m not in xids] == []  # nothing else per node or GPU

    # Remediation, worst order: the node alerts first (the link XIDs every tray logs at once,
    # no `for`), the domain alert 5 minutes later.
    rem = Remediation(tmp_path, nodes)
    alerts = _delivered(firing)
    scoped = [a for a in alerts if a.labels.get("scope") == "domain"]
    rem.deliver([a for a in alerts if a not in scoped])
    rem.clock.advance(300)
    rem.deliver(scoped)
    rem.clock.advance(nvlink.SETTLE_S)
    rem.engine.tick()  # the settle window passed: the held node alerts are decided again
    rem.decide_all()
    incidents = rem.journal.rows("SELECT * FROM incidents WHERE node=''")
    assert [(i["fault_class"], i["subject"], i["acted"]) for i in incidents] == [
        (nvlink.INCIDENT_CLASS, rack0, "notify")
    ]
    assert rem.actions() == [(nodes[TRAY], "drain")]  # the default policy's nvlink rung
    held = rem.journal.rows(
        "SELECT DISTINCT node FROM decisions WHERE guard='domain' "
        "AND json_extract(evidence, '$.domain_incident')=?",
        (incidents[0]["id"],),
    )
    assert sorted(r["node"] for r in held) == sorted(nodes[:18])  # journaled in the incident
    rem.journal.close()
