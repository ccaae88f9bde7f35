"""This process as one replica: the coordinator, the ownership of the window's units, and the
numbers ``/metrics`` reports about them. Called by :class:`analyzer.service.AnalyzerService`
in the sharded mode; pure apart from the membership store behind the coordinator.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from analyzer.detectors.marginal import Scores
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.inventory import Inventory
from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.exchange import DirectoryExchange, Exchange, MemoryBoard, decode, fitted
from analyzer.replicas.handover import Handover
from analyzer.replicas.judge import joined, judge, scores
from analyzer.replicas.membership import Membership, Plan
from analyzer.replicas.ownership import owned_nodes, units
from analyzer.replicas.sharing import SharedTopology, TopologyBoard
from analyzer.window import Window

log = logging.getLogger(__name__)


@dataclass
class ReplicaStats:
    replica: str
    units: int = 0
    nodes: int = 0
    members: int = 0
    leader: bool = False
    missed: int = 0
    scores_missing: int = 0  # other replicas' marginal scores not in by the wait's end
    pools_dropped: int = 0  # this part's pools left out of its scores: the exchange's limit
    topology_shared: int = 0  # cycles read on the leader's topology (analyzer.replicas.sharing)
    topology_fallbacks: int = 0  # cycles a follower read the topology itself: none in time
    topology_waited: float = 0.0  # seconds a follower waited for it in its last cycle
    memory_adopted: int = 0  # gained nodes judged on with their last owner's memory
    memory_fresh: int = 0  # gained nodes judged afresh: no memory left for them


class ReplicaRole:
    def __init__(self, membership: Membership, replica: str, interval: float,
                 started: float | None = None, exchange: Exchange | None = None,
                 wait: float | None = None, topology_wait: float = 0.0,
                 inventory: Inventory | None = None) -> None:  # fmt: skip
        """``exchange``: where the replicas leave their marginal scores each cycle (None:
        marginal judges this replica's part alone); ``wait``: how long to wait for the other
        members' scores (default: 30 % of the interval); ``topology_wait``: how long a
        follower waits for the leader's topology before it reads its own (0: no sharing,
        every replica reads the topology); ``inventory``: the operator's, whose leaves, racks
        and NVLink domains bound the ownership units as the source's do (the engine's)."""
        self.exchange = exchange
        self.inventory = inventory or Inventory()
        self.wait = 0.3 * interval if wait is None else wait
        self.topology_wait = topology_wait
        self.coordinator = Coordinator(
            membership, replica, Timing(interval), time.time() if started is None else started
        )
        self.stats = ReplicaStats(replica)
        self._done = self.coordinator.first - 1
        self._owned: frozenset[str] | None = None  # decided before a node-restricted read
        self.handover = Handover()  # the nodes judged last cycle, their memory handed on
        # turn() and leave() run in worker threads: a shutdown can call leave() while a turn
        # is still heartbeating, and that heartbeat must not recreate the beat leave removed
        self._turning = threading.Lock()
        self._left = False

    @property
    def poll(self) -> float:
        """How often the service should call :meth:`turn` (seconds)."""
        return min(1.0, self.coordinator.timing.interval / 50)

    def turn(self, now: float) -> Plan | None:
        """The plan to judge now, if any (counting the cycles that pass unjudged); None
        without a heartbeat once :meth:`leave` has begun."""
        with self._turning:
            if self._left:
                return None
            return self._turn(now)

    def _turn(self, now: float) -> Plan | None:
        plan = self.coordinator.turn(now)
        self.stats.leader = self.coordinator.leading
        while self.coordinator.forgotten:  # gone replicas' scores go with their heartbeats
            gone = self.coordinator.forgotten.pop()
            if self.exchange is not None:
                try:
                    self.exchange.leave(gone)
                except OSError as e:  # tried again only if it heartbeats and dies again
                    log.warning("marginal scores exchange: %s", e)
        k = self.coordinator.done
        if plan is None and k > self._done:  # a cycle closed without a judgement here
            self.stats.missed += k - self._done
        self._done = max(self._done, k)
        return plan

    def sharing(self, plan: Plan) -> SharedTopology | None:
        """How this replica's source gets the topology under ``plan``: the leader reads it
        and leaves it on the exchange, the others take it from there (None: no sharing)."""
        board = self.exchange
        if not self.topology_wait > 0 or not isinstance(board, TopologyBoard):
            return None
        return SharedTopology(board, plan, self.coordinator.replica, self.topology_wait,
                              self.stats)  # fmt: skip

    def owned(self, topology: Window, plan: Plan) -> frozenset[str]:
        """The names of the nodes this replica owns under ``plan``, from the fleet's
        ``topology`` (a node-restricted source asks before it reads; :meth:`judge` then
        judges what it read as this replica's)."""
        parts = units(self.inventory.apply(topology))
        mine = self.coordinator.mine(plan, parts)
        keep = owned_nodes(parts, mine)
        self._count(len(mine), len(keep), plan)
        self._owned = frozenset(topology.nodes[i] for i in keep)
        return self._owned

    def judge(self, engine: Engine, window: Window, plan: Plan) -> list[Finding]:
        if self._owned is not None:  # the source read only what :meth:`owned` gave it
            owned, self._owned = self._owned, None
            keep = [i for i, n in enumerate(window.nodes) if n in owned]
        else:
            parts = units(self.inventory.apply(window))
            mine = self.coordinator.mine(plan, parts)
            keep = owned_nodes(parts, mine)
            self._count(len(mine), len(keep), plan)
        if self.exchange is None:
            return judge(engine, window, keep)
        others = self._others(self.exchange, engine, window, keep, plan)
        fleet = self.coordinator.replica == min(plan.members)  # one replica: the group-wide
        board = self.exchange if isinstance(self.exchange, MemoryBoard) else None
        names = frozenset(window.nodes[i] for i in keep)
        if board is not None:
            self._take(board, engine, names, plan.cycle)
        found = judge(engine, window, keep, others, fleet=fleet)
        if board is not None:
            self._leave_memory(board, engine, names, plan.cycle)
        return found

    def _take(self, board: MemoryBoard, engine: Engine, names: frozenset[str],
              cycle: int) -> None:  # fmt: skip
        """Adopt the memory the last cycle's owners left of the nodes gained this cycle."""
        try:
            left = board.get_memory(cycle - 1)
        except OSError as e:  # judged afresh, counted
            log.warning("detector memory: %s", e)
            left = {}
        taken = self.handover.take(engine, left, names, cycle)
        self.stats.memory_adopted += taken.adopted
        self.stats.memory_fresh += taken.fresh

    def _leave_memory(self, board: MemoryBoard, engine: Engine, names: frozenset[str],
                      cycle: int) -> None:  # fmt: skip
        blob = self.handover.close(engine, names, cycle)
        try:
            board.put_memory(cycle, self.coordinator.replica, blob)
        except OSError as e:  # the next owner of a node judges it afresh
            log.warning("detector memory: %s", e)

    def _others(self, exchange: Exchange, engine: Engine, window: Window, keep: list[int],
                plan: Plan) -> Scores | None:  # fmt: skip
        """Leave this part's marginal scores, then the other members' joined (those in by
        the wait's end: a member that died mid-cycle is missing). None, if the exchange
        cannot be reached: marginal judges this part alone this cycle."""
        me = self.coordinator.replica
        try:
            blob, dropped = fitted(scores(engine, window, keep), exchange.max_blob)
            self.stats.pools_dropped += len(dropped)
            exchange.put(plan.cycle, me, blob)
            deadline = time.monotonic() + self.wait
            got = exchange.get(plan.cycle)
            while not set(plan.members) <= set(got) and time.monotonic() < deadline:
                time.sleep(min(exchange.poll_s, self.wait / 20))
                got = exchange.get(plan.cycle)
        except OSError as e:
            log.warning("marginal scores exchange: %s", e)
            self.stats.scores_missing += len(plan.members) - 1
            return None
        parts = []
        for r in plan.members:
            if r == me:
                continue
            try:
                parts.append(decode(got[r]))
            except (KeyError, ValueError) as e:
                self.stats.scores_missing += 1
                if not isinstance(e, KeyError):
                    log.warning("marginal scores of %s: %s", r, e)
        return joined(parts)

    def _count(self, units: int, nodes: int, plan: Plan) -> None:
        self.stats.units, self.stats.nodes, self.stats.members = units, nodes, len(plan.members)

    def leave(self, wait: float = 10.0) -> None:
        """Go away: no turn heartbeats from now on, and one already under way finishes first
        (waited for up to ``wait`` seconds: a membership store that hangs it must not hold
        the shutdown past the pod's grace period), so the beat removed here stays removed."""
        self._left = True
        waited = self._turning.acquire(timeout=wait)
        try:
            self._leave()
        finally:
            if waited:
                self._turning.release()

    def _leave(self) -> None:
        self.coordinator.leave()
        if self.exchange is not None:
            try:
                self.exchange.leave(self.coordinator.replica)
            except OSError as e:  # going away anyway: its scores stay until replaced
                log.warning("marginal scores exchange: %s", e)


def exchange_from(spec: str) -> Exchange | None:
    """Where the replicas of ``spec`` exchange marginal scores: the meeting directory on bare
    metal, a ConfigMap per replica on Kubernetes (the Leases are too small for them)."""
    kind, _, where = spec.partition(":")
    if kind == "kubernetes":
        from analyzer.replicas.configmaps import ConfigMapExchange

        return _on_kubernetes(spec, lambda: ConfigMapExchange.from_config(where))
    return DirectoryExchange(where) if kind == "dir" else None


T = TypeVar("T")


def _on_kubernetes(spec: str, make: Callable[[], T]) -> T:
    """``make()`` the Kubernetes client of ``spec``; no service account and no kubeconfig
    stop the start with a clear error."""
    try:
        return make()
    except Exception as e:
        raise ValueError(f"membership {spec}: no Kubernetes credentials ({e})") from None


def membership_from(spec: str) -> Membership:
    """``kubernetes:<namespace>`` or ``dir:<path>`` (validated by the settings)."""
    kind, _, where = spec.partition(":")
    if kind == "kubernetes":
        from analyzer.replicas.leases import LeaseMembership

        return _on_kubernetes(spec, lambda: LeaseMembership.from_config(where))
    from analyzer.replicas.filedir import DirectoryMembership

    return DirectoryMembership(where)
