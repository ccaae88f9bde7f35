"""This process as one replica: the coordinator, the ownership of the window's units, and the
numbers ``/metrics`` reports about them. Called by :class:`analyzer.service.AnalyzerService`
in the sharded mode; pure apart from the membership store behind the coordinator.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.judge import judge
from analyzer.replicas.membership import Membership, Plan
from analyzer.replicas.ownership import owned_nodes, units
from analyzer.window import Window


@dataclass
class ReplicaStats:
    replica: str
    units: int = 0
    nodes: int = 0
    members: int = 0
    leader: bool = False
    missed: int = 0


class ReplicaRole:
    def __init__(self, membership: Membership, replica: str, interval: float,
                 started: float | None = None) -> None:  # fmt: skip
        self.coordinator = Coordinator(
            membership, replica, Timing(interval), time.time() if started is None else started
        )
        self.stats = ReplicaStats(replica)
        self._done = self.coordinator.first - 1
        self._owned: frozenset[str] | None = None  # decided before a node-restricted read

    @property
    def poll(self) -> float:
        """How often the service should call :meth:`turn` (seconds)."""
        return min(1.0, self.coordinator.timing.interval / 50)

    def turn(self, now: float) -> Plan | None:
        """The plan to judge now, if any (counting the cycles that pass unjudged)."""
        plan = self.coordinator.turn(now)
        self.stats.leader = self.coordinator.leading
        k = self.coordinator.done
        if plan is None and k > self._done:  # a cycle closed without a judgement here
            self.stats.missed += k - self._done
        self._done = max(self._done, k)
        return plan

    def owned(self, topology: Window, plan: Plan) -> frozenset[str]:
        """The names of the nodes this replica owns under ``plan``, from the fleet's
        ``topology`` (a node-restricted source asks before it reads; :meth:`judge` then
        judges what it read as this replica's)."""
        parts = units(topology)
        mine = self.coordinator.mine(plan, parts)
        keep = owned_nodes(parts, mine)
        self._count(len(mine), len(keep), plan)
        self._owned = frozenset(topology.nodes[i] for i in keep)
        return self._owned

    def judge(self, engine: Engine, window: Window, plan: Plan) -> list[Finding]:
        if self._owned is not None:  # the source read only what :meth:`owned` gave it
            owned, self._owned = self._owned, None
            return judge(engine, window, [i for i, n in enumerate(window.nodes) if n in owned])
        parts = units(window)
        mine = self.coordinator.mine(plan, parts)
        keep = owned_nodes(parts, mine)
        self._count(len(mine), len(keep), plan)
        return judge(engine, window, keep)

    def _count(self, units: int, nodes: int, plan: Plan) -> None:
        self.stats.units, self.stats.nodes, self.stats.members = units, nodes, len(plan.members)

    def leave(self) -> None:
        self.coordinator.leave()


def membership_from(spec: str) -> Membership:
    """``kubernetes:<namespace>`` or ``dir:<path>`` (validated by the settings)."""
    kind, _, where = spec.partition(":")
    if kind == "kubernetes":
        from analyzer.replicas.leases import LeaseMembership

        try:
            return LeaseMembership.from_config(where)
        except Exception as e:  # no service account and no kubeconfig: stop the start
            raise ValueError(f"membership {spec}: no Kubernetes credentials ({e})") from None
    from analyzer.replicas.filedir import DirectoryMembership

    return DirectoryMembership(where)
