"""The journal's read API for failure accounting (remediation/history.py), on a journal the
service itself wrote: the one seam accounting reads remediation through."""

import sqlite3
from pathlib import Path

import pytest

from remediation.clock import FakeClock
from remediation.history import AlertSeen, JournalHistory, Mitigation
from tests.remediation.helpers import alert, service, topology_file

T = 1_800_000_000.0


def _journal(tmp_path: Path) -> Path:
    """One drain at T (done 30 s later), released an hour after."""
    clock = FakeClock(T)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 2))
    a = alert(node="gpu-node-001", starts_at="2027-01-15T07:58:00Z", fp="fp-1", gpu="3")
    svc.journal.accept([a], clock.now())
    svc.engine.decide(a)
    clock.advance(30)
    for action in svc.journal.pending_actions():
        svc.executor.run(action)
    clock.advance(3600)
    assert svc.engine.release("gpu-node-001", True).allow
    svc.journal.close()
    return tmp_path / "state.db"


def test_the_history_reads_an_incident_its_alert_mitigation_and_release(tmp_path: Path) -> None:
    with JournalHistory(_journal(tmp_path)) as history:
        (inc,) = history.incidents()
        assert (inc.node, inc.fault_class, inc.opened_at) == ("gpu-node-001", "xid_fatal", T)
        (seen,) = history.alerts(inc)
        assert isinstance(seen, AlertSeen)
        assert (seen.fingerprint, seen.starts_at) == ("fp-1", "2027-01-15T07:58:00Z")
        assert seen.labels["gpu"] == "3" and seen.decided_at == T
        assert history.mitigation(inc.id) == Mitigation(T + 30, one_gpu=False)
        assert history.release_after("gpu-node-001", T + 30) == T + 3630
        assert history.release_after("gpu-node-001", T + 3631) is None
        assert history.acks(inc.id) == {}
        assert history.first_event() == T
        assert history.decision_span() == (T, T + 3630)


def test_the_history_never_writes_the_journal(tmp_path: Path) -> None:
    history = JournalHistory(_journal(tmp_path))
    try:
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            history.db.execute("DELETE FROM incidents")
    finally:
        history.close()
