"""The per-cycle protocol of a replica: announce, agree on the plan, judge only its own units.

Pure over an injected :class:`~analyzer.replicas.membership.Membership` and the caller's
clock. Cycles are numbered from wall time (``floor(now / interval)``), the same on every
replica. In cycle ``k``:

1. every replica that was running before ``k`` began heartbeats "ready for ``k``" at once
   (a replica started during ``k``, or restarted, announces ``k + 1`` and judges nothing in
   ``k``: it cannot know what its earlier life already judged);
2. from ``settle`` into the cycle, every replica tries the leader lease (renewed each cycle;
   it lapses ``lease_ttl`` after the last renewal, so a dead leader's successor publishes
   the next plan in time); the leader stores the plan for ``k``: the replicas that announced
   ``k``. A stored plan is never replaced, so all replicas read one member list;
3. a replica in the plan judges the units the ownership hash gives it among the plan's
   members; the others wait for the next cycle. A replica that finds no plan by
   ``plan_wait`` into the cycle judges nothing in ``k``.

Hence no unit is judged twice in a cycle (one plan, one hash, no replica judges a cycle it
started in), and a unit goes unjudged in ``k`` only when its owner died during ``k`` or no
replica was running before ``k`` began: a replica that dies is missing from the next plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from analyzer.replicas.membership import Beat, Membership, Plan
from analyzer.replicas.ownership import assign


@dataclass(frozen=True)
class Timing:
    """Where in a cycle each step happens, as fractions of the interval."""

    interval: float
    settle: float = 0.2  # announcements are in by then; the leader publishes
    plan_wait: float = 0.6  # no plan by then: this cycle is not judged here
    lease_ttl: float = 1.2  # < 1 + plan_wait - settle: a successor publishes in time
    # a replica silent this many cycles is gone (SIGKILL, a deleted pod): the leader removes
    # its heartbeat (and the role its scores), so a fleet of short-lived pod names leaves
    # no heartbeats behind; one that comes back heartbeats anew and joins the next plan
    forget_after: int = 10

    def __post_init__(self) -> None:
        if not self.interval > 0:
            raise ValueError(f"interval must be > 0 seconds, got {self.interval}")
        if not 0 <= self.settle < self.plan_wait < 1:
            raise ValueError("need 0 <= settle < plan_wait < 1 (fractions of the interval)")
        if self.forget_after < 2:
            raise ValueError(f"forget_after must be >= 2 cycles, got {self.forget_after}")
        if not 1 < self.lease_ttl < 1 + self.plan_wait - self.settle:
            raise ValueError(
                "lease_ttl must outlast one interval and lapse before the next plan is due: "
                f"1 < lease_ttl < {1 + self.plan_wait - self.settle:g}"
            )

    def cycle(self, now: float) -> int:
        return math.floor(now / self.interval)

    def into(self, now: float) -> float:
        """How far into its cycle ``now`` is, as a fraction of the interval."""
        return now / self.interval - self.cycle(now)


class Coordinator:
    def __init__(self, membership: Membership, replica: str, timing: Timing,
                 started: float) -> None:  # fmt: skip
        self.membership, self.replica, self.timing = membership, replica, timing
        self.first = timing.cycle(started) + 1  # never the cycle it started in
        self.leading = False
        self.forgotten: list[str] = []  # replicas this one, leading, removed (for the role)
        self.announced = self.done = self.first - 1
        membership.heartbeat(replica, self.first, started)

    def turn(self, now: float) -> Plan | None:
        """Call often (a few times a second, or every few percent of the interval): the
        plan of ``now``'s cycle, once per cycle, as soon as it is known and this replica is
        a member (then read the window and judge :meth:`mine`); None otherwise (nothing to do
        yet, already done, not a member, or no plan in time)."""
        k = self.timing.cycle(now)
        if k > self.announced and k >= self.first:
            self.announce(now)
            self.announced = k
        if k <= self.done:
            return None
        plan = self.plan(now)
        if plan is None:
            if self.late(now) and k >= self.first:
                self.done = k
            return None
        self.done = k
        return plan if self.replica in plan.members else None

    def announce(self, now: float) -> int:
        """Heartbeat for the cycle ``now`` is in (or the first one this replica may judge)."""
        k = max(self.timing.cycle(now), self.first)
        self.membership.heartbeat(self.replica, k, now)
        return k

    def plan(self, now: float) -> Plan | None:
        """The plan for ``now``'s cycle, publishing it if this replica leads and it is due;
        None while there is none yet, or when this replica may not judge the cycle."""
        k = self.timing.cycle(now)
        if k < self.first:
            return None
        if self.timing.into(now) < self.timing.settle:
            return self.membership.plan(k)
        ttl = self.timing.lease_ttl * self.timing.interval
        self.leading = self.membership.lead(self.replica, now, ttl)
        stored = self.membership.plan(k)
        if stored is None and self.leading:
            beats = self.membership.beats()
            ready = tuple(sorted(b.replica for b in beats if b.cycle == k))
            stored = self.membership.publish(self.replica, Plan(k, ready, self.replica), now)
            if stored is not None and stored.leader == self.replica:
                self._forget(k, beats)
        return stored

    def _forget(self, k: int, beats: Iterable[Beat]) -> None:
        """Remove the heartbeats of replicas silent for ``forget_after`` cycles."""
        for b in beats:
            if b.replica != self.replica and b.cycle <= k - self.timing.forget_after:
                self.membership.leave(b.replica)
                self.forgotten.append(b.replica)

    def late(self, now: float) -> bool:
        """Past the point where a plan for this cycle may still be waited for."""
        return self.timing.into(now) >= self.timing.plan_wait

    def mine(self, plan: Plan, units: Iterable[str]) -> list[str]:
        """The units this replica judges under ``plan`` (none if it is not a member)."""
        if self.replica not in plan.members or plan.cycle < self.first:
            return []
        return assign(units, plan.members)[self.replica]

    def leave(self) -> None:
        self.membership.leave(self.replica)
