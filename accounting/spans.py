"""Time spans as [start, end) pairs of epoch seconds (end ``inf``: not over yet) and the two
operations the out-of-service arithmetic needs: the union of spans, and a span less others."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

Span = tuple[float, float]
FOREVER = float("inf")


def merged(spans: Iterable[Span]) -> list[Span]:
    """The union, as sorted disjoint spans (touching spans join)."""
    out: list[Span] = []
    for start, end in sorted(s for s in spans if s[1] > s[0]):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def minus(span: Span, holes: Sequence[Span]) -> list[Span]:
    """The pieces of ``span`` outside every hole (holes in any order, overlapping or not)."""
    pieces, cursor = [], span[0]
    for start, end in merged(holes):
        if start > cursor:
            pieces.append((cursor, min(start, span[1])))
        cursor = max(cursor, end)
    if cursor < span[1]:
        pieces.append((cursor, span[1]))
    return [(s, e) for s, e in pieces if e > s]


def overlap(span: Span, others: Sequence[Span]) -> list[Span]:
    """The pieces of ``span`` inside ``others`` (disjoint, as ``merged`` gives them)."""
    out = [(max(span[0], s), min(span[1], e)) for s, e in others]
    return [(s, e) for s, e in out if e > s]
