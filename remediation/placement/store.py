"""Placement state in the journal's SQLite file: one row per de-preferred node (table
``placement``) and one per episode ever started (``placement_history``, for recurrences).
Its own tables, created here, so the journal's schema stays as it is."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

from remediation.journal import Journal
from remediation.placement.tiers import Entry

SCHEMA = """
CREATE TABLE IF NOT EXISTS placement(
  node TEXT PRIMARY KEY, gpu TEXT, tier TEXT NOT NULL, reason TEXT NOT NULL,
  since REAL NOT NULL, last_evidence REAL NOT NULL, ttl_s REAL NOT NULL,
  firing INTEGER NOT NULL, score REAL NOT NULL, fingerprint TEXT NOT NULL,
  evidence TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS placement_history(
  id INTEGER PRIMARY KEY, node TEXT NOT NULL, started_at REAL NOT NULL,
  ended_at REAL, ended_why TEXT);
CREATE INDEX IF NOT EXISTS placement_history_node ON placement_history(node, started_at);
"""


class Store:
    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        with journal.tx() as db:
            for stmt in filter(str.strip, SCHEMA.split(";")):
                db.execute(stmt)

    def entries(self) -> list[Entry]:
        return [_entry(r) for r in self.journal.rows("SELECT * FROM placement ORDER BY node")]

    def read_entries(self) -> list[Entry]:
        """On the read-only connection (the API, gauges): never waits for a writer."""
        try:
            return [_entry(r) for r in self.journal.read("SELECT * FROM placement ORDER BY node")]
        except Exception:  # table not yet visible to the reader: nothing de-preferred
            return []

    def get(self, node: str) -> Entry | None:
        rows = self.journal.rows("SELECT * FROM placement WHERE node=?", (node,))
        return _entry(rows[0]) if rows else None

    def put(self, e: Entry, new_episode: bool) -> None:
        with self.journal.tx() as db:
            _put(db, e, new_episode)

    def end(self, node: str, now: float, why: str) -> bool:
        with self.journal.tx() as db:
            return _end(db, node, now, why)

    def displace(self, old: str, e: Entry, why: str) -> None:
        """``e`` starts and ``old`` ends in one transaction: never one without the other."""
        with self.journal.tx() as db:
            _end(db, old, e.since, why)
            _put(db, e, new_episode=True)

    def budget_denied(self) -> list[tuple[str, str, str]]:
        """(key, node, fingerprint) of the journaled firing alerts whose last decision was a
        placement_budget denial: the ones waiting for room."""
        rows = self.journal.rows(
            "SELECT a.key, a.node, a.fingerprint FROM alerts a WHERE a.processed=1 "
            "AND a.status='firing' AND a.stale=0 AND a.key IN (SELECT alert_key FROM "
            "decisions WHERE guard='placement_budget') AND (SELECT verdict || '/' || guard "
            "FROM decisions WHERE alert_key=a.key ORDER BY id DESC LIMIT 1) = "
            "'deny/placement_budget' ORDER BY a.seq"
        )
        return [(r["key"], r["node"], r["fingerprint"]) for r in rows]

    def redecide(self, keys: list[str]) -> None:
        """Queue these alerts to be decided again by the worker (as a transient denial's
        repeat would)."""
        with self.journal.tx() as db:
            db.executemany("UPDATE alerts SET processed=0 WHERE key=?", [(k,) for k in keys])

    def recurrences(self, node: str, since: float) -> int:
        """Episodes of this node started since ``since`` (the new one not yet counted)."""
        return int(
            self.journal.scalar(
                "SELECT COUNT(*) FROM placement_history WHERE node=? AND started_at>=?",
                (node, since),
            )
            or 0
        )


def _put(db: sqlite3.Connection, e: Entry, new_episode: bool) -> None:
    db.execute(
        "INSERT OR REPLACE INTO placement(node,gpu,tier,reason,since,last_evidence,"
        "ttl_s,firing,score,fingerprint,evidence) VALUES(?,?,?,?,?,?,?,?,?,?,?)",
        (
            e.node,
            e.gpu,
            e.tier,
            e.reason,
            e.since,
            e.last_evidence,
            e.ttl_s,
            int(e.firing),
            e.score,
            e.fingerprint,
            json.dumps(dict(e.evidence), sort_keys=True, default=str),
        ),
    )
    if new_episode:
        db.execute("INSERT INTO placement_history(node, started_at) VALUES(?,?)", (e.node, e.since))


def _end(db: sqlite3.Connection, node: str, now: float, why: str) -> bool:
    gone = db.execute("DELETE FROM placement WHERE node=?", (node,)).rowcount
    db.execute(
        "UPDATE placement_history SET ended_at=?, ended_why=? WHERE node=? AND ended_at IS NULL",
        (now, why, node),
    )
    return bool(gone)


def _entry(r: dict[str, Any]) -> Entry:
    return Entry(
        node=r["node"],
        tier=r["tier"],
        reason=r["reason"],
        since=r["since"],
        last_evidence=r["last_evidence"],
        ttl_s=r["ttl_s"],
        firing=bool(r["firing"]),
        score=r["score"],
        gpu=r["gpu"],
        fingerprint=r["fingerprint"],
        evidence=json.loads(r["evidence"] or "{}"),
    )
