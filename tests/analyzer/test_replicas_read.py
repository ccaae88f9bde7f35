"""A replica reads only its own nodes (issue 33): the Prometheus source, given the nodes a
replica owns, narrows every query to them, reads a node handed over between cycles over its
whole window, and the replicas together find what one analyzer reading the fleet finds.
Through a real Prometheus serving promdata's history (three nodes, faults on each)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from analyzer.replicas.slicing import subwindow
from analyzer.sources import SourceError
from analyzer.sources.prometheus import PrometheusSource
from exporter import catalog as c

from .promdata import NODES, STEP
from .replicaread import reads, same_window, series_hosts, single_and_replicas, two_jobs_prometheus


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    yield from two_jobs_prometheus(tmp_path_factory.mktemp("prom"))


@pytest.mark.real
def test_a_replica_reads_only_the_series_of_the_nodes_it_owns(prom):
    p, end = prom
    ((full, _, full_bytes, _),) = reads(p.url, [(end + 5, None)], STEP)
    ((mine, calls, mine_bytes, topo),) = reads(p.url, [(end + 5, {"node-01"})], STEP)
    assert topo.nodes == NODES and set(topo.jobs) == {"777", "778"}
    assert mine.nodes == ("node-01",)
    read = [(form["query"], body) for _, form, body in calls if "count by (node, " not in
            form["query"] and "group by (node)" not in form["query"]]  # fmt: skip
    assert read, "no series read"
    for query, body in read:  # every answer past the topology: node-01's series only
        assert series_hosts(body) <= {"node-01"}, query
    same_window(mine, subwindow(full, [1]))
    assert [(e.node, e.gpu, e.xid) for e in mine.xids] == [(0, 3, 79)]
    assert mine_bytes < full_bytes / 2


@pytest.mark.real
def test_a_node_handed_over_between_cycles_is_read_over_its_whole_window(prom):
    p, end = prom
    before, at, later = end - 3 * STEP + 5, end + 5, end + 2 * STEP + 5
    cycles = reads(p.url, [(before, {"node-00"}), (at, {"node-00", "node-01"}),
                            (later, {"node-01"})], STEP)  # fmt: skip
    (w0, _, _, _), (w1, calls1, _, _), (w2, _, _, _) = cycles
    ((full1, _, _, _),) = reads(p.url, [(at, None)], STEP)
    ((full2, _, _, _),) = reads(p.url, [(later, None)], STEP)
    assert w0.nodes == ("node-00",)
    # node-01 joined at `at`: its whole window, the faults that began before it was owned too
    same_window(w1, subwindow(full1, [0, 1]))
    assert [(e.node, e.gpu, e.xid) for e in w1.xids] == [(1, 3, 79)]
    starts = {
        float(form["start"])
        for _, form, _ in calls1
        if "start" in form and "node-01" in form["query"]
    }
    assert min(starts) <= at - 5 - 600  # read from the window's start (the XID's anchor before)
    # node-00 given away at `later`: gone; node-01 read incrementally and still whole
    same_window(w2, subwindow(full2, [1]))


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
    ((full, _, _, _),) = reads(p.url, [(end + 5, None)], STEP)
    assert temp.name in w1.missing  # the hand-over's read of it failed: said so
    assert np.isnan(w1.metrics[temp.name][:, 1]).all()
    same_window(w2, subwindow(full, [0, 1]))  # then node-01 read whole, not from the failed cycle


@pytest.mark.real
def test_replicas_reading_only_their_nodes_find_what_one_analyzer_finds(prom):
    p, end = prom
    members = ("replica-a", "replica-b", "replica-c")
    (single, nodes), replicas = single_and_replicas(p.url, end, STEP, members)
    assert nodes == NODES and len(single) >= 5
    got: set[tuple[str, str, str]] = set()
    read: list[str] = []
    for role, found, nodes in replicas:
        assert role.stats.nodes == len(nodes)
        assert not got & found  # never found twice
        got |= found
        read += nodes
    assert sorted(read) == list(NODES)  # each node read by exactly one replica
    assert got == single
