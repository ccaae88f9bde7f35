"""Which moved-counter checks the Prometheus source asks for: the rule engine's recorded
ones (:mod:`analyzer.sources.features`, kind ``moved``) for the nodes it covers, the raw
``changes()`` scan only for the nodes it does not (issue 33). Pure string building.

A node is covered when its ``present`` feature has a sample at the read's time: its shard's
rule group ran. Every other node the source knows (from the last window) is scanned raw, so
a shard whose rules stopped, a node the relabelling missed, or a fleet without the feature
rules at all (nothing covered: the plain raw scan, unchanged) is still judged; where more than
half the nodes are not covered, the plain raw scan too. The recorded
check is the analyzer's own expression (``Query.moved_expr``'s shape) evaluated per shard,
so the rows found, and the raw rows then read for them, are the same either way; where the
engine evaluates with an offset (``query_offset``), the recorded check lags the raw one by
that much.
"""

from __future__ import annotations

from collections.abc import Iterable

from analyzer.sources.features import Feature
from analyzer.sources.queries import Query, regex_literal


def covered_expr(present: Feature, extra: str = "") -> str:
    """The instant read of the nodes the rule engine covers now (of those ``extra`` selects)."""
    sel = f"{present.record}{{{extra}}}" if extra else present.record
    return f"max by (node) ({sel})"


def moved_exprs(q: Query, feature: Feature | None, sels: list[str], span: float,
                covered: set[str], known: Iterable[str]) -> list[str]:  # fmt: skip
    """The instant expressions (or-ed by the caller) whose rows are ``q``'s moved series
    under each matcher set of ``sels``."""
    known = set(known)
    raw = sorted(known - covered)
    # nothing covered, or most nodes not: the plain scan (a node=~ alternation of thousands
    # of names would cost the server more than the scan it narrows)
    if feature is None or not covered or len(raw) > len(known) // 2:
        return [q.moved_expr(span, sel) for sel in sels]
    by = ",".join(q.labels)
    out = [f"max by ({by}) ({feature.record}{{{sel}}})" if sel
           else f"max by ({by}) ({feature.record})" for sel in sels]  # fmt: skip
    if raw:
        nodes = f'node=~"{"|".join(regex_literal(n) for n in raw)}"'
        out += [q.moved_expr(span, ",".join(x for x in (sel, nodes) if x)) for sel in sels]
    return out
