"""A replica reads only its own nodes (issue 33): the Prometheus source, given the nodes a
replica owns, narrows every query to them, reads a node handed over between cycles over its
whole window, and the replicas together find what one analyzer reading the fleet finds.
Through a real Prometheus serving promdata's history (three nodes, faults on each)."""

from __future__ import annotations

import asyncio
import json
import re
import time

import numpy as np
import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.role import ReplicaRole
from analyzer.replicas.slicing import subwindow
from analyzer.service import AnalyzerService
from analyzer.sources import SourceError
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import Window
from exporter import catalog as c
from tests.realcomp import promtool, run_prometheus

from .promdata import NODES, STEP, openmetrics


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


def _two_jobs(text: str) -> str:
    """promdata's history with node-02 in a job of its own: two ownership units."""
    name = re.escape(c.GPU_ALLOCATION_INFO.name)
    alloc = re.compile(rf'^({name}\{{node="node-02".*)job_id="777"', re.M)
    return alloc.sub(r'\1job_id="778"', text)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prom")
    end = (time.time() // STEP) * STEP - 7200
    (tmp / "data.om").write_text(_two_jobs(openmetrics(end)))
    data = tmp / "data"
    r = promtool("tsdb", "create-blocks-from", "openmetrics", str(tmp / "data.om"), str(data))
    assert r.returncode == 0, r.stderr.decode()
    data.chmod(0o777)
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data) as p:
        yield p, end


def _reads(url: str, plan: list[tuple[float, set[str] | None]]):
    """One source reading at each moment of ``plan``, owning the nodes given (None: all)."""

    async def go():
        source = PrometheusSource(url, window=600, step=STEP)
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


def _series_nodes(body: bytes) -> set[str]:
    return {r["metric"].get("node", "") for r in json.loads(body)["data"]["result"]}


def _same(a: Window, b: Window) -> None:
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


@pytest.mark.real
def test_a_replica_reads_only_the_series_of_the_nodes_it_owns(prom):
    p, end = prom
    ((full, _, full_bytes, _),) = _reads(p.url, [(end + 5, None)])
    ((mine, calls, mine_bytes, topo),) = _reads(p.url, [(end + 5, {"node-01"})])
    assert topo.nodes == NODES and set(topo.jobs) == {"777", "778"}
    assert mine.nodes == ("node-01",)
    read = [(form["query"], body) for _, form, body in calls if "count by (node, " not in
            form["query"] and "group by (node)" not in form["query"]]  # fmt: skip
    assert read, "no series read"
    for query, body in read:  # every answer past the topology: node-01's series only
        assert _series_nodes(body) <= {"node-01"}, query
    _same(mine, subwindow(full, [1]))
    assert [(e.node, e.gpu, e.xid) for e in mine.xids] == [(0, 3, 79)]
    assert mine_bytes < full_bytes / 2


@pytest.mark.real
def test_a_node_handed_over_between_cycles_is_read_over_its_whole_window(prom):
    p, end = prom
    before, at, later = end - 3 * STEP + 5, end + 5, end + 2 * STEP + 5
    cycles = _reads(p.url, [(before, {"node-00"}), (at, {"node-00", "node-01"}),
                            (later, {"node-01"})])  # fmt: skip
    (w0, _, _, _), (w1, calls1, _, _), (w2, _, _, _) = cycles
    ((full1, _, _, _),) = _reads(p.url, [(at, None)])
    ((full2, _, _, _),) = _reads(p.url, [(later, None)])
    assert w0.nodes == ("node-00",)
    # node-01 joined at `at`: its whole window, the faults that began before it was owned too
    _same(w1, subwindow(full1, [0, 1]))
    assert [(e.node, e.gpu, e.xid) for e in w1.xids] == [(1, 3, 79)]
    starts = {
        float(form["start"])
        for _, form, _ in calls1
        if "start" in form and "node-01" in form["query"]
    }
    assert min(starts) <= at - 5 - 600  # read from the window's start (the XID's anchor before)
    # node-00 given away at `later`: gone; node-01 read incrementally and still whole
    _same(w2, subwindow(full2, [1]))


class FailOnce:
    """Fails (HTTP 503, retries spent) every read of ``metric`` that names ``node``, while
    ``armed``."""

    def __init__(self, inner, metric: str, node: str) -> None:
        self.inner, self.metric, self.node, self.armed = inner, metric, node, False

    async def post(self, path, form):
        if self.armed and self.metric in form["query"] and self.node in form["query"]:
            raise SourceError("HTTP 503: injected")
        return await self.inner.post(path, form)

    async def close(self):
        await self.inner.close()


@pytest.mark.real
def test_a_node_whose_first_read_failed_is_read_whole_again_the_next_cycle(prom):
    p, end = prom
    temp = c.GPU_TEMPERATURE

    async def go():
        source = PrometheusSource(p.url, window=600, step=STEP, retries=0)
        source.http = fail = FailOnce(source.http, temp.name, "node-01")
        out = []
        try:
            for at, own, armed in ((end - 2 * STEP + 5, {"node-00"}, False),
                                   (end - STEP + 5, {"node-00", "node-01"}, True),
                                   (end + 5, {"node-00", "node-01"}, False)):  # fmt: skip
                source.scope, fail.armed = (lambda topo, own=own: own), armed
                out.append(await source.read(at))
        finally:
            await source.close()
        return out

    _, w1, w2 = asyncio.run(go())
    ((full, _, _, _),) = _reads(p.url, [(end + 5, None)])
    assert temp.name in w1.missing  # the hand-over's read of it failed: said so
    assert np.isnan(w1.metrics[temp.name][:, 1]).all()
    _same(w2, subwindow(full, [0, 1]))  # then node-01 read whole, not from the failed cycle


@pytest.mark.real
def test_replicas_reading_only_their_nodes_find_what_one_analyzer_finds(prom):
    p, end = prom
    members = ("replica-a", "replica-b", "replica-c")
    store = MemoryMembership()
    interval = 60.0
    at = end + 5
    plan = Plan(int(at // interval), members, "replica-a")

    async def run(role: ReplicaRole | None) -> tuple[set[tuple[str, str, str]], tuple[str, ...]]:
        source = PrometheusSource(p.url, window=600, step=STEP)
        service = AnalyzerService(source, Engine(default_detectors()), interval, replica=role)
        try:
            await service.run_cycle(at, plan if role is not None else None)
        finally:
            await source.close()
        assert service.window is not None
        found = {(f.node, f.subject, f.kind) for f in service.engine.findings}
        return found, service.window.nodes

    single, nodes = asyncio.run(run(None))
    assert nodes == NODES and len(single) >= 5
    got: set[tuple[str, str, str]] = set()
    read: list[str] = []
    for name in members:
        role = ReplicaRole(store, name, interval, started=at - 2 * interval)
        found, nodes = asyncio.run(run(role))
        assert role.stats.nodes == len(nodes)
        assert not got & found  # never found twice
        got |= found
        read += nodes
    assert sorted(read) == list(NODES)  # each node read by exactly one replica
    assert got == single
