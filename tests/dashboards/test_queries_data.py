"""Every panel and variable query returns data from a real Prometheus that scrapes the fleet
simulator (the real collectors), a real Alertmanager, and a stand-in for the analyzer and
remediation services, with the shipped rule files loaded.

The stand-in serves one sample of every catalogue metric the simulator does not produce
(analyzer, remediation, scheduler job map, pre-Ampere retired pages ...), built from the
catalogue itself, so every metric a dashboard reads exists and every query can be judged.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from exporter import catalog
from gpuwarden.stack import rule_files
from tests.alerts.ruleset import metric_names
from tests.dashboards.board import load_all, query_variables, substitute, targets
from tests.dashboards.fleet_prom import config, first_values, inject, simulator, stand_in
from tests.realcomp import (
    Prometheus,
    http_get,
    run_alertmanager,
    run_prometheus,
    serve_expositions,
    wait_until,
)

pytestmark = pytest.mark.real
BOARDS = load_all()
NODES = 2


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    d = tmp_path_factory.mktemp("dash")
    am_config = "route: {receiver: none}\nreceivers: [{name: none}]\n"
    with simulator(d, NODES) as (sim, sd), run_alertmanager(am_config) as am:
        nodes = [group["labels"]["node"] for group in json.loads(sd.read_text())]
        inject(sim, {"node": nodes[0], "kind": "app_xid", "target": "gpu1",
                     "parameters": {"xid": 13}})  # fmt: skip
        inject(sim, {"node": nodes[-1], "kind": "xid", "target": "gpu5", "parameters": {"xid": 79}})
        exported = {
            line.split()[2]
            for node in nodes
            for line in http_get(f"{sim}/nodes/{node}/metrics").decode().splitlines()
            if line.startswith("# TYPE")
        }
        # the simulator's jobs come and go (the XID above ends one): its allocation series
        # may vanish, so a stand-in serves one too
        exported.discard(catalog.GPU_ALLOCATION_INFO.name)
        rules = {f.name: f.read_text() for f in rule_files()}  # what the demo loads
        with (
            serve_expositions(stand_in(exported, nodes[0])) as port,
            run_prometheus(config(sd, port, am.url, sorted(rules)), rules) as p,
        ):
            # Rule groups run on their own schedules: wait until every series a
            # dashboard reads exists (recording rules included), then judge the queries.
            for name in sorted(_read_metrics()):
                p.wait_for(f"count({name}) > 0", 60)
            yield p


def _targets() -> list[tuple[str, str, str]]:
    return [
        (uid, f"{uid}: {panel['title']} {t['refId']}", t["expr"])
        for uid, board in BOARDS.items()
        for panel, t in targets(board)
    ]


TARGETS = _targets()


@pytest.mark.parametrize("uid", sorted(BOARDS))
def test_every_template_variable_offers_values(prom: Prometheus, uid: str) -> None:
    values = first_values(prom, BOARDS[uid])
    assert set(values) == {v["name"] for v in query_variables(BOARDS[uid])}


@pytest.mark.parametrize(("uid", "where", "expr"), TARGETS, ids=[w for _, w, _ in TARGETS])
def test_every_panel_query_returns_data(prom: Prometheus, uid: str, where: str, expr: str) -> None:
    query = substitute(expr, first_values(prom, BOARDS[uid]))
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
