"""The AMD DME variants of the dashboards (dashboards/json/amd/) are generated from the native
ones through the same translator as dcgm's, never drift, read only DME's fields (plus
gpuwarden's own services' and the AMD rule variant's recordings), parse with promtool, and say
what they left out."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from dashboards import names
from dashboards.__main__ import AMD_RULES, JSON_DIR, dcgm_records, main, rendered_amd
from dashboards.translate import SERVICES
from exporter import catalog as c
from exporter import catalog_amd as dme
from tests.alerts.ruleset import EXTERNAL_METRICS, metric_names
from tests.dashboards.board import query_variables, substitute, targets, variable_selector
from tests.realcomp import promtool

AMD_DIR = JSON_DIR / "amd"
BOARDS = {p.stem: json.loads(p.read_text()) for p in sorted(AMD_DIR.glob("*.json"))}
NATIVE = {p.stem: json.loads(p.read_text()) for p in sorted(JSON_DIR.glob("*.json"))}
DME_FIELDS = {*dme.read_fields(), *(dme.ras_field(b, "correctable") for b in c.RAS_BLOCKS)}


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
RECORDS = {r.replace("gpuwarden:", "gpuwarden_amd:")
           for r in dcgm_records(AMD_RULES, "gpuwarden_amd:")}  # fmt: skip


def test_regenerating_the_variants_gives_the_committed_bytes() -> None:
    files = rendered_amd()
    assert sorted(files) == sorted(p.name for p in AMD_DIR.glob("*.json"))
    for name, text in files.items():
        assert (AMD_DIR / name).read_text() == text, f"{name} is stale: run python -m dashboards"
    assert main(["--check"]) == 0


def test_there_is_a_variant_of_every_dashboard_with_its_own_uid() -> None:
    assert {uid.removesuffix("-amd") for uid in BOARDS} == set(NATIVE)
    assert all(b["uid"].endswith("-amd") and "(AMD DME)" in b["title"] for b in BOARDS.values())


@pytest.mark.parametrize(("where", "expr"), QUERIES, ids=[w for w, _ in QUERIES])
def test_every_variant_query_reads_dme_fields_services_or_the_amd_recordings(where, expr):
    known = DME_FIELDS | RECORDS | EXTERNAL_METRICS | names.EXTERNAL
    unknown = {m for m in metric_names(expr) - known if not m.startswith(SERVICES)}
    assert not unknown, f"{where}: {unknown}"


def test_the_gpu_detail_variant_names_gpus_by_dmes_labels_and_shows_ras_blocks_and_xgmi_links():
    board = BOARDS["gpuwarden-gpu-amd"]
    panels = {p["title"]: p for p in board["panels"]}
    for v in query_variables(board):  # one plain selector: Grafana's label_values() takes no `or`
        assert re.fullmatch(r'label_values\(gpu_health(\{hostname=~"\$node"\})?, \w+\)',
                            v["definition"]), v["definition"]  # fmt: skip
    ras = " ".join(t["expr"] for t in panels["RAS errors per block, last hour (AMD)"]["targets"])
    assert "gpu_ecc_uncorrect_umc{" in ras and "gpu_ecc_deferred_xgmi_wafl{" in ras
    xgmi = panels["XGMI traffic per link (AMD)"]["targets"]
    assert {t["legendFormat"] for t in xgmi} == {"link {{link_index}} tx", "link {{link_index}} rx"}
    assert "Row remap pending" in board["description"]  # NVIDIA's: left out, and said so


def test_each_panel_left_out_is_named_in_the_description() -> None:
    for uid, board in BOARDS.items():
        kept = {p["title"] for p in board["panels"]}
        native = NATIVE[uid.removesuffix("-amd")]
        for p in native["panels"]:
            if p.get("targets") and p["title"] not in kept:
                assert p["title"] in board["description"], f"{uid}: {p['title']}"


@pytest.mark.real
def test_every_variant_query_parses_with_promtool(tmp_path: Path) -> None:
    rules = [{"record": f"dashboard:amd_{i}:check", "expr": e} for i, (_, e) in enumerate(QUERIES)]
    path = tmp_path / "queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    r = promtool("check", "rules", str(path))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0 and f"SUCCESS: {len(rules)} rules found" in out, out
