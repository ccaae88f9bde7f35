"""The event outbox: a table in the remediation journal (SQLite, WAL) that events wait in.

Producers put events in inside a journal transaction (:func:`put`), so an event exists
exactly when the journal change it reports was committed: capture.py copies findings,
decisions and actions this way, and the maintenance loop can put its steps the same way.
The relay (relay.py) reads the head of each partition (a node; ``''`` for the cluster),
sends it and records the answer here, so a restart resumes where the last commit left off.

Order: per partition, an event is sent only after every earlier one was acknowledged (or
dead-lettered), so a receiver sees a node's events in the order they happened. Delivery is
at least once: the relay commits ``delivered`` after the receiver's 2xx, and a crash between
the two sends that one event again (CloudEvents ``id`` is stable: receivers deduplicate on
source + id). A row is ``pending``, ``delivered`` or ``dead`` (the receiver refused it as
malformed, or it failed ``max_attempts`` times when that is set); delivered and dead rows
are pruned after the retention.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from remediation.journal import Journal

PENDING, DELIVERED, DEAD = "pending", "delivered", "dead"


@dataclass(frozen=True)
class Row:
    seq: int
    id: str
    partition: str
    kind: str
    event: dict[str, Any]
    attempts: int


def put(
    db: sqlite3.Connection, event_id: str, partition: str, kind: str, event: Mapping[str, Any],
    now: float,
) -> int | None:  # fmt: skip
    """Put one event (``cloudevent.make``) in, inside the caller's transaction; returns its
    position, None when an event with this id is already in. The relay adds the position as
    the ``sequence`` attribute when it sends."""
    cur = db.execute(
        "INSERT OR IGNORE INTO outbox(id,partition,kind,event,created_at,next_at) "
        "VALUES(?,?,?,?,?,0)",
        (event_id, partition, kind, json.dumps(dict(event), sort_keys=True), now),
    )
    return cur.lastrowid if cur.rowcount else None


def heads(journal: Journal, now: float, limit: int = 200) -> list[Row]:
    """The oldest pending event of each partition, if it is due now, in outbox order."""
    rows = journal.rows(
        "SELECT o.seq, o.id, o.partition, o.kind, o.event, o.attempts, o.next_at FROM outbox o "
        "JOIN (SELECT partition, MIN(seq) AS seq FROM outbox WHERE state='pending' "
        "GROUP BY partition) h ON o.seq=h.seq WHERE o.next_at<=? ORDER BY o.seq LIMIT ?",
        (now, limit),
    )
    return [
        Row(r["seq"], r["id"], r["partition"], r["kind"], json.loads(r["event"]), r["attempts"])
        for r in rows
    ]


def delivered(journal: Journal, seq: int, now: float) -> None:
    with journal.tx() as db:
        db.execute(
            "UPDATE outbox SET state='delivered', done_at=?, attempts=attempts+1, "
            "last_error=NULL WHERE seq=? AND state='pending'",
            (now, seq),
        )


def failed(journal: Journal, seq: int, error: str, next_at: float, dead: bool, now: float) -> None:
    """One failed attempt: retried from ``next_at``, or dead-lettered (``dead``)."""
    with journal.tx() as db:
        db.execute(
            "UPDATE outbox SET attempts=attempts+1, last_error=?, next_at=?, "
            "state=CASE WHEN ? THEN 'dead' ELSE state END, done_at=CASE WHEN ? THEN ? "
            "ELSE done_at END WHERE seq=? AND state='pending'",
            (error[:500], next_at, int(dead), int(dead), now, seq),
        )


def counts(journal: Journal) -> dict[str, dict[str, int]]:
    """Rows by state and kind (the read-only connection: never waits for a writer)."""
    out: dict[str, dict[str, int]] = {PENDING: {}, DELIVERED: {}, DEAD: {}}
    for r in journal.read("SELECT state, kind, COUNT(*) AS n FROM outbox GROUP BY state, kind"):
        out.setdefault(r["state"], {})[r["kind"]] = int(r["n"])
    return out


def oldest_pending(journal: Journal) -> float | None:
    """When the oldest event still waiting was put in (None: nothing waits)."""
    rows = journal.read("SELECT MIN(created_at) AS t FROM outbox WHERE state='pending'")
    return None if not rows or rows[0]["t"] is None else float(rows[0]["t"])


def prune(journal: Journal, before: float) -> int:
    """Forget delivered and dead events finished before ``before`` (bounded journal)."""
    with journal.tx() as db:
        return int(
            db.execute(
                "DELETE FROM outbox WHERE state IN ('delivered','dead') AND done_at<?", (before,)
            ).rowcount
        )
