"""The shipped Prometheus and Alertmanager configs, unchanged but for addresses, with real
exporters (issue 17):

- an exporter that stops answering pages ``GpuwardenExporterDown`` naming its node, with
  ``action="hold"``, and Alertmanager inhibits that node's other alerts (the XID alert keeps
  firing through the outage instead of resolving);
- an exporter restarted under a new ``pod`` label (with ``--kmsg-state``) continues its XID
  counter: one series per (node, GPU, XID) for the rules, one alert, no new events.

Real processes throughout: ``gpuwarden-exporter --source simulated`` with a kernel-log file,
``prometheus`` with ``deploy/prometheus/prometheus.yml`` and the rules of ``alerts/``,
``prometheus-alertmanager`` with ``deploy/alertmanager/alertmanager.yml``. Uses the shipped
15 s scrape and evaluation intervals, so it runs for about three minutes.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.catalog import GPU_XID_ERRORS
from gpuwarden.processes import Supervisor, free_port_block
from simulator.nvml_fake import HGX_BUSES
from tests.alerts.ruleset import ROOT, RULE_FILES
from tests.realcomp import (
    Alertmanager,
    Prometheus,
    http_get,
    require_binary,
    run_alertmanager,
    run_prometheus,
    wait_until,
)

# On both Prometheus generations (tests/realcomp.py GENERATIONS).
pytestmark = [pytest.mark.real, pytest.mark.usefixtures("prom_generation")]
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTMANAGER = ROOT / "deploy" / "alertmanager" / "alertmanager.yml"
XID_79 = (
    "[ 12.5] NVRM: Xid (PCI:0000:{bus}:00): 79, pid=1, name=python3, GPU has fallen off the bus\n"
)


@dataclass
class Node:
    name: str
    port: int
    kmsg: Path
    state: Path
    pod: str = "exporter-a"


@dataclass
class Stack:
    work: Path
    sup: Supervisor
    prometheus: Prometheus
    alertmanager: Alertmanager
    nodes: dict[str, Node]

    def start_exporter(self, node: Node) -> None:
        self.sup.start(
            f"exporter-{node.name}-{node.pod}",
            [sys.executable, "-m", "exporter", "--source", "simulated", "--node", node.name,
             "--listen", f"127.0.0.1:{node.port}", "--interval", "1", "--kmsg", str(node.kmsg),
             "--kmsg-state", str(node.state)],
            ready_url=f"http://127.0.0.1:{node.port}/metrics",
        )  # fmt: skip

    def stop_exporter(self, node: Node) -> None:
        name = f"exporter-{node.name}-{node.pod}"
        for child in list(self.sup.children):
            if child.name == name:
                child.proc.terminate()
                child.proc.wait(10)
                self.sup.children.remove(child)

    def write_targets(self) -> None:
        path = self.prometheus.dir / "gpuwarden-targets" / "nodes.yml"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(targets(self.nodes))
        tmp.replace(path)  # file_sd sees a whole file, never half of one

    def am_alerts(self) -> list[dict[str, Any]]:
        return list(json.loads(http_get(f"{self.alertmanager.url}/api/v2/alerts")))


def targets(nodes: dict[str, Node]) -> str:
    groups = [
        {"targets": [f"127.0.0.1:{n.port}"], "labels": {"node": n.name, "pod": n.pod}}
        for n in nodes.values()
    ]
    return yaml.safe_dump(groups)


def _gpu_bus() -> str:
    """The PCI bus of simulated GPU 0 (the simulator's HGX layout)."""
    return str(HGX_BUSES[0]).lower()


@pytest.fixture(scope="module")
def stack(prom_generation: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    for b in ("prometheus", "prometheus-alertmanager"):
        require_binary(b)
    work = tmp_path_factory.mktemp("shipped")
    with run_alertmanager(ALERTMANAGER.read_text()) as am:
        am_address = am.url.removeprefix("http://")
        config = PROMETHEUS.read_text().replace('["127.0.0.1:9093"]', f'["{am_address}"]')
        rules = {f"gpuwarden-rules/{f.name}": f.read_text() for f in RULE_FILES}
        base = free_port_block(2)
        nodes = {}
        for i, name in enumerate(("gpu-node-101", "gpu-node-102")):
            kmsg = work / f"{name}.log"
            kmsg.write_text(XID_79.format(bus=_gpu_bus()))
            nodes[name] = Node(name, base + i, kmsg, work / f"{name}.state.json")
        # The targets file exists before Prometheus starts, so file_sd watches it from the start.
        files = {**rules, "gpuwarden-targets/nodes.yml": targets(nodes)}
        with run_prometheus(config, files) as prom:
            s = Stack(work, Supervisor(work / "logs"), prom, am, nodes)
            try:
                for n in nodes.values():
                    s.start_exporter(n)
                yield s
            finally:
                s.sup.stop_all()
                shutil.rmtree(work / "logs", ignore_errors=True)


def _alerts(prom: Prometheus, name: str) -> list[dict[str, str]]:
    return [r["metric"] for r in prom.query(f'ALERTS{{alertname="{name}",alertstate="firing"}}')]


def test_both_nodes_page_their_xid_79_once_the_shipped_config_scrapes_them(stack: Stack) -> None:
    def firing() -> set[str]:
        return {a["node"] for a in _alerts(stack.prometheus, "GpuXidFatalHardware")}

    wait_until(lambda: firing() == {"gpu-node-101", "gpu-node-102"}, 150, 1, "XID 79 alerts")
    up = stack.prometheus.query('up{job="gpuwarden-exporter"}')
    assert {r["metric"]["node"] for r in up} == {"gpu-node-101", "gpu-node-102"}


def test_an_exporter_restarted_under_a_new_pod_label_continues_its_counter(stack: Stack) -> None:
    node = stack.nodes["gpu-node-102"]
    prom = stack.prometheus
    old_pod = GPU_XID_ERRORS.name + f'{{node="gpu-node-102",pod="{node.pod}"}}'
    # the first exporter has read the XID (and kept it in --kmsg-state) and been scraped: so
    # far only when the test above ran first on this worker (pytest-xdist may not run it here)
    wait_until(lambda: prom.query(old_pod), 150, 1, "the first pod's XID series")
    stack.stop_exporter(node)
    node.pod = "exporter-b"
    stack.start_exporter(node)
    stack.write_targets()
    new_pod = GPU_XID_ERRORS.name + '{node="gpu-node-102",pod="exporter-b"}'
    wait_until(lambda: prom.query(new_pod), 90, 1, "the new pod's XID series")
    new = prom.query(new_pod)
    assert [r["value"][1] for r in new] == ["1"]  # carried over, not re-read (2) or lost (0)
    merged = prom.query(
        'changes(gpuwarden:gpu_xid_errors_total:without_target{node="gpu-node-102"}[10m])'
    )
    assert [r["value"][1] for r in merged] == ["0"]  # one series, never moved: no new event

    def on_102() -> list[dict[str, str]]:
        return [a for a in _alerts(prom, "GpuXidFatalHardware") if a["node"] == "gpu-node-102"]

    alerts = wait_until(on_102, 150, 1, "gpu-node-102's XID alert firing")
    assert [a for a in alerts if "pod" in a] == []
    assert len(alerts) == 1  # one alert across both pods


def test_an_exporter_that_stops_answering_holds_its_node_and_inhibits_its_alerts(
    stack: Stack,
) -> None:
    # both nodes' XID alerts fire first (so far only when the first test ran on this worker)
    wait_until(
        lambda: {a["node"] for a in _alerts(stack.prometheus, "GpuXidFatalHardware")}
        >= {"gpu-node-101", "gpu-node-102"}, 150, 1, "both XID alerts firing",
    )  # fmt: skip
    stack.stop_exporter(stack.nodes["gpu-node-101"])

    def down() -> list[dict[str, Any]]:
        return [a for a in stack.am_alerts() if a["labels"]["alertname"] == "GpuwardenExporterDown"]

    (alert,) = wait_until(down, 150, 1, "GpuwardenExporterDown in Alertmanager")
    assert alert["labels"]["node"] == "gpu-node-101"
    assert (alert["labels"]["action"], alert["labels"]["fault_class"]) == ("hold", "unwatched")

    def xid_states() -> dict[str, str]:
        return {
            a["labels"]["node"]: a["status"]["state"]
            for a in stack.am_alerts()
            if a["labels"]["alertname"] == "GpuXidFatalHardware"
        }

    states = wait_until(
        lambda: (s := xid_states()).get("gpu-node-101") == "suppressed" and s, 30, 1,
        "the down node's XID alert inhibited",
    )  # fmt: skip
    assert states == {"gpu-node-101": "suppressed", "gpu-node-102": "active"}
    # Still firing in Prometheus (keep_firing_for), so its resolve cannot reach remediation.
    assert "gpu-node-101" in {a["node"] for a in _alerts(stack.prometheus, "GpuXidFatalHardware")}
