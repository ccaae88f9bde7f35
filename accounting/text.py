"""The printed reliability report: what a quarterly review reads first."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence

from accounting.model import GPU_COMPONENTS, NODE_COMPONENTS
from accounting.plan import Band, Row, Settings
from accounting.report import Report
from accounting.writer import format_time

MAX_LISTED = 10


def _h(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def _dur(seconds: list[float]) -> str:
    if not seconds:
        return "-"
    ordered = sorted(seconds)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"median {statistics.median(ordered) / 60:,.1f} min, p90 {p90 / 60:,.1f} min"


def render(report: Report) -> str:
    if report.window is None:
        return "gpuwarden reliability report: no incidents and no exposure to report on\n"
    w = report.window
    days = (w.until - w.since) / 86400.0
    out = [
        f"gpuwarden reliability report {format_time(w.since)} .. {format_time(w.until)}"
        f" ({days:,.1f} days)",
        "",
    ]
    out += [*_lost(report), "", *_mtbf(report), "", *_lemons(report), ""]
    out += [*_times(report), "", *_ettr(report)]
    return "\n".join(out) + "\n"


def _lost(report: Report) -> list[str]:
    parts: dict[str, float] = defaultdict(float)
    by_component: dict[str, float] = defaultdict(float)
    for c in report.costs:
        parts["restart"] += c.restart_h
        parts["recompute"] += c.recompute_known_h
        parts["capacity"] += c.capacity_h
        by_component[c.incident.component] += c.total_h
    total = sum(parts.values())
    lines = [
        f"GPU-hours lost: {_h(total)} = restart {_h(parts['restart'])}"
        f" + recompute {_h(parts['recompute'])} + capacity {_h(parts['capacity'])}"
        f" ({len(report.costs)} incidents)"
    ]
    if by_component:
        ranked = sorted(by_component.items(), key=lambda kv: -kv[1])
        lines.append("  by component: " + ", ".join(f"{k} {_h(v)}" for k, v in ranked))
    unknown = report.unknown_recompute
    if unknown:
        shown = ", ".join(map(str, unknown[:MAX_LISTED])) + (
            " ..." if len(unknown) > MAX_LISTED else ""
        )
        lines.append(
            f"  recompute unknown (a job had no checkpoint time) for {len(unknown)}: {shown}"
        )
    return lines


def _mtbf(report: Report) -> list[str]:
    lines = [
        "MTBF per GPU model and component (exact two-sided 90% chi-squared interval,"
        " time-terminated)",
        f"  {'model':<16} {'component':<11} {'failures':>8} {'exposure h':>14} {'MTBF h':>12}"
        f"  90% interval",
    ]
    for c in report.cells:
        unit = (
            "GPU"
            if c.component in GPU_COMPONENTS
            else "node"
            if c.component in NODE_COMPONENTS
            else ""
        )
        exposure = (
            f"{_h(c.exposure_hours)} {unit}".strip() if c.exposure_hours is not None else "no unit"
        )
        interval = (
            "-"
            if c.lower90 is None
            else f"[{_h(c.lower90)}, {_h(c.upper90) if c.upper90 else 'inf'}]"
        )
        note = "  few failures: wide interval" if c.few and c.exposure_hours else ""
        lines.append(
            f"  {c.gpu_model:<16} {c.component:<11} {c.failures:>8} {exposure:>14}"
            f" {_h(c.mtbf_hours):>12}  {interval}{note}"
        )
    return lines + _given(report)


def _given(report: Report) -> list[str]:
    """The names each SKU was given, where one differs from it (gpu_models.py)."""
    names: dict[str, tuple[str, ...]] = {}
    for c in report.cells:
        if any(n != c.gpu_model for n in c.names):
            names[c.gpu_model] = c.names
    return [f"  {sku} given as: {', '.join(given)}" for sku, given in sorted(names.items())]


def _lemons(report: Report) -> list[str]:
    if not report.lemons:
        return ["Lemons: none (no unit above the Poisson 99th percentile at its model's rate)"]
    lines = ["Lemons (failures above the Poisson 99th percentile at the model's rate)"]
    for lem in report.lemons:
        where = lem.node if lem.gpu is None else f"{lem.node} gpu {lem.gpu}"
        lines.append(
            f"  {lem.unit:<20} {where:<16} {lem.gpu_model:<10} {lem.component:<10}"
            f" {lem.failures} failures in {_h(lem.exposure_hours)} h"
            f" (expected {lem.expected:.2f}, 99th percentile {lem.threshold})"
        )
    return lines


def _times(report: Report) -> list[str]:
    return [
        "Time to detect:   " + _dur([c.ttd_s for c in report.costs]),
        "Time to mitigate: " + _dur([c.ttm_s for c in report.costs if c.ttm_s is not None]),
        "Time to repair:   " + _dur([c.ttr_s for c in report.costs]),
    ]


def _ettr(report: Report) -> list[str]:
    e = report.ettr
    unknown = sum(1 for j in e.jobs if j.ettr is None)
    if e.gpu_hour_weighted is None:
        lines = [
            f"ETTR: unknown ({len(e.jobs)} job runs, none with allocation and checkpoint times)"
        ]
    else:
        lines = [
            f"ETTR: {e.gpu_hour_weighted:.4f} GPU-hour-weighted, {e.job_count_weighted:.4f}"
            f" job-count-weighted over {len(e.jobs) - unknown} job runs; {unknown} unknown"
        ]
    if e.never_resumed:
        shown = ", ".join(str(j) for j in e.never_resumed[:10])
        more = f" and {len(e.never_resumed) - 10} more" if len(e.never_resumed) > 10 else ""
        lines.append(f"Never resumed (run ended; restart stopped there): {shown}{more}")
    return lines


def band(b: Band, fmt: str, unbounded: str = "inf") -> str:
    """``estimate [low, high]``; ``unbounded`` for an end with no bound."""

    def one(v: float | None, missing: str) -> str:
        return missing if v is None else format(v, fmt)

    if b.estimate is None and b.low is None and b.high is None:
        return "unknown"
    return f"{one(b.estimate, unbounded)} [{one(b.low, unbounded)}, {one(b.high, unbounded)}]"


def plan(rows: Sequence[Row], settings: Settings) -> str:
    """The planner's block per job: estimate [low, high] from the MTBF cells' 90% bounds."""
    if not rows:
        return ""
    s = settings
    out = [
        f"Planning: checkpoint cost {s.checkpoint_s / 60:,.1f} min, restart"
        f" {_restart(s)}; estimate [low, high] with every MTBF cell at its 90% bounds"
    ]
    for r in rows:
        lost = (
            f"{r.unitless_failures} software/unknown failures: no unit exposure, not in the rates"
        )
        out += [
            f"  {r.model}, {r.gpus:,} GPUs on {r.nodes:,} node{'' if r.nodes == 1 else 's'}",
            f"    failures a day        {band(r.failures_per_day, ',.3f')};"
            f" job MTBF {band(r.job_mtbf_h, ',.1f')} h",
            f"    checkpoint every      {band(r.daly_h, ',.2f')} h (Daly's higher-order"
            f" optimum; Young's {'-' if r.young_h is None else f'{r.young_h:,.2f}'} h)",
            f"    ETTR at that interval {band(r.ettr, '.4f')}",
            f"    P({s.hours:g} h uninterrupted) {band(r.uninterrupted, '.3f')}",
            f"    GPU-hours lost a day  {band(r.lost_gpu_h_per_day, ',.1f')}"
            " (checkpoints, restarts, recompute)",
            f"    spare nodes           {band(r.spares, '.0f', '-')} for a restart within"
            f" {s.restart_target_s / 60:g} min with probability {s.restart_probability:g}"
            f" (partition of {r.partition_nodes:,} nodes; {r.repairs} repair times measured)",
        ]
        if r.restarts_measured is not None:
            out.append(
                f"    restart               {r.restart_h * 60:,.1f} min, the mean of"
                f" {r.restarts_measured} measured (interruption to resumption)"
            )
        if r.unitless_failures:
            out.append(f"    {lost}")
    return "\n".join(out) + "\n"


def _restart(s: Settings) -> str:
    return "as measured" if s.restart_s is None else f"{s.restart_s / 60:,.1f} min"
