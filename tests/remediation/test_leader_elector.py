"""The remediation leader election (remediation/leader/elector.py): compare-and-swap writes,
terms on each instance's own clock, and never two instances acting at once."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from remediation.leader.elector import Elector, MemoryLeaseStore, Record


@dataclass
class Clock:
    t: float = 0.0

    def __call__(self) -> float:
        return self.t


def elector(store: MemoryLeaseStore, name: str, clock: Callable[[], float]) -> Elector:
    return Elector(store, name, lease_s=15, renew_deadline_s=10, clock=clock)


def released() -> MemoryLeaseStore:
    """A store whose record was released (free at once to the first attempt)."""
    return MemoryLeaseStore(Record("", "0", 15.0))


def test_a_free_lease_is_taken_at_once_and_held_for_the_renew_deadline() -> None:
    store, clock = released(), Clock()
    a = elector(store, "a", clock)
    assert a.attempt() and a.held()
    assert store.record == Record("a", "1", 15.0)
    clock.t = 9.9
    assert a.held()
    clock.t = 10.0
    assert not a.held()  # no renewal: it may no longer act, though the record still names it


def test_a_missing_record_is_made_only_after_a_whole_term_of_it_missing() -> None:
    """A record deleted by hand may still be held: nobody but its holder makes it again
    before a term has passed (a first start waits that term too)."""
    store, clock = MemoryLeaseStore(), Clock()
    a = elector(store, "a", clock)
    for t in range(0, 15, 2):  # read every 2 s, as the keeper does
        clock.t = float(t)
        assert not a.attempt() and store.record is None
    clock.t = 15.0
    assert a.attempt() and store.record is not None and store.record.holder == "a"


def test_absence_seen_across_a_long_gap_between_reads_starts_the_wait_again() -> None:
    """Between two reads 6 s apart (more than half the renew deadline) a record may have
    been made and deleted unseen, its maker still holding: the wait counts from the second."""
    store, clock = MemoryLeaseStore(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    b.attempt()  # missing at 0; b reads nothing more for a while
    for t in range(0, 17, 2):
        clock.t = float(t)
        a.attempt()
    assert a.held()  # a made it at 16, after its own 15 s of it missing
    clock.t = 17.0
    store.record = None  # deleted by hand at once, before b read it
    clock.t = 18.0
    assert not b.attempt()  # b's last read was at 0: its wait starts at 18, not at 0
    assert a.held()
    clock.t = 20.0
    assert a.attempt()  # the holder makes it again


def test_a_record_deleted_under_its_leader_is_made_again_by_it_not_by_a_standby() -> None:
    store, clock = released(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.attempt()
    clock.t = 1.0
    store.record = None  # `kubectl delete lease`, or the file removed
    assert not b.attempt()  # b saw it missing at 1: it waits until 16
    clock.t = 2.0
    assert a.attempt() and a.held()  # the leader makes it again at its next renewal
    clock.t = 16.0
    assert not b.attempt()  # a new version since: b's wait starts again
    assert store.record is not None and store.record.holder == "a"


def test_two_processes_given_one_name_never_both_hold_the_lease() -> None:
    """One config file on two hosts names both instances "remediation": the record names
    the right holder either way, but only the process that wrote its version renews it."""
    store, clock = released(), Clock()
    a, b = elector(store, "remediation", clock), elector(store, "remediation", clock)
    for step in range(10):
        clock.t = step * 2.0
        a.attempt()
        b.attempt()
        assert not (a.held() and b.held()), step
    assert a.held() and not b.held()


def test_a_closed_elector_attempts_nothing_and_can_still_release() -> None:
    store, clock = released(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.attempt()
    a.close()
    clock.t = 1.0
    writes = store.writes
    assert not a.attempt() and store.writes == writes  # not even a renewal
    assert a.held() and a.release()
    assert b.attempt()


def test_a_standby_takes_over_only_after_seeing_the_record_unchanged_for_the_whole_lease() -> None:
    store, clock = released(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert a.attempt()
    clock.t = 5.0
    assert not b.attempt() and b.holder == "a"  # first seen at 5: free from 20 on b's clock
    clock.t = 19.9
    assert not b.attempt()
    clock.t = 20.0
    assert b.attempt() and b.held()
    assert not a.held() and not a.attempt()  # a's renewal is refused: b wrote
    assert store.record is not None and store.record.holder == "b"


def test_a_renewal_restarts_the_standbys_wait() -> None:
    store, clock = released(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.attempt()
    b.attempt()
    clock.t = 8.0
    assert a.attempt()  # a renews: a new version
    clock.t = 16.0
    assert not b.attempt()  # b saw the new version at 16, not at 0
    clock.t = 30.9
    assert not b.attempt()
    clock.t = 31.0
    assert b.attempt()


def test_a_released_lease_is_free_at_once_and_release_needs_holding() -> None:
    store, clock = released(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    assert not b.release()  # never held
    a.attempt()
    assert not b.attempt()
    assert a.release() and not a.held()
    assert store.record is not None and store.record.holder == ""
    assert b.attempt()
    assert not a.release()


@pytest.mark.parametrize("other", ["b", "a"])  # another name, or ours in another process
def test_release_never_writes_over_a_record_another_process_wrote(other: str) -> None:
    store, clock = released(), Clock()
    a = elector(store, "a", clock)
    a.attempt()
    store.record = Record(other, "99", 15.0)  # however it came to be (a clock far off, a hand)
    assert not a.release() and not a.held()
    assert store.record == Record(other, "99", 15.0)


def test_a_write_that_loses_the_race_drops_the_lease_at_once() -> None:
    store, clock = released(), Clock()
    a = elector(store, "a", clock)
    a.attempt()

    class Racing(MemoryLeaseStore):
        def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
            return None  # someone replaced the record between our read and our write

    a.store = Racing(record=store.record)
    assert not a.attempt() and not a.held()


def test_a_store_error_changes_nothing_and_the_term_runs_on() -> None:
    store, clock = released(), Clock()
    a = elector(store, "a", clock)
    a.attempt()

    class Down(MemoryLeaseStore):
        def read(self) -> Record | None:
            raise OSError("stale file handle")

    a.store = Down()
    clock.t = 5.0
    with pytest.raises(OSError):
        a.attempt()
    assert a.held()  # still inside the term of the last write
    clock.t = 10.0
    assert not a.held()


def test_a_lease_of_another_holder_is_not_taken_while_it_is_renewed_however_long() -> None:
    store, clock = released(), Clock()
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    for step in range(40):
        clock.t = step * 5.0
        assert a.attempt()
        assert not b.attempt()


@pytest.mark.parametrize(
    ("lease", "deadline"), [(10.0, 10.0), (10.0, 12.0), (10.0, 0.0), (10.0, -1.0)]
)
def test_a_renew_deadline_not_shorter_than_the_lease_is_refused(
    lease: float, deadline: float
) -> None:
    with pytest.raises(ValueError, match="renew deadline"):
        Elector(MemoryLeaseStore(), "a", lease_s=lease, renew_deadline_s=deadline)


def test_an_empty_identity_is_refused() -> None:
    with pytest.raises(ValueError, match="identity"):
        Elector(MemoryLeaseStore(), "")


def test_with_clocks_whose_rates_differ_beyond_the_bound_two_would_lead() -> None:
    """The bound in the elector's docstring is real: a standby whose clock runs at twice the
    leader's waits out its 15 s in 7.5 real seconds, inside the leader's 10."""
    store, real = released(), Clock()
    a = elector(store, "a", real)
    b = elector(store, "b", lambda: 2 * real.t)
    a.attempt()
    b.attempt()
    real.t = 7.5
    assert b.attempt() and a.held()


def test_the_term_counts_from_before_the_write_not_from_its_slow_answer() -> None:
    """The write lands at 0 and its answer is back at 6; a standby that read it at once may
    take over at 15, so the leader must stop at 10, not at 16."""
    clock = Clock()
    store = SlowStore(Record("", "0", 15.0))
    a, b = elector(store, "a", clock), elector(store, "b", clock)

    def answer_late() -> None:
        b.attempt()  # b reads the new record the moment it lands
        clock.t = 6.0

    store.hooks = {"write-answered": answer_late}
    assert a.attempt()
    clock.t = 15.0
    assert b.attempt()
    assert not a.held()


def test_a_standby_counts_the_record_from_when_its_read_came_back() -> None:
    """b's read takes 6 s to reach the store; a renews meanwhile (from 5.9), so b's read
    returns a's new record: b may take it from 21, not from 15, while a holds until 15.9."""
    clock = Clock()
    store = SlowStore(Record("", "0", 15.0))
    a, b = elector(store, "a", clock), elector(store, "b", clock)
    a.attempt()

    def slow_request() -> None:
        clock.t = 5.9
        a.attempt()
        clock.t = 6.0

    store.hooks = {"read-sent": slow_request}
    assert not b.attempt()
    clock.t = 15.0
    assert a.held()
    assert not b.attempt()
    clock.t = 21.0
    assert b.attempt() and not a.held()


