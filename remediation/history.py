"""The journal's read API for other parts: what happened, as failure accounting reads it.

Where it sits: beside the journal (journal.py), which remediation writes. Failure accounting
(the top-level ``accounting`` package) reads incidents, the alerts decided in them, their
mitigations, releases and checkpoint acks through this one module and nothing else of
remediation (the import contracts in pyproject.toml); the schema stays remediation's
business. Read-only: the file is opened ``mode=ro``, so a report never writes or locks
the service's journal.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from remediation import model
from remediation.settings import Settings

DEFAULT_STATE_DB = Settings().state_db
# Actions that take capacity out (model.DISRUPTIVE: reset_gpu and inspect included).
DISRUPTIVE = tuple(sorted(model.DISRUPTIVE))
FIRST_EVENT = (
    "SELECT MIN(t) FROM (SELECT MIN(received_at) AS t FROM alerts "
    "UNION ALL SELECT MIN(at) FROM decisions UNION ALL SELECT MIN(started_at) FROM actions "
    "UNION ALL SELECT MIN(opened_at) FROM incidents)"
)


@dataclass(frozen=True)
class IncidentRow:
    """One node incident as the engine opened it (cluster-wide ones, node '', are left out)."""

    id: int
    node: str
    fault_class: str
    opened_at: float
    last_at: float


@dataclass(frozen=True)
class AlertSeen:
    """An alert decided within an incident: its labels and identity (fingerprint + startsAt,
    the idempotency key less the status), in decision order."""

    labels: dict[str, str]
    fingerprint: str
    starts_at: str
    decided_at: float


@dataclass(frozen=True)
class Mitigation:
    """The first disruptive action of an incident that finished ``done``."""

    finished_at: float
    one_gpu: bool  # its isolate_gpu step was done: a DRA device taint, one GPU out


class JournalHistory:
    """Read-only queries over a remediation journal file."""

    def __init__(self, path: str | Path) -> None:
        self.db = sqlite3.connect(f"file:{Path(path)}?mode=ro", uri=True)
        self.db.row_factory = sqlite3.Row

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> JournalHistory:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def incidents(self) -> list[IncidentRow]:
        rows = self.db.execute(
            "SELECT id, node, fault_class, opened_at, last_at FROM incidents WHERE node != '' "
            "ORDER BY opened_at, id"
        ).fetchall()
        return [
            IncidentRow(int(r[0]), str(r[1]), str(r[2]), float(r[3]), float(r[4])) for r in rows
        ]

    def alerts(self, inc: IncidentRow) -> list[AlertSeen]:
        """The alerts decided for the incident's node and fault class while it was open."""
        rows = self.db.execute(
            "SELECT a.labels, a.fingerprint, a.starts_at, d.at FROM decisions d "
            "JOIN alerts a ON a.key = d.alert_key WHERE d.node=? AND d.fault_class=? "
            "AND d.at>=? AND d.at<=? ORDER BY d.at, d.id",
            (inc.node, inc.fault_class, inc.opened_at, inc.last_at),
        ).fetchall()
        return [
            AlertSeen(json.loads(r[0] or "{}"), str(r[1] or ""), str(r[2] or ""), float(r[3]))
            for r in rows
        ]

    def mitigation(self, incident_id: int) -> Mitigation | None:
        marks = ",".join("?" * len(DISRUPTIVE))
        row = self.db.execute(
            f"SELECT a.finished_at, EXISTS(SELECT 1 FROM steps s WHERE s.action_id = a.id "
            f"AND s.step='isolate_gpu' AND s.state='done') FROM actions a WHERE a.incident_id=? "
            f"AND a.state='done' AND a.finished_at IS NOT NULL AND a.action IN ({marks}) "
            f"ORDER BY a.finished_at, a.id LIMIT 1",
            (incident_id, *DISRUPTIVE),
        ).fetchone()
        return None if row is None else Mitigation(float(row[0]), bool(row[1]))

    def release_after(self, node: str, after: float) -> float | None:
        """The first allowed release of ``node`` at or after ``after``."""
        value = self.db.execute(
            "SELECT MIN(at) FROM decisions WHERE node=? AND action='release' "
            "AND verdict='allow' AND at>=?",
            (node, after),
        ).fetchone()[0]
        return None if value is None else float(value)

    def acks(self, incident_id: int) -> dict[str, float]:
        """Jobs that acknowledged a checkpoint (remediation/checkpoint.py) before this
        incident's action moved them: job id -> when the action finished."""
        rows = self.db.execute(
            "SELECT s.step, a.finished_at FROM steps s JOIN actions a ON a.id = s.action_id "
            "WHERE a.incident_id=? AND s.step LIKE 'ack:%' AND s.state='done' "
            "AND a.finished_at IS NOT NULL",
            (incident_id,),
        ).fetchall()
        return {str(r[0])[4:]: float(r[1]) for r in rows}

    def first_event(self) -> float | None:
        """The first record (an alert received, a decision, an action, an incident)."""
        value = self.db.execute(FIRST_EVENT).fetchone()[0]
        return None if value is None else float(value)

    def decision_span(self) -> tuple[float | None, float | None]:
        first, last = self.db.execute("SELECT MIN(at), MAX(at) FROM decisions").fetchone()
        return (
            None if first is None else float(first),
            None if last is None else float(last),
        )
