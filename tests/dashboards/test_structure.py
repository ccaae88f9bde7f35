"""Every dashboard is a current-schema Grafana dashboard that imports cleanly: modern panel
types, one datasource variable, unique ids, a sane grid, units everywhere, no dangling `$var`."""

from __future__ import annotations

from typing import Any

import pytest

from dashboards.render import DATASOURCE, SCHEMA_VERSION
from tests.dashboards.board import (
    BUILTIN_VARIABLES,
    VARIABLE,
    load_all,
    panels,
    query_variables,
    targets,
)

BOARDS = load_all()
MODERN_TYPES = {"timeseries", "stat", "state-timeline", "table", "row"}
LEGACY_KEYS = {"span", "height", "minSpan", "gnetId", "hideControls", "rows", "style"}


def _walk(value: Any) -> list[Any]:
    out = [value]
    if isinstance(value, dict):
        for v in value.values():
            out += _walk(v)
    elif isinstance(value, list):
        for v in value:
            out += _walk(v)
    return out


@pytest.fixture(params=sorted(BOARDS), ids=str)
def board(request: pytest.FixtureRequest) -> dict[str, Any]:
    return BOARDS[request.param]


def test_a_current_schema_version_and_no_legacy_fields(board: dict[str, Any]) -> None:
    assert board["schemaVersion"] == SCHEMA_VERSION >= 36
    assert board["uid"].startswith("gpuwarden-") and len(board["uid"]) <= 40
    keys = {k for d in _walk(board) if isinstance(d, dict) for k in d}
    assert not keys & LEGACY_KEYS


def test_no_nulls_except_the_base_threshold_step(board: dict[str, Any]) -> None:
    """The one null Grafana wants is the first threshold step's value (-infinity)."""
    nulls = [v for d in _walk(board) if isinstance(d, dict) for v in d.values() if v is None]
    for p in panels(board):
        steps = p["fieldConfig"]["defaults"]["thresholds"]["steps"]
        assert [s["value"] is None for s in steps] == [True] + [False] * (len(steps) - 1)
    assert len(nulls) == len(panels(board))


def test_only_modern_panel_types(board: dict[str, Any]) -> None:
    assert {p["type"] for p in board["panels"]} <= MODERN_TYPES


def test_panel_ids_are_unique(board: dict[str, Any]) -> None:
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids))


def test_panels_fit_the_24_column_grid_without_overlapping(board: dict[str, Any]) -> None:
    cells: set[tuple[int, int]] = set()
    for p in board["panels"]:
        pos = p["gridPos"]
        assert pos["w"] > 0 and pos["h"] > 0 and pos["x"] >= 0 and pos["x"] + pos["w"] <= 24
        mine = {(x, y) for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])}  # fmt: skip
        assert not cells & mine, f"panel {p['title']!r} overlaps another"
        cells |= mine


def test_every_panel_has_a_unit_and_a_title(board: dict[str, Any]) -> None:
    for p in panels(board):
        assert p["title"]
        assert p["fieldConfig"]["defaults"].get("unit"), f"panel {p['title']!r} has no unit"


def test_every_target_has_an_expr_and_a_unique_ref_id(board: dict[str, Any]) -> None:
    for p in panels(board):
        assert p["targets"], f"panel {p['title']!r} has no query"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs))
        assert all(t["expr"].strip() for t in p["targets"])


def test_every_datasource_is_the_prometheus_variable(board: dict[str, Any]) -> None:
    variables = board["templating"]["list"]
    assert variables[0]["name"] == "datasource"
    assert variables[0]["type"] == "datasource" and variables[0]["query"] == "prometheus"
    refs = [d["datasource"] for d in _walk(board) if isinstance(d, dict) and "datasource" in d]
    assert all(ref == DATASOURCE for ref in refs if isinstance(ref, dict))
    for p in panels(board):
        assert p["datasource"] == DATASOURCE
        assert all(t["datasource"] == DATASOURCE for t in p["targets"])
    for v in query_variables(board):
        assert v["datasource"] == DATASOURCE


def test_every_variable_used_is_defined(board: dict[str, Any]) -> None:
    defined = {v["name"] for v in board["templating"]["list"]} | set(BUILTIN_VARIABLES)
    used = {m.group(1) for _, t in targets(board) for m in VARIABLE.finditer(t["expr"])}
    used |= {m.group(1) for v in query_variables(board) for m in VARIABLE.finditer(v["definition"])}
    assert used <= defined, used - defined


def test_a_variable_only_refers_to_variables_defined_before_it(board: dict[str, Any]) -> None:
    seen: set[str] = set(BUILTIN_VARIABLES)
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            assert {m.group(1) for m in VARIABLE.finditer(v["definition"])} <= seen
        seen.add(v["name"])


def test_the_structure_checks_catch_a_broken_dashboard() -> None:
    broken = {**BOARDS["gpuwarden-fleet"]}
    broken["panels"] = [dict(p) for p in broken["panels"]]
    broken["panels"][1]["id"] = broken["panels"][0]["id"]
    broken["panels"][0]["gridPos"] = {**broken["panels"][0]["gridPos"], "x": 22}
    with pytest.raises(AssertionError):
        test_panel_ids_are_unique(broken)
    with pytest.raises(AssertionError):
        test_panels_fit_the_24_column_grid_without_overlapping(broken)
    broken["panels"][2]["targets"] = [
        {**broken["panels"][2]["targets"][0], "expr": 'up{a="$nope"}'}
    ]
    with pytest.raises(AssertionError):
        test_every_variable_used_is_defined(broken)


def test_every_dashboard_links_to_the_others_keeping_time_and_variables(
    board: dict[str, Any],
) -> None:
    (link,) = board["links"]
    assert link["type"] == "dashboards" and link["tags"] == ["gpuwarden"]
    assert link["keepTime"] and link["includeVars"]
    assert "gpuwarden" in board["tags"]
