"""Replicas joining, leaving, dying and restarting mid-cycle hand their units over without a
unit judged twice in a cycle or skipped for more than the cycle of a death: a hypothesis state
machine drives the coordinator on the in-memory membership store, tick by tick (a tenth of
an interval), as the service's loop would."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.membership import MemoryMembership

INTERVAL = 10.0  # ticks of 1.0: exact arithmetic
UNITS = tuple(f"job/{i}" for i in range(12))
NAMES = ("a", "b", "c", "d")


@dataclass
class Replica:
    coord: Coordinator
    started: int  # the cycle it started in
    leaving: bool = False
    doom: float | None = None  # dies after judging this share of its units


@dataclass
class World:
    now: float = 0.0
    store: MemoryMembership = field(default_factory=MemoryMembership)
    alive: dict[str, Replica] = field(default_factory=dict)
    judged: Counter[tuple[int, str]] = field(default_factory=Counter)
    deaths: Counter[int] = field(default_factory=Counter)  # per cycle
    eligible: dict[int, bool] = field(default_factory=dict)  # someone ran through the cycle

    def cycle(self) -> int:
        return int(self.now // INTERVAL)


class Handover(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.w = World()
        self.timing = Timing(INTERVAL)
        self.ended: list[int] = []

    def _start(self, name: str) -> None:
        coord = Coordinator(self.w.store, name, self.timing, self.w.now)
        self.w.alive[name] = Replica(coord, self.w.cycle())

    @rule(name=st.sampled_from(NAMES))
    def start_or_restart(self, name: str) -> None:
        """A new replica, or one that died coming back under the same name."""
        if name not in self.w.alive:
            self._start(name)

    @precondition(lambda self: self.w.alive)
    @rule(data=st.data())
    def dies(self, data: st.DataObject) -> None:
        name = data.draw(st.sampled_from(sorted(self.w.alive)))
        del self.w.alive[name]
        self.w.deaths[self.w.cycle()] += 1

    @precondition(lambda self: self.w.alive)
    @rule(data=st.data(), share=st.sampled_from((0.0, 0.5, 0.99)))
    def dies_while_judging(self, data: st.DataObject, share: float) -> None:
        self.w.alive[data.draw(st.sampled_from(sorted(self.w.alive)))].doom = share

    @precondition(lambda self: self.w.alive)
    @rule(data=st.data())
    def leaves(self, data: st.DataObject) -> None:
        """Graceful: finishes the cycle it is judging, then hands over."""
        self.w.alive[data.draw(st.sampled_from(sorted(self.w.alive)))].leaving = True

    @rule(ticks=st.integers(1, 25))
    def time_passes(self, ticks: int) -> None:
        for _ in range(ticks):
            self._tick()

    def _tick(self) -> None:
        w = self.w
        k = w.cycle()
        if w.now % INTERVAL == 0:  # a cycle begins: who could judge it whole
            w.eligible[k] = any(r.started < k for r in w.alive.values())
        for name in sorted(w.alive):
            r = w.alive[name]
            plan = r.coord.turn(w.now)
            forgot = [g for g in r.coord.forgotten if g in w.alive and g != name]
            assert not forgot, f"{name} removed the heartbeat of live {forgot}"
            r.coord.forgotten.clear()
            if plan is not None:
                cycle, units = plan.cycle, r.coord.mine(plan, UNITS)
                if r.doom is not None:
                    for u in units[: int(len(units) * r.doom)]:
                        w.judged[(cycle, u)] += 1
                    del w.alive[name]
                    w.deaths[k] += 1
                    continue
                for u in units:
                    w.judged[(cycle, u)] += 1
            if r.leaving and r.coord.done >= k:
                r.coord.leave()
                del w.alive[name]
        w.now += 1.0
        if w.now % INTERVAL == 0:
            self.ended.append(k)
            w.eligible[k] = w.eligible.get(k, False) and any(
                r.started < k for r in w.alive.values()
            )

    @invariant()
    def no_unit_is_judged_twice_in_a_cycle(self) -> None:
        twice = [key for key, n in self.w.judged.items() if n > 1]
        assert not twice, twice

    @invariant()
    def a_unit_goes_unjudged_only_in_a_cycle_of_a_death_or_with_nobody_running(self) -> None:
        w = self.w
        for k in self.ended:
            if k < 1 or not w.eligible.get(k) or w.deaths[k] or w.deaths[k - 1]:
                continue
            skipped = [u for u in UNITS if not w.judged[(k, u)]]
            assert not skipped, (k, skipped, dict(w.deaths))

    @invariant()
    def no_unit_is_skipped_two_cycles_running_after_a_single_death(self) -> None:
        w = self.w
        for k in self.ended:
            if k < 2 or (k - 1) not in self.ended:
                continue
            if not (w.eligible.get(k) and w.eligible.get(k - 1)):
                continue
            if sum(w.deaths[c] for c in (k - 2, k - 1, k)) >= 2:
                continue
            both = [u for u in UNITS if not w.judged[(k - 1, u)] and not w.judged[(k, u)]]
            assert not both, (k, both, dict(w.deaths))


Handover.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None)
TestHandover = Handover.TestCase


def test_a_steady_set_of_replicas_judges_every_unit_exactly_once_per_cycle() -> None:
    store, timing = MemoryMembership(), Timing(INTERVAL)
    coords = [Coordinator(store, n, timing, 0.0) for n in NAMES]
    judged: Counter[tuple[int, str]] = Counter()
    for tick in range(int(5 * INTERVAL)):
        for c in coords:
            plan = c.turn(float(tick))
            if plan:
                judged.update((plan.cycle, u) for u in c.mine(plan, UNITS))
    assert {k for k, _ in judged} == {1, 2, 3, 4}  # cycle 0: they started in it
    assert set(judged.values()) == {1} and len(judged) == 4 * len(UNITS)
    assert sum(c.leading for c in coords) == 1


def test_timing_that_would_let_a_dead_leader_stall_the_next_plan_is_refused() -> None:
    import pytest

    with pytest.raises(ValueError, match="lease_ttl"):
        Timing(15.0, lease_ttl=1.5)
    with pytest.raises(ValueError, match="settle < plan_wait"):
        Timing(15.0, settle=0.7)


def test_the_leader_forgets_a_replica_silent_for_forget_after_cycles_and_only_that_one() -> None:
    store, timing = MemoryMembership(), Timing(INTERVAL, forget_after=3)
    coords = {n: Coordinator(store, n, timing, 0.0) for n in ("a", "b", "c")}
    gone_at = None
    for tick in range(int(9 * INTERVAL)):
        if tick == int(2 * INTERVAL):
            del coords["c"]  # SIGKILLed: no leave, its heartbeat stays (for cycle 1)
        for c in coords.values():
            c.turn(float(tick))
            if c.forgotten and gone_at is None:
                gone_at = tick // int(INTERVAL)
        if tick == int(4 * INTERVAL):
            assert {b.replica for b in store.beats()} == {"a", "b", "c"}  # not yet
    assert {b.replica for b in store.beats()} == {"a", "b"}
    assert gone_at == 4  # its last beat was for cycle 1: forgotten publishing cycle 1 + 3
    forgotten = [g for c in coords.values() for g in c.forgotten]
    assert forgotten == ["c"]
    with __import__("pytest").raises(ValueError, match="forget_after must be >= 2"):
        Timing(INTERVAL, forget_after=1)
