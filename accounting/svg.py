"""Tiny inline-SVG plotting for the report page: stacked bars, interval bars, histograms.
No external URL, no script: the page must open from a mail attachment or an air-gapped box."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from html import escape

W, H = 720, 260
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 20, 50
COLORS = {
    "restart": "#d95f02",
    "recompute": "#7570b3",
    "capacity": "#1b9e77",
    "incidents": "#386cb0",
}


def _svg(plot_id: str, title: str, body: list[str], height: int = H) -> str:
    return (
        f'<svg id="{plot_id}" class="plot" width="{W}" '
        f'height="{height}" viewBox="0 0 {W} {height}" role="img" aria-label="{escape(title)}">'
        f"<title>{escape(title)}</title>" + "".join(body) + "</svg>"
    )


def _text(x: float, y: float, s: str, anchor: str = "middle", size: int = 11) -> str:
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
        f'font-family="sans-serif">{escape(s)}</text>'
    )


def _axes(height: int = H) -> list[str]:
    y0 = height - BOTTOM
    return [
        f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{y0}" stroke="#333"/>',
        f'<line x1="{LEFT}" y1="{y0}" x2="{W - RIGHT}" y2="{y0}" stroke="#333"/>',
    ]


def _empty(plot_id: str, title: str) -> str:
    return _svg(plot_id, title, [*_axes(), _text(W / 2, H / 2, "no data")])


def stacked_bars(
    plot_id: str, title: str, labels: Sequence[str], stacks: Mapping[str, Sequence[float]]
) -> str:
    """One bar per label, stacked by series (``stacks``: series -> value per label)."""
    totals = [sum(s[i] for s in stacks.values()) for i in range(len(labels))]
    top = max(totals, default=0.0)
    if not labels or top <= 0:
        return _empty(plot_id, title)
    plot_h, plot_w = H - TOP - BOTTOM, W - LEFT - RIGHT
    step = plot_w / len(labels)
    body = [
        *_axes(),
        _text(LEFT - 6, TOP + 4, f"{top:,.0f}", "end"),
        _text(LEFT - 6, H - BOTTOM, "0", "end"),
    ]
    for i, label in enumerate(labels):
        y = float(H - BOTTOM)
        for series, values in stacks.items():
            h = plot_h * values[i] / top
            if h <= 0:
                continue
            y -= h
            body.append(
                f'<rect class="bar" x="{LEFT + i * step + 1:.1f}" y="{y:.1f}" '
                f'width="{max(step - 2, 1):.1f}" height="{h:.1f}" fill="{COLORS.get(series, "#999")}">'
                f"<title>{escape(label)} {escape(series)}: {values[i]:,.1f}</title></rect>"
            )
        if len(labels) <= 16 or i % math.ceil(len(labels) / 12) == 0:
            body.append(_text(LEFT + (i + 0.5) * step, H - BOTTOM + 14, label, size=9))
    for k, series in enumerate(stacks if len(stacks) > 1 else ()):
        x = LEFT + 10 + k * 120
        body.append(
            f'<rect x="{x}" y="{H - 18}" width="10" height="10" fill="{COLORS.get(series, "#999")}"/>'
        )
        body.append(_text(x + 14, H - 9, series, "start"))
    return _svg(plot_id, title, body)


def intervals(
    plot_id: str, title: str, rows: Sequence[tuple[str, float | None, float | None, float | None]]
) -> str:
    """Horizontal point + interval per row on a log axis: (label, value, lower, upper)."""
    known = [v for _, *vals in rows for v in vals if v is not None and v > 0]
    if not known:
        return _empty(plot_id, title)
    lo, hi = math.log10(min(known)) - 0.2, math.log10(max(known)) + 0.2
    height = TOP + BOTTOM + 22 * len(rows)
    left = 200
    plot_w = W - left - RIGHT

    def x(v: float) -> float:
        return left + plot_w * (math.log10(v) - lo) / (hi - lo)

    body = [
        f'<line x1="{left}" y1="{height - BOTTOM}" x2="{W - RIGHT}" y2="{height - BOTTOM}" stroke="#333"/>'
    ]
    for decade in range(math.ceil(lo), math.floor(hi) + 1):
        body.append(_text(x(10.0**decade), height - BOTTOM + 14, f"{10.0**decade:,.0f} h", size=9))
    for i, (label, value, lower, upper) in enumerate(rows):
        y = TOP + 22 * i + 11
        body.append(_text(left - 8, y + 4, label, "end"))
        if lower is not None and lower > 0:
            end = x(upper) if upper else W - RIGHT
            dash = "" if upper else ' stroke-dasharray="4 3"'
            body.append(
                f'<line class="interval" x1="{x(lower):.1f}" y1="{y}" x2="{end:.1f}" y2="{y}" '
                f'stroke="#555" stroke-width="2"{dash}/>'
            )
        if value is not None and value > 0:
            body.append(
                f'<circle class="point" cx="{x(value):.1f}" cy="{y}" r="4" fill="#1f78b4">'
                f"<title>{escape(label)}: {value:,.0f} h</title></circle>"
            )
    return _svg(plot_id, title, body, height)


def histogram(plot_id: str, title: str, seconds: Sequence[float]) -> str:
    """Counts in log-spaced bins of a duration (1 s .. 30 d)."""
    edges = [1, 10, 60, 300, 900, 3600, 4 * 3600, 86400, 3 * 86400, 7 * 86400, 30 * 86400]
    names = [
        "<1s",
        "<10s",
        "<1m",
        "<5m",
        "<15m",
        "<1h",
        "<4h",
        "<1d",
        "<3d",
        "<7d",
        "<30d",
        ">=30d",
    ]
    counts = [0] * len(names)
    for s in seconds:
        counts[next((i for i, e in enumerate(edges) if s < e), len(edges))] += 1
    return stacked_bars(plot_id, title, names, {"incidents": [float(c) for c in counts]})
