"""Every panel and variable query parses (real promtool, one call) and reads only metrics that
exist: catalogue names, recording rules from alerts/, or Prometheus's own series."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dashboards import names
from exporter import catalog
from tests.alerts.ruleset import EXTERNAL_METRICS, metric_names, recorded_names
from tests.dashboards.board import load_all, query_variables, substitute, targets, variable_selector
from tests.realcomp import promtool

BOARDS = load_all()
KNOWN = catalog.names() | recorded_names() | EXTERNAL_METRICS | names.EXTERNAL


def _queries() -> list[tuple[str, str]]:
    """(where, PromQL) for every target and every variable's selector, variables substituted."""
    out = []
    for uid, board in BOARDS.items():
        values = {v["name"]: "x" for v in query_variables(board)}
        for panel, t in targets(board):
            out.append((f"{uid}: {panel['title']} {t['refId']}", substitute(t["expr"], values)))
        for v in query_variables(board):
            out.append((f"{uid}: ${v['name']}", substitute(variable_selector(v)[0], values)))
    return out


QUERIES = _queries()


def test_the_recording_rules_the_dashboards_name_exist_in_alerts() -> None:
    assert recorded_names() >= names.RECORDED, names.RECORDED - recorded_names()


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_query_reads_only_known_metrics(where: str, expr: str) -> None:
    assert metric_names(expr) <= KNOWN, f"{where}: {metric_names(expr) - KNOWN}"


@pytest.mark.real
def test_every_query_parses_with_promtool(tmp_path: Path) -> None:
    rules = [
        {"record": f"dashboard:query_{i}:check", "expr": e} for i, (_, e) in enumerate(QUERIES)
    ]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = promtool("check", "rules", str(path))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out
    assert f"SUCCESS: {len(rules)} rules found" in out


@pytest.mark.real
def test_promtool_rejects_a_broken_dashboard_query(tmp_path: Path) -> None:
    _, expr = QUERIES[0]
    path = tmp_path / "broken.yml"
    rule = {"record": "dashboard:broken:check", "expr": expr + ")"}
    path.write_text(yaml.safe_dump({"groups": [{"name": "d", "rules": [rule]}]}))
    r = promtool("check", "rules", str(path))
    assert r.returncode != 0
    assert "parse error" in r.stdout.decode() + r.stderr.decode()
