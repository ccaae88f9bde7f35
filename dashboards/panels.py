"""Panel and variable builders shared by every dashboard module (grafanalib underneath).

Sits between the dashboard modules (what to show) and ``render`` (how Grafana wants the JSON):
each builder takes a title, PromQL and a unit, and a ``Layout`` places panels on the
24-column grid so modules never spell coordinates.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from grafanalib import core as g

DATASOURCE = "${datasource}"
GRID_COLUMNS = 24


@dataclass
class Layout:
    """Places panels left to right, wrapping to a new row at 24 columns."""

    x: int = 0
    y: int = 0
    row_height: int = 0
    panels: list[Any] = field(default_factory=list)

    def add(self, panel: Any, w: int, h: int) -> None:
        if self.x + w > GRID_COLUMNS:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        panel.gridPos = g.GridPos(h=h, w=w, x=self.x, y=self.y)
        self.panels.append(panel)
        self.x += w
        self.row_height = max(self.row_height, h)

    def row(self, title: str) -> None:
        """A full-width row header; the next panels start below it."""
        if self.x:
            self.x, self.y, self.row_height = 0, self.y + self.row_height, 0
        self.add(g.RowPanel(title=title), GRID_COLUMNS, 1)
        self.x, self.y, self.row_height = 0, self.y + 1, 0


def target(expr: str, legend: str = "", ref: str = "A", instant: bool = False) -> g.Target:
    return g.Target(
        expr=expr,
        legendFormat=legend,
        refId=ref,
        instant=instant,
        format="table" if instant else "time_series",
        datasource=DATASOURCE,
    )


def _targets(queries: list[tuple[str, str]], instant: bool = False) -> list[g.Target]:
    refs = "ABCDEFGHIJ"
    return [target(q, legend, refs[i], instant) for i, (q, legend) in enumerate(queries)]


def timeseries(
    title: str, queries: list[tuple[str, str]], unit: str, description: str = "", **kw: Any
) -> g.TimeSeries:
    return g.TimeSeries(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets(queries),
        unit=unit,
        legendDisplayMode="table" if len(queries) > 1 else "list",
        tooltipMode="multi",
        **kw,
    )


def stat(
    title: str,
    expr: str,
    unit: str,
    description: str = "",
    thresholds: list[tuple[str, float | None]] | None = None,
) -> g.Stat:
    """A single number. ``thresholds``: (color, from value); the first starts at -inf."""
    steps = thresholds or [("green", None)]
    return g.Stat(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets([(expr, "")]),
        format=unit,
        reduceCalc="lastNotNull",
        graphMode="none",
        thresholds=[
            g.Threshold(color, i, float(value or 0)) for i, (color, value) in enumerate(steps)
        ],
    )


def state_timeline(
    title: str,
    expr: str,
    legend: str,
    states: dict[int, tuple[str, str]],
    description: str = "",
) -> g.StateTimeline:
    """A row per series, coloured by value; ``states``: value -> (text, colour)."""
    mappings = {
        "type": "value",
        "options": {
            str(v): {"text": text, "color": color, "index": i}
            for i, (v, (text, color)) in enumerate(sorted(states.items()))
        },
    }
    return g.StateTimeline(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets([(expr, legend)]),
        mappings=[mappings],
        showValue="never",
        extraJson={"fieldConfig": {"defaults": {"unit": "none", "color": {"mode": "fixed"}}}},
    )


def table(
    title: str, expr: str, unit: str, description: str = "", hide: tuple[str, ...] = ()
) -> g.Table:
    """An instant query as a table, one row per series; ``hide``: columns not worth a glance."""
    excluded = {"Time": True, "__name__": True, "job": True, "instance": True}
    excluded.update(dict.fromkeys(hide, True))
    return g.Table(
        title=title,
        description=description,
        dataSource=DATASOURCE,
        targets=_targets([(expr, "")], instant=True),
        unit=unit,
        transformations=[{"id": "organize", "options": {"excludeByName": excluded}}],
    )


def query_variable(
    name: str, label: str, query: str, multi: bool = False, include_all: bool = False
) -> g.Template:
    """A Prometheus query variable (``label_values(...)``), refreshed on time-range change."""
    return g.Template(
        name=name,
        label=label,
        query=query,
        dataSource=DATASOURCE,
        multi=multi,
        includeAll=include_all,
        allValue=".*" if include_all else None,
        refresh=2,
        sort=3,
    )


def dashboard(
    title: str,
    uid: str,
    description: str,
    layout: Layout,
    variables: list[g.Template] = (),  # type: ignore[assignment]
    tags: tuple[str, ...] = (),
) -> g.Dashboard:
    return g.Dashboard(
        title=title,
        uid=uid,
        description=description,
        tags=["gpuwarden", *tags],
        panels=layout.panels,
        templating=g.Templating(list=list(variables)),
        # A drop-down of every gpuwarden dashboard, carrying the time range and variables.
        links=[
            g.DashboardLink(
                asDropdown=True,
                tags=["gpuwarden"],
                title="gpuwarden",
                type="dashboards",
                includeVars=True,
                keepTime=True,
            )
        ],
        time=g.Time("now-6h", "now"),
        refresh="1m",
        timezone="utc",
    ).auto_panel_ids()
