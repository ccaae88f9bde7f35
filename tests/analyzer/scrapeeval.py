"""A foreign dialect's queries answered from one recorded scrape, as Prometheus answers them.

The dialect readers (analyzer.sources.dialects) send ``max by (<by>) (<source>)`` times the
unit factor, then relabel each answer (Query.expr, Query.relabel). Here the same query objects
are evaluated over the samples of a /metrics text: the source's name and its ``label!=""``
matcher select, ``* 0 + 1`` and ``> bool 0`` transform, ``max by`` groups (dropping empty
labels, as PromQL does), then the query's own divide and relabel run. Only the source forms
the dialect readers build are understood; another one fails the test that meets it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from analyzer.sources.queries import Query

_SOURCE = re.compile(r'^(\w+)(?:\{(\w+)!=""\})?( \* 0 \+ 1| > bool 0)?$')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Answer:
    metric: str  # the catalogue name the query fills
    labels: dict[str, str]  # after the query's relabel
    value: float  # in the catalogue's unit


def samples(text: str, instance: str = "") -> list[Sample]:
    """Every sample of an exposition text; ``instance``: the label Prometheus's scrape adds."""
    out = []
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            labels = dict(s.labels)
            if instance:
                labels.setdefault("instance", instance)
            out.append(Sample(s.name, labels, float(s.value)))
    return out


def answer(q: Query, data: Iterable[Sample]) -> list[Answer]:
    """What one dialect query returns over ``data``."""
    m = _SOURCE.match(q.source)
    assert m, f"not a source form this evaluator knows: {q.source!r}"
    name, nonempty, op = m.group(1), m.group(2), m.group(3) or ""
    groups: dict[tuple[str, ...], float] = {}
    for s in data:
        if s.name != name or (nonempty and not s.labels.get(nonempty)):
            continue
        v = 1.0 if "* 0" in op else float(s.value > 0) if "bool" in op else s.value
        key = tuple(s.labels.get(b, "") for b in q.by)
        groups[key] = max(groups.get(key, v), v)
    assert q.relabel is not None
    out = []
    for key, v in groups.items():
        labels = {b: x for b, x in zip(q.by, key, strict=True) if x}
        out.append(Answer(q.metric.name, q.relabel(labels), v / q.divide))
    return out


def answers(queries: Iterable[Query], data: list[Sample]) -> list[Answer]:
    return [a for q in queries for a in answer(q, data)]


def names(data: Iterable[Sample]) -> frozenset[str]:
    """The metric names present: what the dialect discovery finds in a Prometheus."""
    return frozenset(s.name for s in data)