# ----------------------------------------------------------------------- the state machine
RATES = st.floats(0.85, 1.15)  # (1.15 / 0.85 = 1.35) < lease / deadline = 1.5


@dataclass
class Instance:
    elector: Elector
    alive: bool = True


POINTS = ("read-sent", "read-answered", "write-sent", "write-answered")


@dataclass
class SlowStore(MemoryLeaseStore):
    """A store whose requests take time to arrive and whose answers take time to return;
    anything may happen meanwhile (``hooks``, by point)."""

    hooks: dict[str, Callable[[], None]] = field(default_factory=dict)
    now: Callable[[], float] = lambda: 0.0  # the model's real time
    born: float = 0.0  # real time the record was last made

    def _at(self, point: str) -> None:
        hook = self.hooks.pop(point, None)
        if hook is not None:
            hook()

    def read(self) -> Record | None:
        self._at("read-sent")
        got = super().read()
        self._at("read-answered")
        return got

    def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
        self._at("write-sent")
        ok = super().write(holder, lease_s, expect)
        if expect is None and ok is not None:
            self.born = self.now()  # made anew
        self._at("write-answered")
        return ok


class Election(RuleBasedStateMachine):
    """Three instances on clocks of different rates and offsets; every request and answer
    slow, with another instance's whole attempt inside; crashes, restarts (some under a
    running instance's name), releases and the record deleted by hand: at no real moment do
    two live instances hold the lease."""

    def __init__(self) -> None:
        super().__init__()
        self.t = 0.0
        self.store = SlowStore(Record("", "0", 15.0), now=lambda: self.t)
        self.instances: list[Instance] = []
        self.rates: list[tuple[float, float]] = []
        self.made = 0

    def _new(self, i: int) -> Elector:
        rate, offset = self.rates[i]
        self.made += 1
        return Elector(self.store, f"i{self.made}", lease_s=15, renew_deadline_s=10,
                       clock=lambda: offset + rate * self.t)  # fmt: skip

    @precondition(lambda self: not self.instances)
    @rule(rates=st.lists(st.tuples(RATES, st.floats(-1e4, 1e4)), min_size=3, max_size=3))
    def start(self, rates: list[tuple[float, float]]) -> None:
        self.rates = rates
        self.instances = [Instance(self._new(i)) for i in range(3)]

    def _check(self) -> None:
        holding = [x.elector.identity for x in self.instances if x.alive and x.elector.held()]
        assert len(holding) <= 1, f"two leaders at t={self.t}: {holding}"

    @precondition(lambda self: self.instances)
    @rule(dt=st.floats(0, 25))
    def wait(self, dt: float) -> None:
        self.t += dt

    @precondition(lambda self: self.instances)
    @rule(i=st.integers(0, 2), delays=st.lists(st.floats(0, 8), min_size=4, max_size=4),
          j=st.none() | st.integers(0, 2), where=st.sampled_from(POINTS),
          frac=st.floats(0, 1))  # fmt: skip
    def attempt(self, i: int, delays: list[float], j: int | None, where: str,
                frac: float) -> None:  # fmt: skip
        x = self.instances[i]
        if not x.alive:
            return

        def slow(point: str, dt: float) -> Callable[[], None]:
            def run() -> None:
                inside = point == where and j is not None and j != i
                self.t += dt * frac if inside else dt
                self._check()
                if inside and self.instances[j].alive:  # type: ignore[index]
                    with_hooks, self.store.hooks = self.store.hooks, {}
                    self.instances[j].elector.attempt()  # type: ignore[index]  # inside ours
                    self.store.hooks = with_hooks
                    self._check()
                    self.t += dt * (1 - frac)
                    self._check()

            return run

        self.store.hooks = {p: slow(p, d) for p, d in zip(POINTS, delays, strict=True)}
        x.elector.attempt()
        self.store.hooks = {}

    @precondition(lambda self: self.instances)
    @rule(i=st.integers(0, 2))
    def crash(self, i: int) -> None:
        self.instances[i].alive = False

    @precondition(lambda self: self.instances)
    @rule(i=st.integers(0, 2), same_name=st.booleans())
    def restart(self, i: int, same_name: bool) -> None:
        """A new process; with ``same_name`` it is given the name of an instance that is
        (or was) running too (--leader-identity from one shared config file)."""
        if not self.instances[i].alive:
            e = self._new(i)
            if same_name:
                e.identity = self.instances[(i + 1) % 3].elector.identity
            self.instances[i] = Instance(e)

    @precondition(lambda self: self.instances and self.store.record is not None)
    @rule()
    def delete_the_record(self) -> None:
        """`kubectl delete lease`, or the file removed by hand: of a record that has lived
        longer than the reads' gap (5 s on the fastest clock; the elector's documented
        limit: one deleted within seconds of being made, again and again, can fool it)."""
        if self.t - self.store.born > 5 / 0.85:
            self.store.record = None

    @precondition(lambda self: self.instances)
    @rule(i=st.integers(0, 2))
    def release(self, i: int) -> None:
        x = self.instances[i]
        if x.alive:
            x.elector.release()
            x.alive = False  # a graceful stop: released after the service stopped acting

    @invariant()
    def one_leader_at_most(self) -> None:
        self._check()


Election.TestCase.settings = settings(max_examples=500, stateful_step_count=40, deadline=None)
test_never_two_instances_hold_the_lease_at_once = Election.TestCase
