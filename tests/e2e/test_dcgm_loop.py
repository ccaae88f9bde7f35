"""The whole loop on a fleet with no gpuwarden exporter: simulator (``--telemetry
dcgm-exporter``: every node as dcgm-exporter + node_exporter) -> real Prometheus -> analyzer
(dialects discovered, nothing configured) -> real Alertmanager (project routes) ->
remediation (dry-run backend: what would be done is recorded).
"""

from __future__ import annotations

import shutil
import sqlite3
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from exporter import catalog as c
from gpuwarden.stack import Stack, StackOptions, start_on_free_ports
from tests.realcomp import require_binary, wait_until, world_readable_tmpdir

# On both Prometheus generations (tests/realcomp.py GENERATIONS).
pytestmark = [pytest.mark.real, pytest.mark.usefixtures("prom_generation")]


def journal(stack: Stack, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(f"file:{stack.opts.workdir / 'remediation.db'}?mode=ro", uri=True)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


@pytest.fixture(scope="module")
def stack(prom_generation: str) -> Iterator[Stack]:
    for b in ("prometheus", "prometheus-alertmanager"):
        require_binary(b)
    work = world_readable_tmpdir("gpuwarden-e2e-dcgm-")
    s = start_on_free_ports(
        StackOptions(
            workdir=work,
            nodes=4,
            seed=7,
            scrape_interval_s=1,
            analyzer_interval_s=2,
            tick_s=1,
            analyzer_push=True,
            telemetry="dcgm-exporter",
        )
    )
    try:
        yield s
    finally:
        s.stop()
        shutil.rmtree(work, ignore_errors=True)


def _get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


def test_prometheus_holds_no_gpuwarden_node_series_only_dcgm_and_node_exporter_ones(stack: Stack):
    prom = stack.urls.prometheus
    node = stack.get_json(f"{stack.urls.simulator}/nodes")[0]["node"]
    assert b"gpuwarden_" not in _get(f"{stack.urls.simulator}/nodes/{node}/metrics").encode()
    temp = c.GPU_TEMPERATURE.dcgm[0].name
    wait_until(lambda: stack.get_json(f"{prom}/api/v1/query?query={temp}")["data"]["result"],
               30, 0.5, "dcgm series in Prometheus")  # fmt: skip
    native = stack.get_json(f"{prom}/api/v1/query?query={c.GPU_UP.name}")["data"]["result"]
    assert native == []


def test_a_fatal_xid_on_a_dcgm_node_reaches_a_drain_decision(stack: Stack):
    node = stack.get_json(f"{stack.urls.simulator}/nodes")[1]["node"]
    wait_until(lambda: "dcgm-exporter" in _get(f"{stack.urls.analyzer}/coverage"), 60, 0.5,
               "the analyzer reading the dcgm dialect")  # fmt: skip
    stack.inject(node, "xid", "gpu2", xid=48)
    q = f"SELECT action, fault_class FROM decisions WHERE node='{node}'"
    got = wait_until(lambda: journal(stack, q), 60, 0.5, "a decision on the dcgm node")
    assert ("drain" in {a for a, _ in got}) or ("reboot" in {a for a, _ in got}), got
    findings = stack.get_json(f"{stack.urls.analyzer}/findings")
    mine = [f for f in findings["findings"] if f["node"] == node]
    assert any(f["kind"] in ("xid_fatal", "ecc_uncorrectable") for f in mine), mine


def test_coverage_on_the_service_names_the_group_and_what_dcgm_cannot_show(stack: Stack):
    # the analyzer's first read may not have landed when this test runs first on its worker
    text = wait_until(lambda: (t := _get(f"{stack.urls.analyzer}/coverage")) * ("== " in t),
                      60, 0.5, "the analyzer's first coverage")  # fmt: skip
    assert "== dcgm-exporter+node_exporter [dcgm-exporter naming 4.8]: 4 node(s)" in text
    assert "NVLink state per link" in text
