"""What every membership backend must do (the in-memory fake, the shared directory, the
Kubernetes Leases on the real API server): one contract, checked on each."""

from __future__ import annotations

from analyzer.replicas.membership import Membership, Plan

T0 = 1_800_000_000.0  # a fixed wall time: the lease arithmetic is the backend's own


def heartbeats_say_who_is_ready_for_which_cycle(m: Membership) -> None:
    m.heartbeat("r-1", 7, T0)
    m.heartbeat("r-2", 7, T0 + 0.5)
    m.heartbeat("r-1", 8, T0 + 10)
    got = {b.replica: b.cycle for b in m.beats()}
    assert got == {"r-1": 8, "r-2": 7}
    assert abs(next(b.at for b in m.beats() if b.replica == "r-1") - (T0 + 10)) < 1e-3
    m.leave("r-2")
    assert [b.replica for b in m.beats()] == ["r-1"]


def one_leader_holds_the_lease_until_it_lapses_or_is_given_up(m: Membership) -> None:
    assert m.lead("r-1", T0, 12.0)
    assert not m.lead("r-2", T0 + 5, 12.0)  # r-1's term runs until T0 + 12
    assert m.lead("r-1", T0 + 10, 12.0)  # renewed: now until T0 + 22
    assert not m.lead("r-2", T0 + 20, 12.0)
    assert m.lead("r-2", T0 + 22.5, 12.0)  # lapsed: taken over
    assert not m.lead("r-1", T0 + 23, 12.0)
    m.leave("r-2")
    assert m.lead("r-3", T0 + 24, 12.0)  # given up: no wait


def the_first_plan_stored_for_a_cycle_stands_and_only_the_leader_stores(m: Membership) -> None:
    assert m.lead("r-1", T0, 12.0)
    assert m.publish("r-2", Plan(5, ("r-2",), "r-2"), T0) is None  # not the leader
    assert m.plan(5) is None
    first = m.publish("r-1", Plan(5, ("r-1", "r-2"), "r-1"), T0 + 1)
    assert first == Plan(5, ("r-1", "r-2"), "r-1")
    again = m.publish("r-1", Plan(5, ("r-1",), "r-1"), T0 + 2)
    assert again == first and m.plan(5) == first
    assert m.lead("r-2", T0 + 13, 12.0)  # a successor cannot rewrite the cycle either
    assert m.publish("r-2", Plan(5, ("r-2",), "r-2"), T0 + 13) == first
    assert m.publish("r-1", Plan(6, ("r-1",), "r-1"), T0 + 14) is None  # no longer leads
    for k in range(6, 12):
        m.publish("r-2", Plan(k, ("r-2",), "r-2"), T0 + 14)
    assert m.plan(11) == Plan(11, ("r-2",), "r-2")
    assert m.plan(5) is None  # only the last few plans are kept


CONTRACT = (
    heartbeats_say_who_is_ready_for_which_cycle,
    one_leader_holds_the_lease_until_it_lapses_or_is_given_up,
    the_first_plan_stored_for_a_cycle_stands_and_only_the_leader_stores,
)
