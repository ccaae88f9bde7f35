"""The leader reads the fleet topology once a cycle; the other replicas use its read (issue 33).

Between the replica's role and its source. Every replica needs the fleet's topology (nodes,
jobs, NVLink domains: :mod:`analyzer.sources.topology`) to tell what it owns, and asking
Prometheus for it from every replica costs the server the same fleet-wide instant queries N
times a cycle. So the plan's leader reads it and leaves it on a :class:`TopologyBoard` (the
marginal scores exchange's backends: a file in the meeting directory, a ConfigMap, memory),
keyed by cycle, with the evaluation grid it was read over (:mod:`analyzer.replicas.topoblob`).

Ownership must stay identical on every replica, so a follower takes the leader's topology only
when it is this cycle's and was read at this replica's own evaluation time over its own grid.
When it does not find one within ``wait`` seconds (the leader died, is slow, read at another
grid time, or leads no member), finds it malformed, or cannot reach the board, it reads the
topology itself, exactly as without sharing: the same queries at the same time give the same
answer. Each such cycle is counted (``topology_fallbacks``). A leader that cannot leave its
topology logs it and goes on; its followers fall back.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

import numpy as np

from analyzer.replicas.membership import Plan
from analyzer.replicas.topoblob import decode, encode
from analyzer.sources.topology import Topology

log = logging.getLogger(__name__)


@runtime_checkable
class TopologyBoard(Protocol):
    poll_s: float  # how often a waiting follower reads the board

    def put_topology(self, cycle: int, blob: bytes) -> None:
        """Leave the leader's topology of ``cycle`` (OSError when it cannot)."""

    def get_topology(self, cycle: int) -> bytes | None:
        """The topology left for ``cycle``, None if none yet (OSError when unreadable)."""


class Counts(Protocol):
    topology_shared: int
    topology_fallbacks: int
    topology_waited: float


class SharedTopology:
    """The source's :class:`~analyzer.sources.topology.Sharing` for one replica in one plan."""

    def __init__(self, board: TopologyBoard, plan: Plan, replica: str, wait: float,
                 counts: Counts, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:  # fmt: skip
        self.board, self.plan, self.replica, self.wait = board, plan, replica, wait
        self.counts, self.clock, self.sleep = counts, clock, sleep

    @property
    def leads(self) -> bool:
        return self.plan.leader == self.replica

    def shared(self, at: float, grid: np.ndarray) -> Topology | None:
        if self.leads:
            self.counts.topology_waited = 0.0
            return None
        t0 = self.clock()
        got = self._wait(at, grid) if self.plan.leader in self.plan.members else None
        self.counts.topology_waited = self.clock() - t0
        if got is None:
            self.counts.topology_fallbacks += 1
        else:
            self.counts.topology_shared += 1
        return got

    def _wait(self, at: float, grid: np.ndarray) -> Topology | None:
        """The leader's topology of this cycle read at ``at`` over ``grid``, once it is in
        (None: not in time, of another time, malformed or unreachable)."""
        k = self.plan.cycle
        deadline = self.clock() + self.wait
        while True:
            try:
                blob = self.board.get_topology(k)
            except OSError as e:
                log.warning("shared topology of cycle %d: %s", k, e)
                return None
            if blob is not None:
                return self._check(blob, at, grid)
            if self.clock() >= deadline:
                log.info("shared topology of cycle %d: not in after %.1f s", k, self.wait)
                return None
            self.sleep(max(min(self.board.poll_s, self.wait / 20), 0.001))

    def _check(self, blob: bytes, at: float, grid: np.ndarray) -> Topology | None:
        try:
            cycle, topo = decode(blob)
        except ValueError as e:
            log.warning("%s (cycle %d): reading it here", e, self.plan.cycle)
            return None
        t = topo.window.t
        if cycle != self.plan.cycle or t.shape != grid.shape or not np.array_equal(t, grid):
            log.info("shared topology of cycle %d is of cycle %d at %.3f, not at %.3f: "
                     "reading it here", self.plan.cycle, cycle, t[-1], at)  # fmt: skip
            return None
        return topo

    def read(self, at: float, topology: Topology) -> None:
        if not self.leads:
            return
        try:
            self.board.put_topology(self.plan.cycle, encode(self.plan.cycle, topology))
        except OSError as e:  # the followers read it themselves
            log.warning("leaving the topology of cycle %d: %s", self.plan.cycle, e)
