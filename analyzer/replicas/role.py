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

    def judge(self, engine: Engine, window: Window, plan: Plan) -> list[Finding]:
        parts = units(window)
        mine = self.coordinator.mine(plan, parts)
        keep = owned_nodes(parts, mine)
        self.stats.units, self.stats.nodes, self.stats.members = (
            len(mine),
            len(keep),
            len(plan.members),
        )
        return judge(engine, window, keep)

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
