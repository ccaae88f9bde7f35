"""Who is alive and who leads: the seam between the replica protocol and the store it runs on.

Edge of the sharded analyzer. Each replica heartbeats once per cycle, saying which cycle it is
ready for; one replica holds the leader lease and publishes, once per cycle, the plan: the
members that judge that cycle. A plan once stored is never replaced (the first writer wins),
so every replica that reads the plan for a cycle reads the same members, and the ownership
hash gives them a partition. Backends: :mod:`analyzer.replicas.leases` (Kubernetes Lease
objects, coordination.k8s.io/v1) and :mod:`analyzer.replicas.filedir` (a shared directory,
for bare metal); :class:`MemoryMembership` is the hand-written fake for tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Plan:
    """The replicas that judge cycle ``cycle`` (sorted), as the leader ``leader`` stored it."""

    cycle: int
    members: tuple[str, ...]
    leader: str = ""


@dataclass(frozen=True)
class Beat:
    """A replica's last heartbeat: the cycle it is ready for and when it said so."""

    replica: str
    cycle: int
    at: float


class Membership(Protocol):
    def heartbeat(self, replica: str, cycle: int, now: float) -> None:
        """``replica`` is alive and ready to judge ``cycle``."""

    def leave(self, replica: str) -> None:
        """``replica`` stops (its heartbeat, and its lease if it leads, are removed)."""

    def beats(self) -> list[Beat]:
        """Every replica's last heartbeat."""

    def lead(self, replica: str, now: float, ttl: float) -> bool:
        """Take or renew the leader lease for ``ttl`` seconds; True if ``replica`` holds it."""

    def publish(self, replica: str, plan: Plan, now: float) -> Plan | None:
        """Store ``plan`` unless one for its cycle is stored; only while ``replica`` holds the
        lease. The plan stored for that cycle (this one or the earlier one), None if not
        leader."""

    def plan(self, cycle: int) -> Plan | None:
        """The plan stored for ``cycle``, if any."""


@dataclass
class MemoryMembership:
    """An in-process store with the same semantics (the fake for tests and the benchmark)."""

    keep: int = 4  # plans kept (the backends keep a few cycles' worth too)
    _beats: dict[str, Beat] = field(default_factory=dict)
    _holder: str = ""
    _until: float = float("-inf")
    _plans: dict[int, Plan] = field(default_factory=dict)

    def heartbeat(self, replica: str, cycle: int, now: float) -> None:
        self._beats[replica] = Beat(replica, cycle, now)

    def leave(self, replica: str) -> None:
        self._beats.pop(replica, None)
        if self._holder == replica:
            self._holder, self._until = "", float("-inf")

    def beats(self) -> list[Beat]:
        return sorted(self._beats.values(), key=lambda b: b.replica)

    def lead(self, replica: str, now: float, ttl: float) -> bool:
        if self._holder in ("", replica) or now >= self._until:
            self._holder, self._until = replica, now + ttl
        return self._holder == replica

    def publish(self, replica: str, plan: Plan, now: float) -> Plan | None:
        if self._holder != replica or now >= self._until:
            return None
        stored = self._plans.setdefault(plan.cycle, plan)
        for old in sorted(self._plans)[: -self.keep]:
            del self._plans[old]
        return stored

    def plan(self, cycle: int) -> Plan | None:
        return self._plans.get(cycle)
