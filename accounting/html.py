"""The report as one self-contained HTML page (inline CSS and SVG, no script, no URL):
GPU-hours lost per week by cause, MTBF per model and component with its 90 % interval,
the distributions of TTD and TTR, then the tables an administrator copies into a review
(with ``--plan``, the planner's table)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from accounting import report as report_mod
from accounting import svg, text
from accounting.plan import Row, Settings
from accounting.report import Report

STYLE = (
    "body{font-family:sans-serif;margin:2em;max-width:60em;color:#222}"
    "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
    "text-align:right}th{background:#eee}td:first-child,th:first-child{text-align:left}"
    "pre{background:#f6f6f6;padding:1em;overflow:auto}"
)


def _week(t: float) -> str:
    year, week, _ = datetime.fromtimestamp(t, tz=UTC).isocalendar()
    return f"{year}-W{week:02d}"


def weekly_plot(report: Report) -> str:
    per_week: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    if report.window is not None:
        t = report.window.since
        while t < report.window.until:  # every week of the window, also those without a loss
            per_week[_week(t)]
            t += 7 * 86400.0
    for c in report.costs:
        week = per_week[_week(c.incident.onset)]
        week["restart"] += c.restart_h
        week["recompute"] += c.recompute_known_h
        week["capacity"] += c.capacity_h
    weeks = sorted(per_week)
    stacks = {k: [per_week[w][k] for w in weeks] for k in ("restart", "recompute", "capacity")}
    return svg.stacked_bars("lost-per-week", "GPU-hours lost per week by cause", weeks, stacks)


def mtbf_plot(report: Report) -> str:
    rows = [
        (f"{c.gpu_model} {c.component} ({c.failures})", c.mtbf_hours, c.lower90, c.upper90)
        for c in report.cells
        if c.exposure_hours
    ]
    return svg.intervals("mtbf", "MTBF (hours) per GPU model and component, 90% interval", rows)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(v)}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def planning(rows: Sequence[Row], settings: Settings | None) -> list[str]:
    """The planner's table (docs/accounting.md, "Planning"); nothing without --plan."""
    if settings is None or not rows:
        return []
    s = settings
    return [
        "<h2>Planning</h2>",
        f"<p>Checkpoint cost {s.checkpoint_s / 60:g} min, restart"
        f" {'as measured' if s.restart_s is None else f'{s.restart_s / 60:g} min'};"
        " each figure is the estimate [low, high] with every MTBF cell at its 90 % bounds;"
        " the interval is Daly's higher-order optimum; spare nodes for a restart within"
        f" {s.restart_target_s / 60:g} min with probability {s.restart_probability:g}.</p>",
        _table(
            [
                "model",
                "GPUs",
                "nodes",
                "failures/day",
                "job MTBF h",
                "checkpoint every h",
                "ETTR",
                f"P({s.hours:g} h uninterrupted)",
                "GPU-h lost/day",
                "restart min",
                "spare nodes",
            ],
            [
                [
                    r.model,
                    f"{r.gpus:,}",
                    f"{r.nodes:,}",
                    text.band(r.failures_per_day, ",.3f"),
                    text.band(r.job_mtbf_h, ",.1f"),
                    text.band(r.daly_h, ",.2f"),
                    text.band(r.ettr, ".4f"),
                    text.band(r.uninterrupted, ".3f"),
                    text.band(r.lost_gpu_h_per_day, ",.1f"),
                    f"{r.restart_h * 60:,.1f}",
                    text.band(r.spares, ".0f", "-"),
                ]
                for r in rows
            ],
        ),
    ]


def render(report: Report, rows: Sequence[Row] = (), settings: Settings | None = None) -> str:
    doc = report_mod.to_json(report)
    costs = report.costs
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>gpuwarden reliability report</title><style>{STYLE}</style></head><body>",
        "<h1>gpuwarden reliability report</h1>",
        "<h2>GPU-hours lost per week, by cause</h2>",
        weekly_plot(report),
        "<h2>MTBF per GPU model and component</h2>",
        "<p>Exact two-sided 90 % chi-squared interval (time-terminated); a dashed bar has no"
        " upper bound (no failure yet).</p>",
        mtbf_plot(report),
        "<h2>Time to detect</h2>",
        svg.histogram("ttd", "Time to detect (incidents per bin)", [c.ttd_s for c in costs]),
        "<h2>Time to repair</h2>",
        svg.histogram("ttr", "Time to repair (incidents per bin)", [c.ttr_s for c in costs]),
        "<h2>MTBF table</h2>",
        _table(
            ["model", "component", "failures", "exposure h", "MTBF h", "lower 90", "upper 90"],
            [
                [
                    m["gpu_model"],
                    m["component"],
                    str(m["failures"]),
                    _fmt(m["exposure_hours"]),
                    _fmt(m["mtbf_hours"]),
                    _fmt(m["lower90"]),
                    _fmt(m["upper90"]),
                ]
                for m in doc["mtbf"]
            ],
        ),
        "<h2>Lemons</h2>",
        _table(
            ["unit", "node", "gpu", "model", "component", "failures", "exposure h"],
            [
                [
                    lem["unit"],
                    lem["node"],
                    lem["gpu"] or "",
                    lem["gpu_model"],
                    lem["component"],
                    str(lem["failures"]),
                    _fmt(lem["exposure_hours"]),
                ]
                for lem in doc["lemons"]
            ],
        ),
        *planning(rows, settings),
        "<h2>Summary</h2>",
        f"<pre>{escape(text.render(report))}</pre>",
        "</body></html>",
    ]
    return "\n".join(parts) + "\n"
