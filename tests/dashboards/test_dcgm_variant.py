"""The dcgm-exporter variants of the dashboards (dashboards/json/dcgm/) are generated from the
native ones, never drift, read only dcgm-exporter's series (plus gpuwarden's own services'
and the dcgm rule variant's recordings), parse with promtool, and say what they left out."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dashboards import names
from dashboards.__main__ import JSON_DIR, dcgm_records, main, rendered_dcgm
from dashboards.dcgm_translate import SERVICES
from exporter import catalog as c
from tests.alerts.ruleset import EXTERNAL_METRICS, metric_names
from tests.dashboards.board import query_variables, substitute, targets, variable_selector
from tests.realcomp import promtool

DCGM_DIR = JSON_DIR / "dcgm"
BOARDS = {p.stem: json.loads(p.read_text()) for p in sorted(DCGM_DIR.glob("*.json"))}
NATIVE = {p.stem: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}


def _queries() -> list[tuple[str, str]]:
    out = []
    for uid, board in BOARDS.items():
        values = {v["name"]: "x" for v in query_variables(board)}
        out += [(f"{uid}: {p['title']} {t['refId']}", substitute(t["expr"], values))
                for p, t in targets(board)]  # fmt: skip
        out += [(f"{uid}: ${v['name']}", substitute(variable_selector(v)[0], values))
                for v in query_variables(board)]  # fmt: skip
    return out


QUERIES = _queries()
RECORDS = {r.replace("gpuwarden:", "gpuwarden_dcgm:") for r in dcgm_records()}


def test_regenerating_the_variants_gives_the_committed_bytes() -> None:
    files = rendered_dcgm()
    assert sorted(files) == sorted(p.name for p in DCGM_DIR.glob("*.json"))
    for name, text in files.items():
        assert (DCGM_DIR / name).read_text() == text, f"{name} is stale: run python -m dashboards"
    assert main(["--check"]) == 0


def test_there_is_a_variant_of_every_dashboard_with_its_own_uid() -> None:
    assert {uid.removesuffix("-dcgm") for uid in BOARDS} == set(NATIVE)
    assert all(
        b["uid"].endswith("-dcgm") and "(dcgm-exporter)" in b["title"] for b in BOARDS.values()
    )


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_variant_query_reads_dcgm_fields_services_or_the_dcgm_recordings(where, expr):
    known = c.dcgm_names() | RECORDS | EXTERNAL_METRICS | names.EXTERNAL
    unknown = {m for m in metric_names(expr) - known if not m.startswith(SERVICES)}
    assert not unknown, f"{where}: {unknown}"


def test_the_gpu_detail_variant_shows_clocks_in_hertz_from_dcgms_mhz() -> None:
    board = BOARDS["gpuwarden-gpu-dcgm"]
    clocks = next(p for p in board["panels"] if p["title"] == "Clocks")
    sm = c.GPU_SM_CLOCK.dcgm[0].name
    assert any(
        t["expr"] == f'({sm}{{Hostname=~"$node",gpu=~"$gpu"}} / 1e-06)' for t in clocks["targets"]
    )
    assert "Not observable with its fields: Up," in board["description"]


def test_each_panel_left_out_is_named_in_the_description() -> None:
    for uid, board in BOARDS.items():
        kept = {p["title"] for p in board["panels"]}
        native = NATIVE[uid.removesuffix("-dcgm")]
        for p in native["panels"]:
            if p.get("targets") and p["title"] not in kept:
                assert p["title"] in board["description"], f"{uid}: {p['title']}"


@pytest.mark.real
def test_every_variant_query_parses_with_promtool(tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:dcgm_{i}:check", "expr": e} for i, (_, e) in enumerate(QUERIES)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = promtool("check", "rules", str(path))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in out, out


def test_the_reliability_variant_keeps_every_panel_since_the_journal_is_the_same_on_any_fleet():
    """Failure accounting is remediation's (its journal), not the node agent's: on a dcgm fleet
    the Reliability dashboard shows the same panels, not an empty board."""
    variant = BOARDS["gpuwarden-reliability-dcgm"]
    native = NATIVE["gpuwarden-reliability"]
    assert [p["title"] for p in variant["panels"]] == [p["title"] for p in native["panels"]]
    assert "Not observable" not in variant["description"]
