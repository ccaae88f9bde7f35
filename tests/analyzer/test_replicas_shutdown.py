"""A replica going away while a turn is under way (analyzer/replicas/role.py). The service runs
``turn`` and ``leave`` in worker threads, and a shutdown cancels the loop while a turn's
heartbeat may still be in flight: found by the rolling-update test's review, a heartbeat that
lands after ``leave`` removed the beat would bring the leaving replica back as a member of the
next plan (its units unjudged for a cycle, its beat left until the leader forgets it)."""

from __future__ import annotations

import threading
import time

from analyzer.replicas.membership import MemoryMembership
from analyzer.replicas.role import ReplicaRole

T0, INTERVAL = 1000.0, 10.0


class HeldMembership(MemoryMembership):
    """Heartbeats that, once armed, wait for ``release`` before they land."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.entered, self.release = threading.Event(), threading.Event()

    def heartbeat(self, replica: str, cycle: int, now: float) -> None:
        if self.armed:
            self.entered.set()
            assert self.release.wait(30)
        super().heartbeat(replica, cycle, now)


def _started() -> tuple[HeldMembership, ReplicaRole]:
    m = HeldMembership()
    role = ReplicaRole(m, "analyzer-0", INTERVAL, started=T0)
    assert [b.replica for b in m.beats()] == ["analyzer-0"]
    m.armed = True
    return m, role


def test_a_leave_during_a_turns_heartbeat_waits_for_it_so_the_removed_beat_stays_removed() -> None:
    m, role = _started()
    turning = threading.Thread(target=role.turn, args=(T0 + INTERVAL,))
    turning.start()
    assert m.entered.wait(10)  # the turn's heartbeat is in flight
    leaving = threading.Thread(target=role.leave)
    leaving.start()
    time.sleep(0.3)
    assert leaving.is_alive()  # leave waits for the turn under way
    assert [b.replica for b in m.beats()] == ["analyzer-0"]
    m.release.set()
    turning.join(10)
    leaving.join(10)
    assert not turning.is_alive() and not leaving.is_alive()
    assert m.beats() == []  # the heartbeat landed first, then leave removed it


def test_a_turn_after_leave_returns_no_plan_and_heartbeats_nothing() -> None:
    m, role = _started()
    m.armed = False
    role.leave()
    assert m.beats() == []
    for k in range(1, 4):
        assert role.turn(T0 + k * INTERVAL + 0.9 * INTERVAL) is None
    assert m.beats() == []


def test_a_turn_hung_in_the_membership_store_holds_leave_only_for_its_wait() -> None:
    m, role = _started()
    turning = threading.Thread(target=role.turn, args=(T0 + INTERVAL,), daemon=True)
    turning.start()
    assert m.entered.wait(10)
    t = time.monotonic()
    role.leave(wait=0.5)  # the API server hangs the heartbeat: leave goes on after its wait
    assert 0.4 <= time.monotonic() - t < 5
    assert m.beats() == []
    m.release.set()
    turning.join(10)
