"""Alert ordering by the alert's own times: Alertmanager may deliver an older "firing" after
the "resolved" that ended it (a retried notification); it is journaled as stale and never
drains a node; a node released or on probation after a resolve never drains on a replay."""

from __future__ import annotations

import math
from pathlib import Path

from remediation import ordering
from remediation.clock import FakeClock
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
