"""The dcgm-exporter variants of the dashboards (dashboards/json/dcgm/) show data in every panel
on a dcgm-exporter fleet: a real Prometheus scrapes the fleet simulator with ``--telemetry
dcgm-exporter`` (every node as dcgm-exporter + node_exporter would serve it: no gpuwarden
exporter anywhere) and loads the rule files the demo loads for that telemetry
(:func:`gpuwarden.stack.rule_files`: the dcgm variant of the hardware files); a stand-in
serves one sample of every metric of gpuwarden's own services (analyzer, remediation), as
test_queries_data.py does for the native dashboards.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest

from exporter import catalog as c
from gpuwarden.stack import ROOT, rule_files
from simulator.telemetry import DCGM
from tests.alerts.ruleset import metric_names
from tests.dashboards.board import substitute, targets
from tests.dashboards.fleet_prom import (
    JOBS,
    config,
    first_values,
    inject,
    simulator,
    stand_in,
)
from tests.realcomp import (
    Prometheus,
    run_alertmanager,
    run_prometheus,
    serve_expositions,
    wait_until,
)

pytestmark = pytest.mark.real
DCGM_DIR = ROOT / "dashboards" / "json" / "dcgm"
BOARDS = {p.stem: json.loads(p.read_text()) for p in sorted(DCGM_DIR.glob("*.json"))}
NODES = 2
SERVICES = ("/analyzer", "/remediation")  # a dcgm fleet runs no gpuwarden exporter
# The simulated fleet is Ampere and newer (rows are remapped, pages never retired): as the
# native check's stand-in does for gpuwarden's series, a pre-Ampere GPU's dcgm-exporter serves
# the retired-page fields the "Retired pages (pre-Ampere)" panel reads.
PRE_AMPERE = "/dcgm-pre-ampere"
JOBS = {**{p: JOBS[p] for p in SERVICES}, PRE_AMPERE: "dcgm-exporter-pre-ampere-stand-in"}


def _pre_ampere(host: str) -> bytes:
    fields = [f.name for f in c.GPU_RETIRED_PAGES.dcgm]
    labels = f'gpu="0",UUID="GPU-pre-ampere",modelName="Tesla V100-SXM2-32GB",Hostname="{host}"'
    return "".join(f"# TYPE {f} counter\n{f}{{{labels}}} 0\n" for f in fields).encode()


TARGETS = [
    (uid, f"{uid}: {panel['title']} {t['refId']}", t["expr"])
    for uid, board in BOARDS.items()
    for panel, t in targets(board)
]


def _rules() -> dict[str, str]:
    """Name beside prometheus.yml -> text, of every rule file the demo loads on a dcgm fleet."""
    return {str(f.relative_to(ROOT / "alerts")): f.read_text() for f in rule_files(DCGM)}


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    d = tmp_path_factory.mktemp("dash-dcgm")
    am_config = "route: {receiver: none}\nreceivers: [{name: none}]\n"
    with simulator(d, NODES, "--telemetry", DCGM) as (sim, sd), run_alertmanager(am_config) as am:
        hosts = [g["labels"]["instance"].split(":")[0] for g in json.loads(sd.read_text())]
        inject(sim, {"node": hosts[0], "kind": "app_xid", "target": "gpu1",
                     "parameters": {"xid": 13}})  # fmt: skip
        inject(
            sim, {"node": hosts[-1], "kind": "xid", "target": "gpu5", "parameters": {"xid": 119}}
        )
        rules = _rules()
        bodies = {**stand_in(set(), hosts[0], SERVICES), PRE_AMPERE: _pre_ampere(hosts[0])}
        with (
            serve_expositions(bodies) as port,
            run_prometheus(config(sd, port, am.url, sorted(rules), JOBS), rules) as p,
        ):
            # rule groups run on their own schedules: wait (a while) until every series a
            # dashboard reads exists; test_every_metric_... names any that never came
            with contextlib.suppress(TimeoutError):
                wait_until(lambda: not _missing(p), 60, 1.0, "every series a board reads")
            yield p


def _read_metrics() -> set[str]:
    return {n for _, _, expr in TARGETS for n in metric_names(substitute(expr, {}))}


def _missing(p: Prometheus) -> list[str]:
    return sorted(n for n in _read_metrics() if not p.query(f"count({n})"))


def test_the_demo_loads_the_dcgm_variant_of_each_hardware_rule_file_on_a_dcgm_fleet() -> None:
    files = {str(f.relative_to(ROOT / "alerts")) for f in rule_files(DCGM)}
    variants = {f"dcgm/{p.name}" for p in (ROOT / "alerts" / "dcgm").glob("*.rules.yml")}
    assert variants and variants <= files
    assert not {v.removeprefix("dcgm/") for v in variants} & files  # never both variants
    assert {"findings.rules.yml", "pipeline.rules.yml", "remediation.rules.yml"} <= files


@pytest.mark.parametrize("uid", sorted(BOARDS))
def test_every_dcgm_template_variable_offers_values(prom: Prometheus, uid: str) -> None:
    assert first_values(prom, BOARDS[uid]) is not None


@pytest.mark.parametrize(("uid", "where", "expr"), TARGETS, ids=[w for _, w, _ in TARGETS])
def test_every_dcgm_panel_query_returns_data_on_a_dcgm_fleet(
    prom: Prometheus, uid: str, where: str, expr: str
) -> None:
    query = substitute(expr, first_values(prom, BOARDS[uid]))
    try:  # a rule group may not have evaluated this node's first samples yet
        wait_until(lambda: prom.query(query), 20, 0.5, where)
    except TimeoutError:
        pytest.fail(f"{where} returned nothing:\n{query}")


def test_every_metric_a_dcgm_dashboard_reads_has_series(prom: Prometheus) -> None:
    """A fallback (`or vector(0)`) must never hide a metric that does not exist."""
    empty = _missing(prom)
    assert not empty, f"metrics the dcgm dashboards read but nothing serves: {empty}"


def test_a_fatal_xid_on_a_dcgm_fleet_fires_through_the_rules_the_demo_loads(
    prom: Prometheus,
) -> None:
    # (not XID 48: the driver logs XID 63 right after it and dcgm's last-XID gauge shows 63)
    firing = 'ALERTS{alertname="GpuXidFatalFirmware", alertstate="firing", xid="119"}'
    (alert,) = prom.wait_for(firing, 30)
    assert alert["metric"]["node"] == f"gpu-node-{NODES:03d}"
    assert alert["metric"]["gpu"] == "5"
    assert not prom.query('ALERTS{xid="13"}')  # the application XID alerts nothing on its own
