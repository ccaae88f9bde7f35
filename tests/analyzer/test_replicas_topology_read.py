"""The leader's topology, shared, through a real Prometheus (issue 33): replicas taking the
leader's read own the same nodes and find the same as when each reads its own, while only the
leader asks Prometheus for it; a leader that dies in the middle of its read costs the others a
short wait and their own read, with the same ownership and findings."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.replicas.exchange import DirectoryExchange, MemoryExchange
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.role import ReplicaRole
from analyzer.service import AnalyzerService
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.topology import fabric_expr

from .promdata import NODES, STEP
from .replicaread import Logged, two_jobs_prometheus

pytestmark = pytest.mark.real

INTERVAL = 60.0
MEMBERS = ("r-a", "r-b", "r-c")  # the leader r-a owns no unit, each follower one


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    yield from two_jobs_prometheus(tmp_path_factory.mktemp("prom"))


class Dying:
    """The leader's HTTP client: its topology read never answers (it is killed meanwhile)."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.asked = inner, asyncio.Event()

    async def post(self, path: str, form: dict[str, str]) -> bytes:
        if form["query"] == fabric_expr():
            self.asked.set()
            await asyncio.Event().wait()  # until cancelled
        return await self.inner.post(path, form)

    async def close(self) -> None:
        await self.inner.close()


def _cycle(url: str, end: float, board: Any, topology_wait: float,
           dying: str = "") -> dict[str, dict[str, Any]]:  # fmt: skip
    """One service cycle of every member at once under one plan (``dying``: that member's
    read hangs in its topology and is cancelled once the others are done): per replica its
    role, owned nodes, findings and topology reads."""
    at = end + 5
    plan = Plan(int(at // INTERVAL), MEMBERS, MEMBERS[0])
    store = MemoryMembership()

    async def run(name: str) -> dict[str, Any]:
        role = ReplicaRole(store, name, INTERVAL, started=at - 2 * INTERVAL, exchange=board,
                           wait=1.0, topology_wait=topology_wait)  # fmt: skip
        source = PrometheusSource(url, window=600, step=STEP, retries=0)
        source.http = log = Logged(Dying(source.http) if name == dying else source.http)
        service = AnalyzerService(source, Engine(default_detectors()), INTERVAL, replica=role)
        try:
            await service.run_cycle(at, plan)
        finally:
            await source.close()
        assert service.window is not None
        return {
            "role": role,
            "owned": source.owned,
            "found": {(f.node, f.subject, f.kind) for f in service.engine.findings},
            "topology_reads": sum(form["query"] == fabric_expr() for _, form, _ in log.calls),
        }

    async def all_of_them() -> dict[str, dict[str, Any]]:
        tasks = {n: asyncio.ensure_future(run(n)) for n in MEMBERS}
        live = [t for n, t in tasks.items() if n != dying]
        done = dict(zip([n for n in MEMBERS if n != dying], await asyncio.gather(*live),
                        strict=True))  # fmt: skip
        if dying:
            tasks[dying].cancel()  # killed mid-cycle
            with pytest.raises(asyncio.CancelledError):
                await tasks[dying]
        return done

    return asyncio.run(all_of_them())


@pytest.mark.real
def test_replicas_sharing_the_leaders_topology_own_and_find_what_each_reading_its_own_does(
    prom, tmp_path
):
    p, end = prom
    alone = _cycle(p.url, end, MemoryExchange(), topology_wait=0.0)
    # a long wait: it ends when the leader has put (a slow shared machine must not fall back)
    shared = _cycle(p.url, end, DirectoryExchange(tmp_path), topology_wait=60.0)
    assert [alone[n]["topology_reads"] for n in MEMBERS] == [1, 1, 1]
    assert [shared[n]["topology_reads"] for n in MEMBERS] == [1, 0, 0]  # the leader's only
    owned = [n for r in MEMBERS for n in sorted(shared[r]["owned"])]
    assert sorted(owned) == list(NODES) and all(shared[r]["owned"] for r in MEMBERS[1:])
    for r in MEMBERS:
        assert shared[r]["owned"] == alone[r]["owned"], r
        assert shared[r]["found"] == alone[r]["found"], r
    assert set().union(*(shared[r]["found"] for r in MEMBERS))  # something found to compare
    stats = [shared[r]["role"].stats for r in MEMBERS]
    assert [(s.topology_shared, s.topology_fallbacks) for s in stats] == [(0, 0), (1, 0), (1, 0)]
    # measured in the running services: the followers waited about the leader's read, which
    # they started together with (its queries and its put), and never the 60 s they could
    waits = [s.topology_waited for s in stats]
    assert waits[0] == 0.0 and all(0 < w < 30 for w in waits[1:]), waits
    print(f"followers waited {waits[1]:.3f} s and {waits[2]:.3f} s for the leader's topology")


@pytest.mark.real
def test_a_leader_killed_mid_read_costs_the_others_a_wait_and_their_own_read(prom):
    p, end = prom
    leader = MEMBERS[0]
    alone = _cycle(p.url, end, MemoryExchange(), topology_wait=0.0, dying=leader)
    t0 = time.monotonic()
    shared = _cycle(p.url, end, MemoryExchange(), topology_wait=0.5, dying=leader)
    assert time.monotonic() - t0 >= 0.5  # they waited for it, then read their own
    for r in MEMBERS[1:]:
        assert shared[r]["topology_reads"] == 1
        assert shared[r]["owned"] == alone[r]["owned"] and shared[r]["found"] == alone[r]["found"]
        assert shared[r]["role"].stats.topology_fallbacks == 1
        assert 0.5 <= shared[r]["role"].stats.topology_waited < 0.5 + 5  # the whole wait
    assert set().union(*(shared[r]["owned"] for r in MEMBERS[1:]))  # the living own their part
