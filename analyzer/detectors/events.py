"""Per-node watermarks over event streams (XIDs, AMD RAS events): which of a window's events
a stateful detector has not judged yet.

Per node, not per detector: where analyzer replicas share the fleet
(:mod:`analyzer.replicas`), a node another replica judged until now, or one an engine has
never seen, has the events still in the window judged afresh, as a freshly started analyzer
would; a global watermark would skip them because other nodes' events were newer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TypeVar

from analyzer.window import AfidEvent, XidEvent

E = TypeVar("E", XidEvent, AfidEvent)


def fresh(events: Iterable[E], nodes: Sequence[str], watermark: dict[str, float]) -> list[E]:
    """The ``events`` newer than their node's ``watermark``; the watermark moves to each
    node's newest event."""
    out: list[E] = []
    newest: dict[str, float] = {}
    for e in events:
        if not 0 <= e.node < len(nodes):
            continue
        name = nodes[e.node]
        if e.t > watermark.get(name, float("-inf")):
            out.append(e)
        newest[name] = max(newest.get(name, float("-inf")), e.t)
    for name, t in newest.items():
        watermark[name] = max(watermark.get(name, float("-inf")), t)
    return out
