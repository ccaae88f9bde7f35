"""Helpers of the replica-read tests (a replica reads only its own nodes, issue 33): a logging
HTTP client, a source read at a plan of moments and owned nodes, the hosts an answer names,
and the comparison of a replica's window with the single read's part of it."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import numpy as np

from analyzer.sources.dialects.identity import raw_identity
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import Window


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
