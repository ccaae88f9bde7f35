"""Detector memory in the running service: replicas that come and go (a member joins, one
leaves gracefully, one restarts under its own name) hand their nodes' memory over through the
meeting directory, and together find what one analyzer finds in every cycle, on an evaluation
fleet's windows; without the hand-over the same run differs (the test can fail). A board
out of reach costs a count, never the cycle."""

from __future__ import annotations

import asyncio
from pathlib import Path

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.output import render_metrics
from analyzer.replicas.exchange import DirectoryExchange, MemoryExchange
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.role import ReplicaRole
from analyzer.service import AnalyzerService
from analyzer.window import Window
from exporter import catalog
from gpuwarden.lab.evaluate import run_seed

from .test_replicas_exchange import INTERVAL, Windows

# who is a member in which cycles: b leaves at 30 (its nodes' memory stays on the board), c
# joins at 15, a restarts under its own name at 45 (a fresh engine, its memory on the board)
MEMBERS = {0: ("a", "b"), 15: ("a", "b", "c"), 30: ("a", "c")}
RESTART = 45


def _key(found: list[Finding] | tuple[Finding, ...]) -> set[tuple[str, str, str, str, str]]:
    return {(f.node, f.subject, f.kind, f.severity, f.action) for f in found}


def _members(cycle: int) -> tuple[str, ...]:
    return MEMBERS[max(k for k in MEMBERS if k <= cycle)]


def _run(exchange: DirectoryExchange | MemoryExchange, board: bool = True
         ) -> tuple[int, dict[str, ReplicaRole]]:  # fmt: skip
    """An evaluation fleet (homogeneous, seed 1: straggler, IB flap and XID faults) judged
    by one analyzer and by the replicas, each cycle's window as it is read (the simulator's
    windows share their buffers from cycle to cycle: judged at once, never kept)."""
    roles: dict[str, ReplicaRole] = {}
    services: dict[str, AnalyzerService] = {}
    source = Windows([])
    state = {"cycle": 0, "differing": 0}

    def start(r: str) -> None:
        roles[r] = ReplicaRole(MemoryMembership(), r, INTERVAL, started=-10 * INTERVAL,
                               exchange=exchange, wait=0.5)  # fmt: skip
        if not board:  # the role as before the hand-over: no memory board
            roles[r].exchange = _NoBoard(exchange)
        services[r] = AnalyzerService(source, Engine(default_detectors()), INTERVAL,
                                      replica=roles[r])  # fmt: skip

    def judged(w: Window, full: list[Finding]) -> None:
        k = state["cycle"]
        state["cycle"] += 1
        members = _members(k)
        for r in members:
            if r not in roles or (r == "a" and k == RESTART):
                start(r)
        at = float(w.t[-1])
        source.windows = {at: w}
        plan = Plan(k, members, members[0])

        async def cycle() -> None:
            await asyncio.gather(*(services[r].run_cycle(at, plan) for r in plan.members))

        asyncio.run(cycle())
        got = [f for r in members for f in services[r].engine.findings]
        state["differing"] += _key(got) != _key(full)

    run_seed(1, 128, 1800.0, per_kind=1, controls=1, compare=False, judged=judged)
    assert state["cycle"] == 60
    return state["differing"], roles


class _NoBoard:
    """The exchange without its memory board (scores only)."""

    def __init__(self, inner: DirectoryExchange | MemoryExchange) -> None:
        self.inner, self.poll_s, self.max_blob = inner, inner.poll_s, inner.max_blob

    def put(self, cycle: int, replica: str, blob: bytes) -> None:
        self.inner.put(cycle, replica, blob)

    def get(self, cycle: int) -> dict[str, bytes]:
        return self.inner.get(cycle)

    def leave(self, replica: str) -> None:
        self.inner.leave(replica)


def test_replicas_that_join_leave_and_restart_find_what_one_analyzer_finds_every_cycle(
    tmp_path: Path,
) -> None:
    differing, roles = _run(DirectoryExchange(tmp_path))
    assert differing == 0
    adopted = sum(r.stats.memory_adopted for r in roles.values())
    assert adopted > 0
    assert roles["a"].stats.memory_adopted > 0  # restarted: its own memory off the board
    assert len(list((tmp_path / "memory").iterdir())) <= 4  # old cycles removed
    text = render_metrics([], Engine([]).stats, {}, None, roles["c"].stats)
    c = roles["c"].stats
    assert (
        f'{catalog.ANALYZER_REPLICA_MEMORY_ADOPTED.name}{{replica="c"}} {c.memory_adopted}' in text
    )
    assert f'{catalog.ANALYZER_REPLICA_MEMORY_FRESH.name}{{replica="c"}} {c.memory_fresh}' in text
    assert c.memory_fresh == 0  # c's nodes came from a and b, with their memory


def test_without_the_memory_board_the_same_run_differs() -> None:
    differing, roles = _run(MemoryExchange(), board=False)
    assert differing > 0
    assert all(r.stats.memory_adopted == r.stats.memory_fresh == 0 for r in roles.values())


def test_a_board_out_of_reach_costs_a_count_never_the_cycle() -> None:
    class Down(MemoryExchange):
        def put_memory(self, cycle: int, replica: str, blob: bytes) -> None:
            raise OSError("leaving the detector memory: HTTP 503")

        def get_memory(self, cycle: int) -> dict[str, bytes]:
            raise OSError("reading the detector memory: HTTP 503")

    _, roles = _run(Down())
    assert all(r.stats.memory_adopted == 0 for r in roles.values())
    assert roles["c"].stats.memory_fresh > 0  # it took nodes over, each judged afresh
    assert all(r.stats.scores_missing == 0 for r in roles.values())  # the scores still went
