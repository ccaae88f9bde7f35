"""Helpers of the replica-read tests (a replica reads only its own nodes, issue 33): a logging
HTTP client, a source read at a plan of moments and owned nodes, the hosts an answer names,
the comparison of a replica's window with the single read's part of it, and one service
cycle of a single analyzer and of each replica under one plan; and the real Prometheus these
tests read (promdata's history with two ownership units)."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.role import ReplicaRole
from analyzer.service import AnalyzerService
from analyzer.sources.dialects.identity import raw_identity
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import Window
from exporter import catalog as c
from tests.realcomp import Prometheus

from .promdata import backfilled

Found = set[tuple[str, str, str]]


def two_jobs(text: str) -> str:
    """promdata's history with node-02 in a job of its own: two ownership units."""
    name = re.escape(c.GPU_ALLOCATION_INFO.name)
    alloc = re.compile(rf'^({name}\{{node="node-02".*)job_id="777"', re.M)
    return alloc.sub(r'\1job_id="778"', text)


def two_jobs_prometheus(tmp: Any) -> Iterator[tuple[Prometheus, float]]:
    """A real Prometheus over :func:`two_jobs`' history backfilled in ``tmp`` (a module
    fixture's temporary directory), and the history's end."""
    yield from backfilled(tmp, two_jobs)


class Logged:
    """Wraps the source's HTTP client and keeps every request and its answer."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.calls: list[tuple[str, dict[str, str], bytes]] = []

    async def post(self, path, form):
        body = await self.inner.post(path, form)
        self.calls.append((path, dict(form), body))
        return body

    async def close(self):
        await self.inner.close()


def reads(url: str, plan: list[tuple[float, set[str] | None]], step: float, **kw: Any):
    """One source (``kw``: more of its settings) reading at each moment of ``plan``, owning the
    nodes given (None: all): per cycle its window, requests, bytes and topology."""

    async def go():
        source = PrometheusSource(url, window=600, step=step, **kw)
        source.http = log = Logged(source.http)
        out = []
        try:
            for at, own in plan:
                source.scope = None if own is None else (lambda topo, own=own: own)
                log.calls.clear()
                w = await source.read(at)
                out.append((w, list(log.calls), source.stats.cycle_bytes, source.topology))
        finally:
            await source.close()
        return out

    return asyncio.run(go())


def series_hosts(body: bytes) -> set[str]:
    """The hosts an answer's series name (``node``, else a foreign exporter's host label)."""
    return {raw_identity(r["metric"]) for r in json.loads(body)["data"]["result"]}


def same_window(a: Window, b: Window) -> None:
    assert a.nodes == b.nodes
    for x, y in ((a.metrics, b.metrics), (a.ib_counters, b.ib_counters)):
        for k in set(x) | set(y):
            if k in x and k in y:
                assert np.array_equal(x[k], y[k], equal_nan=True), k
            else:  # a family of which nothing moved on these nodes: not read, or all quiet
                held = x.get(k, y.get(k))
                assert held is not None and not np.nan_to_num(held).any(), k
    assert [(e.t, e.node, e.gpu, e.xid) for e in a.xids] == [
        (e.t, e.node, e.gpu, e.xid) for e in b.xids
    ]
    assert a.jobs == b.jobs and a.sku == b.sku


def single_and_replicas(url: str, end: float, step: float, members: tuple[str, ...],
                        **kw: Any) -> tuple[tuple[Found, tuple[str, ...]],
                                            list[tuple[ReplicaRole, Found, tuple[str, ...]]]]:  # fmt: skip
    """One service cycle at ``end + 5`` of a single analyzer, then of each of ``members``
    under one plan (``kw``: more of the source's settings): the findings ``(node, subject,
    kind)`` and the window's nodes of each, with each replica's role."""
    interval = 60.0
    at = end + 5
    plan = Plan(int(at // interval), members, members[0])
    store = MemoryMembership()

    async def run(role: ReplicaRole | None) -> tuple[Found, tuple[str, ...]]:
        source = PrometheusSource(url, window=600, step=step, **kw)
        service = AnalyzerService(source, Engine(default_detectors()), interval, replica=role)
        try:
            await service.run_cycle(at, plan if role is not None else None)
        finally:
            await source.close()
        assert service.window is not None
        found = {(f.node, f.subject, f.kind) for f in service.engine.findings}
        return found, service.window.nodes

    single = asyncio.run(run(None))
    replicas = []
    for name in members:
        role = ReplicaRole(store, name, interval, started=at - 2 * interval)
        replicas.append((role, *asyncio.run(run(role))))
    return single, replicas
