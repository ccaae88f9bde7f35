"""An alert whose original startsAt comes back firing after Alertmanager resolved it (its
source kept firing while Alertmanager could not hear it: a Prometheus restart or a
partition longer than the alert's endsAt) is decided as the fault it is: the node is held
again, as the same incident, never a new one; while a redelivery of the firing close to
its resolve (an Alertmanager retry of a notification sent before the resolve) stays stale."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from remediation import ordering
from remediation.clock import FakeClock
from remediation.model import Alert
from remediation.service import Service
from tests.remediation.helpers import LIVE_POLICY, alert, service, topology_file

NODE = "gpu-node-003"
FIRING = alert(NODE)  # startsAt 2026-11-29T10:00:00Z


def resolved(ends_at: str) -> Alert:
    return dataclasses.replace(FIRING, status="resolved", ends_at=ends_at)


def svc_for(tmp: Path) -> Service:
    return service(tmp, LIVE_POLICY, clock=FakeClock(), topology=topology_file(tmp, 20))


def deliver(svc: Service, a: Alert) -> None:
    """Alertmanager's POST, then the worker's pass over what it queued."""
    svc.journal.accept([a], svc.clock.now())
    for _, queued in svc.journal.todo():
        aid = svc.engine.decide(queued)
        if aid is not None:
            assert svc.executor.run({"id": aid})[0] == "done"


def advance(svc: Service, s: float) -> None:
    assert isinstance(svc.clock, FakeClock)
    svc.clock.advance(s)


def state(svc: Service) -> str:
    return str((svc.journal.node(NODE) or {})["state"])


def drained_then_resolved(tmp: Path) -> Service:
    svc = svc_for(tmp)
    deliver(svc, FIRING)
    assert state(svc) == "quarantined" and svc.backend.is_taken_out(NODE)
    advance(svc, 600)
    deliver(svc, resolved("2026-11-29T10:10:00Z"))
    assert state(svc) == "probation"
    return svc


def counts(svc: Service) -> tuple[int, int]:
    j = svc.journal
    return j.scalar("SELECT COUNT(*) FROM actions"), j.scalar("SELECT COUNT(*) FROM incidents")


def test_a_firing_restored_with_its_original_starts_at_after_its_resolve_holds_the_node_again(
    tmp_path: Path,
) -> None:
    svc = drained_then_resolved(tmp_path)
    before = counts(svc)
    advance(svc, ordering.REFIRE_AFTER_S + 1)  # Prometheus out of reach, then back
    deliver(svc, FIRING)
    assert state(svc) == "quarantined"  # held again: its resolve starts probation again
    assert counts(svc) == before  # no new action, no new incident, no climb of the ladder
    [d] = svc.journal.rows("SELECT * FROM decisions WHERE guard='refire'")
    assert d["verdict"] == "allow" and "fires again" in d["reason"]
    assert FIRING.fingerprint in svc.journal.firing_fingerprints(NODE)
    advance(svc, 3600)
    assert svc.engine.tick() == []  # never released while the fault fires
    deliver(svc, FIRING)  # Alertmanager's repeat of the re-fired alert: nothing new
    assert counts(svc) == before and state(svc) == "quarantined"
    deliver(svc, resolved("2026-11-29T11:20:00Z"))  # it resolves again, a later endsAt
    assert state(svc) == "probation"
    assert FIRING.fingerprint not in svc.journal.firing_fingerprints(NODE)
    advance(svc, 60)
    assert svc.engine.tick() == [NODE]
    assert counts(svc) == before


def test_a_firing_redelivered_soon_after_its_resolve_is_a_stale_retry_and_moves_nothing(
    tmp_path: Path,
) -> None:
    svc = drained_then_resolved(tmp_path)
    before = counts(svc)
    advance(svc, 30)  # an Alertmanager retry of a notification sent before the resolve
    deliver(svc, FIRING)
    assert state(svc) == "probation" and counts(svc) == before
    [d] = svc.journal.rows("SELECT * FROM decisions WHERE guard='stale'")
    assert "stale firing" in d["reason"]
    advance(svc, 60)
    assert svc.engine.tick() == [NODE]


def test_only_a_resolve_heard_longer_ago_than_any_retry_can_lag_makes_a_refire() -> None:
    assert not ordering.refired(1000.0, 1000.0 + ordering.REFIRE_AFTER_S)
    assert ordering.refired(1000.0, 1000.0 + ordering.REFIRE_AFTER_S + 0.001)
