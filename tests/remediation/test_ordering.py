"""Alert ordering by the alert's own times (startsAt, and a resolve's endsAt): Alertmanager
may deliver an older "firing" after the "resolved" that ended it (a retried notification);
it is journaled as stale and never drains a node; a node released or on probation after a
resolve never drains on a replay."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

from remediation import ordering
from remediation.clock import FakeClock
from remediation.model import Alert
from remediation.service import Service
from tests.remediation.helpers import alert, service, topology_file

NODE = "gpu-node-001"
T0, T1 = "2026-11-29T10:00:00.123456789Z", "2026-11-29T10:05:00Z"


def process(svc: Service) -> None:
    for _, a in svc.journal.todo():
        svc.engine.decide(a)
    for row in svc.journal.pending_actions():
        svc.executor.run(row)


def deliver(svc: Service, clock: FakeClock, status: str, starts: str, fp: str = "fp-a") -> None:
    svc.journal.accept([alert(NODE, fp=fp, status=status, starts_at=starts)], clock.now())
    process(svc)


def actions(svc: Service) -> list[str]:
    return [r["action"] for r in svc.journal.rows("SELECT action FROM actions ORDER BY id")]


def node_state(svc: Service) -> str | None:
    rec = svc.journal.node(NODE)
    return None if rec is None else str(rec["state"])


def test_alertmanager_times_are_read_with_nanoseconds_and_garbage_is_never_newest() -> None:
    assert ordering.ts(T0) == ordering.ts("2026-11-29T10:00:00.123456Z")
    assert math.isnan(ordering.ts("yesterday"))
    assert ordering.stale("firing", T0, [T0]) and ordering.stale("firing", T0, [T1])
    assert not ordering.stale("firing", T1, [T0]) and not ordering.stale("resolved", T0, [T1])
    assert ordering.firing([("a", T0, "resolved"), ("a", T0, "firing")]) == set()
    assert ordering.firing([("a", T0, "resolved"), ("a", T1, "firing")]) == {"a"}


def test_a_firing_delivered_after_its_resolve_is_journaled_stale_and_drains_nothing(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 10))
    deliver(svc, clock, "resolved", T0)
    deliver(svc, clock, "firing", T0)  # the retried older notification, late
    assert actions(svc) == [] and node_state(svc) in (None, "released")
    [d] = svc.journal.rows("SELECT guard, reason FROM decisions WHERE guard='stale'")
    assert "stale firing" in d["reason"]
    assert svc.journal.firing_fingerprints(NODE) == set()
    deliver(svc, clock, "firing", T0)  # and its repeat: journaled once, still nothing
    assert actions(svc) == []
    assert svc.journal.scalar("SELECT COUNT(*) FROM decisions WHERE guard='stale'") == 1


def test_a_node_on_probation_after_a_resolve_never_drains_on_a_replay_of_the_firing(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 10))
    deliver(svc, clock, "firing", T0)
    assert actions(svc) == ["drain"]
    deliver(svc, clock, "resolved", T0)
    assert node_state(svc) == "probation"
    svc.engine.set_paused(True, "t")  # a transient denial would queue a replay again
    svc.engine.set_paused(False, "t")
    deliver(svc, clock, "firing", T0)
    assert node_state(svc) == "probation" and actions(svc) == ["drain"]
    deliver(svc, clock, "firing", T1)  # a new instance (newer startsAt): decided, not stale
    last = svc.journal.rows("SELECT guard FROM decisions ORDER BY id DESC LIMIT 1")
    assert last[0]["guard"] == "incident"  # the engine's own rule for a refire
    assert svc.journal.firing_fingerprints(NODE) == {"fp-a"}


def test_a_repeated_resolve_of_a_node_still_quarantined_starts_its_probation(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 10))
    deliver(svc, clock, "firing", T0)
    deliver(svc, clock, "firing", T0, fp="fp-b")  # a second alert keeps it quarantined
    deliver(svc, clock, "resolved", T0)
    assert node_state(svc) == "quarantined"
    with svc.journal.tx() as db:  # fp-b's resolve was lost; its own alert is gone now
        db.execute("DELETE FROM alerts WHERE fingerprint='fp-b'")
        db.execute("UPDATE nodes SET resolved_at=NULL WHERE node=?", (NODE,))
    deliver(svc, clock, "resolved", T0)  # Alertmanager repeats the resolve
    assert node_state(svc) == "probation"


E0, T_MID, E1 = "2026-11-29T10:03:00Z", "2026-11-29T10:04:00Z", "2026-11-29T10:08:00Z"
ZERO = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt of a firing notification


def test_a_firing_that_began_before_a_resolves_end_is_stale_and_one_at_or_after_it_is_new() -> None:
    assert ordering.stale("firing", T_MID, [(T0, E1)])  # began while the resolved one ran
    assert not ordering.stale("firing", E1, [(T0, E1)])  # began when it ended: a new one
    assert not ordering.stale("firing", T1, [(T0, E0)])
    assert not ordering.stale("firing", T_MID, [(T0, ZERO)])  # no end given: startsAt only
    assert not ordering.stale("firing", T_MID, [(T0, "garbage")])
    assert ordering.stale("firing", T0, [(T0, ZERO)])  # its own resolve, as before


def test_a_late_resolve_that_ended_after_a_firing_began_ends_it_and_an_older_one_does_not() -> None:
    late = [("a", T_MID, "firing", ""), ("a", T0, "resolved", E1)]
    assert ordering.firing(late) == set()  # the resolve is the newer news
    older = [("a", T1, "firing", ""), ("a", T0, "resolved", E0)]
    assert ordering.firing(older) == {"a"}  # an older instance's resolve, delivered late
    touching = [("a", E1, "firing", ""), ("a", T0, "resolved", E1)]
    assert ordering.firing(touching) == {"a"}  # ended exactly when the new one began
    after = [("a", T0, "resolved", E1), ("a", T_MID, "firing", "")]
    assert ordering.firing(after) == set()
    assert ordering.firing([("a", T0, "resolved", E1), ("a", E1, "firing", "")]) == {"a"}
    assert ordering.firing([("a", T0, "resolved"), ("a", T1, "firing")]) == {"a"}  # 3-tuples


def test_a_resolve_carries_its_ends_at_through_intake_and_a_firing_before_it_drains_nothing(
    tmp_path: Path,
) -> None:
    from remediation.intake import parse
    from tests.remediation.helpers import payload

    clock = FakeClock()
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 10))
    resolved = alert(NODE, fp="fp-a", status="resolved", starts_at=T0)
    [a] = parse(payload(dataclasses.replace(resolved, ends_at=E1)))
    assert a.ends_at == E1
    svc.journal.accept([a], clock.now())
    process(svc)
    assert svc.journal.scalar("SELECT ends_at FROM alerts WHERE status='resolved'") == E1
    deliver(svc, clock, "firing", T_MID)  # began before the resolve's end: old news
    assert actions(svc) == [] and svc.journal.firing_fingerprints(NODE) == set()
    assert svc.journal.scalar("SELECT COUNT(*) FROM decisions WHERE guard='stale'") == 1
    deliver(svc, clock, "firing", E1)  # a new instance, from the resolve's end on
    assert actions(svc) == ["drain"]


def test_an_unreadable_ends_at_is_left_out_never_a_rejected_notification() -> None:
    from remediation.intake import parse
    from tests.remediation.helpers import payload

    for bad in ("x" * 80, "\x00", ZERO):
        [a] = parse(payload(Alert("fp", T0, "resolved", {"node": NODE}, {}, bad)))
        assert a.ends_at in ("", ZERO)
