"""The journal: SQLite (WAL) record of alerts, decisions, actions, steps and node states.

Sits under the engine and the web API. Every write that matters commits before the caller
goes on: an alert is accepted only once its idempotency key is committed; an action's intent
is committed before it runs and its outcome after, so a restart can reconcile what was in
flight. One writing connection, guarded by a lock (used from worker threads, never the
event loop), plus a read-only connection for health and metrics: in WAL mode readers never
wait for a writer, so another process holding the write lock cannot stall them. A write
that cannot get the lock within ``busy_timeout_s`` raises ``sqlite3.OperationalError``
("database is locked"); the webhook answers 503 and Alertmanager retries.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from remediation import ordering
from remediation.model import SOFT, TRANSIENT_GUARDS, Alert

SCHEMA = """
CREATE TABLE IF NOT EXISTS alerts(seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT UNIQUE,
  fingerprint TEXT, starts_at TEXT, status TEXT, node TEXT, labels TEXT, received_at REAL,
  processed INTEGER NOT NULL DEFAULT 0, repeats INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS alerts_todo ON alerts(processed, seq);
CREATE TABLE IF NOT EXISTS decisions(id INTEGER PRIMARY KEY AUTOINCREMENT, alert_key TEXT,
  node TEXT, fault_class TEXT, action TEXT, verdict TEXT, guard TEXT, reason TEXT,
  evidence TEXT, at REAL);
CREATE INDEX IF NOT EXISTS decisions_node ON decisions(node, at);
CREATE INDEX IF NOT EXISTS decisions_alert ON decisions(alert_key);
CREATE TABLE IF NOT EXISTS actions(id INTEGER PRIMARY KEY AUTOINCREMENT, decision_id INTEGER,
  node TEXT, action TEXT, backend TEXT, state TEXT, outcome TEXT, started_at REAL,
  finished_at REAL, alert_started REAL, reason TEXT, fault_class TEXT);
CREATE TABLE IF NOT EXISTS steps(action_id INTEGER, step TEXT, state TEXT, detail TEXT,
  PRIMARY KEY(action_id, step));
CREATE TABLE IF NOT EXISTS nodes(node TEXT PRIMARY KEY, state TEXT, fault_class TEXT,
  action TEXT, since REAL, resolved_at REAL, probation_s REAL, flapped INTEGER,
  released_at REAL, reason TEXT);
CREATE INDEX IF NOT EXISTS nodes_state ON nodes(state);
CREATE TABLE IF NOT EXISTS flags(node TEXT PRIMARY KEY, at REAL);
CREATE INDEX IF NOT EXISTS flags_at ON flags(at);
CREATE INDEX IF NOT EXISTS actions_started ON actions(started_at);
CREATE INDEX IF NOT EXISTS actions_state ON actions(state);
CREATE INDEX IF NOT EXISTS alerts_node ON alerts(node);
CREATE INDEX IF NOT EXISTS alerts_fingerprint ON alerts(fingerprint, status);
CREATE TABLE IF NOT EXISTS kv(key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS dry_run_effects(id INTEGER PRIMARY KEY AUTOINCREMENT,
  action_id INTEGER, node TEXT, op TEXT, detail TEXT, at REAL);
CREATE TABLE IF NOT EXISTS incidents(id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT,
  fault_class TEXT, opened_at REAL, last_at REAL, acted TEXT, closed INTEGER NOT NULL DEFAULT 0);
CREATE INDEX IF NOT EXISTS incidents_node ON incidents(node, fault_class, last_at);
CREATE TABLE IF NOT EXISTS evacuations(node TEXT PRIMARY KEY, scope TEXT, action_id INTEGER,
  since REAL, last REAL, pods TEXT);
CREATE TABLE IF NOT EXISTS outbox(seq INTEGER PRIMARY KEY AUTOINCREMENT, id TEXT UNIQUE NOT NULL,
  partition TEXT NOT NULL, kind TEXT NOT NULL, event TEXT NOT NULL, created_at REAL,
  state TEXT NOT NULL DEFAULT 'pending', attempts INTEGER NOT NULL DEFAULT 0,
  next_at REAL NOT NULL DEFAULT 0, done_at REAL, last_error TEXT);
CREATE INDEX IF NOT EXISTS outbox_heads ON outbox(state, partition, seq);
"""
# Columns added after the first release: (table, column, type). Added to an older journal
# in place at start-up, so an upgrade keeps its history.
MIGRATIONS = (
    ("actions", "epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("actions", "attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("actions", "next_at", "REAL"),
    ("actions", "incident_id", "INTEGER"),
    ("nodes", "epoch", "INTEGER NOT NULL DEFAULT 0"),
    ("steps", "deadline", "REAL"),
    ("incidents", "subject", "TEXT"),  # what a cluster incident (node '') is about: a mount
    ("alerts", "stale", "INTEGER NOT NULL DEFAULT 0"),  # a firing older than its resolve
    ("alerts", "annotations", "TEXT"),  # evidence some decisions read (placement: score)
    ("alerts", "ends_at", "TEXT NOT NULL DEFAULT ''"),  # a resolve's endsAt (ordering)
    ("actions", "evented", "TEXT"),  # the state/attempts last put in the event outbox
)
# alerts.stale: 1 a firing older than a resolve already seen (never decided); 2 a resolve
# undone by a re-fire of its instance (ordering.refired), until the instance resolves again
REFIRED = 2
# Nodes gpuwarden holds out of service (or may hold: a failed action may have half-drained).
HELD_STATES = ("quarantined", "probation", "inspection", "action_failed", "validating")


def _unfenced() -> None:
    """A journal alone (no --leader-elect) may always commit."""


class Journal:
    def __init__(self, path: str | Path, busy_timeout_s: float = 5.0, shared: bool = False) -> None:
        """``shared``: on storage other hosts open it from too (a warm standby's, over NFS or
        CephFS): a rollback journal, since WAL's index lives in shared memory that only
        processes of one host see."""
        self.path, self.busy_timeout_s = str(path), busy_timeout_s
        self._lock = threading.RLock()
        self.db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self.db.row_factory = sqlite3.Row
        self.db.execute(f"PRAGMA busy_timeout={int(busy_timeout_s * 1000)}")
        self.db.execute(f"PRAGMA journal_mode={'DELETE' if shared else 'WAL'}")
        # durable across a process crash (WAL); a rollback journal syncs every commit
        self.db.execute(f"PRAGMA synchronous={'FULL' if shared else 'NORMAL'}")
        self.db.executescript(SCHEMA)
        for table, column, kind in MIGRATIONS:
            have = {r[1] for r in self.db.execute(f"PRAGMA table_info({table})")}
            if column not in have:
                self.db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {kind}")
        # Called before every COMMIT; raises (or ends the process) when this instance may no
        # longer write: with --leader-elect, a leader past its term (remediation/leader).
        self.fence: Callable[[], None] = _unfenced
        self._rlock = threading.Lock()
        self.reader = sqlite3.connect(
            f"file:{self.path}?mode=ro", uri=True, check_same_thread=False, isolation_level=None
        )
        self.reader.row_factory = sqlite3.Row
        # WAL: readers never wait for the writer; a rollback journal locks them out while
        # a commit writes, so they wait for it (the writer's own timeout)
        reader_wait_ms = int(busy_timeout_s * 1000) if shared else 100
        self.reader.execute(f"PRAGMA busy_timeout={reader_wait_ms}")

    def read(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        """Read committed state on the read-only connection (health, metrics): never waits
        for a writer."""
        with self._rlock:
            return [dict(r) for r in self.reader.execute(sql, tuple(args)).fetchall()]

    def _acquire(self) -> None:
        if not self._lock.acquire(timeout=self.busy_timeout_s):
            raise sqlite3.OperationalError("database is locked (journal busy in this process)")

    def close(self) -> None:
        with self._lock, self._rlock:
            self.reader.close()
            self.db.close()

    @contextmanager
    def tx(self) -> Iterator[sqlite3.Connection]:
        self._acquire()
        try:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
                self.fence()
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")
        finally:
            self._lock.release()

    def rows(self, sql: str, args: Iterable[Any] = ()) -> list[dict[str, Any]]:
        with self._lock:
            return [dict(r) for r in self.db.execute(sql, tuple(args)).fetchall()]

    def scalar(self, sql: str, args: Iterable[Any] = ()) -> Any:
        with self._lock:
            row = self.db.execute(sql, tuple(args)).fetchone()
        return None if row is None else row[0]

    # ------------------------------------------------------------------ alerts
    def accept(self, alerts: Iterable[Alert], now: float) -> tuple[int, int]:
        """Record alerts by idempotency key; returns (new, repeated). Committed on return.

        A repeat of an alert whose last decision was a transient denial (budget, breaker,
        pause, silence, rate) is queued to be decided again: Alertmanager's repeat is our retry.
        """
        new = repeated = 0
        with self.tx() as db:
            for a in alerts:
                if self._refire(db, a, now):
                    new += 1
                    continue
                if self._stale(db, a, now):
                    continue
                cur = db.execute(
                    "INSERT OR IGNORE INTO alerts(key,fingerprint,starts_at,status,node,labels,"
                    "received_at,annotations,ends_at) VALUES(?,?,?,?,?,?,?,?,?)",
                    (
                        a.key,
                        a.fingerprint,
                        a.starts_at,
                        a.status,
                        a.node,
                        json.dumps(dict(a.labels), sort_keys=True),
                        now,
                        json.dumps(dict(a.annotations), sort_keys=True),
                        a.ends_at if a.status == "resolved" else "",
                    ),
                )
                if cur.rowcount:
                    new += 1
                    continue
                repeated += 1
                last = db.execute(
                    "SELECT verdict, guard FROM decisions WHERE alert_key=? ORDER BY id DESC "
                    "LIMIT 1",
                    (a.key,),
                ).fetchone()
                retry = last is not None and last[0] == "deny" and last[1] in TRANSIENT_GUARDS
                failed = db.execute(
                    "SELECT 1 FROM nodes WHERE node=? AND state='action_failed'", (a.node,)
                ).fetchone()
                retry = retry or (failed is not None and a.status == "firing")
                if a.status == "resolved":  # the resolve of a re-fire: resolved again
                    again = db.execute(
                        "UPDATE alerts SET stale=0, ends_at=?, received_at=? WHERE key=? AND "
                        f"stale={REFIRED}",
                        (a.ends_at, now, a.key),
                    ).rowcount
                    retry = retry or bool(again)
                if a.status == "resolved":  # a repeated resolve still starts a probation due
                    waiting = db.execute(
                        "SELECT 1 FROM nodes WHERE node=? AND state='quarantined'", (a.node,)
                    ).fetchone()
                    retry = retry or waiting is not None
                db.execute(
                    "UPDATE alerts SET repeats=repeats+1, processed=CASE WHEN ? THEN 0 ELSE "
                    "processed END, annotations=? WHERE key=?",  # the repeat's evidence is fresher
                    (int(retry), json.dumps(dict(a.annotations), sort_keys=True), a.key),
                )
        return new, repeated

    def todo(self, limit: int = 100, after: int = 0) -> list[tuple[int, Alert]]:
        """Undecided alerts in arrival order, from sequence number ``after`` on."""
        rows = self.rows(
            "SELECT seq,fingerprint,starts_at,status,labels,annotations,ends_at FROM alerts "
            "WHERE processed=0 AND seq>? "
            "ORDER BY seq LIMIT ?",
            (after, limit),
        )
        return [
            (
                r["seq"],
                Alert(
                    r["fingerprint"],
                    r["starts_at"],
                    r["status"],
                    json.loads(r["labels"]),
                    json.loads(r["annotations"] or "{}"),
                    r["ends_at"],
                ),
            )
            for r in rows
        ]

    def firing_fingerprints(self, node: str) -> set[str]:
        """The node's alerts still firing: by each alert's own times, not arrival."""
        rows = self.rows(
            "SELECT fingerprint, starts_at, status, ends_at FROM alerts WHERE node=? AND "
            "stale=0 ORDER BY seq",
            (node,),
        )
        return ordering.firing(
            (r["fingerprint"], r["starts_at"], r["status"], r["ends_at"]) for r in rows
        )

    def holding_fingerprints(self, node: str) -> set[str]:
        """The node's alerts still firing that keep it out of service: every one but the
        soft (``avoid``) ones, which de-prefer a node through its placement tier and never
        hold it out (no probation or release waits for them)."""
        rows = self.rows(
            "SELECT fingerprint, starts_at, status, ends_at, labels FROM alerts WHERE node=? "
            "AND stale=0 ORDER BY seq",
            (node,),
        )
        hard = [r for r in rows if json.loads(r["labels"] or "{}").get("action") not in SOFT]
        return ordering.firing(
            (r["fingerprint"], r["starts_at"], r["status"], r["ends_at"]) for r in hard
        )

    def _refire(self, db: sqlite3.Connection, a: Alert, now: float) -> bool:
        """A firing of an instance resolved longer ago than any retry lags
        (``ordering.refired``): the instance is un-resolved (its resolve kept, marked
        ``stale=2``) and its firing queued to be decided again; True when it was."""
        if a.status != "firing":
            return False
        heard = db.execute(
            "SELECT MIN(received_at) FROM alerts WHERE fingerprint=? AND starts_at=? AND "
            "status='resolved' AND stale=0",
            (a.fingerprint, a.starts_at),
        ).fetchone()[0]
        if heard is None or not ordering.refired(float(heard), now):
            return False
        db.execute(
            f"UPDATE alerts SET stale={REFIRED} WHERE fingerprint=? AND starts_at=? AND "
            "status='resolved' AND stale=0",
            (a.fingerprint, a.starts_at),
        )
        ann = json.dumps(dict(a.annotations), sort_keys=True)
        cur = db.execute(
            "INSERT OR IGNORE INTO alerts(key,fingerprint,starts_at,status,node,labels,"
            "received_at,annotations,ends_at) VALUES(?,?,?,?,?,?,?,?,'')",
            (a.key, a.fingerprint, a.starts_at, a.status, a.node,
             json.dumps(dict(a.labels), sort_keys=True), now, ann),
        )  # fmt: skip
        if not cur.rowcount:  # its first firing was journaled: decided again
            db.execute(
                "UPDATE alerts SET processed=0, repeats=repeats+1, annotations=? WHERE key=?",
                (ann, a.key),
            )
        return True

    def refired(self, a: Alert) -> bool:
        """This alert instance fired again after a resolve (see ``_refire``)."""
        return bool(
            self.scalar(
                "SELECT 1 FROM alerts WHERE fingerprint=? AND starts_at=? AND "
                f"status='resolved' AND stale={REFIRED}",
                (a.fingerprint, a.starts_at),
            )
        )

    def _stale(self, db: sqlite3.Connection, a: Alert, now: float) -> bool:
        """A firing older than a resolve already seen for its fingerprint: journaled as
        stale (a decision, processed), never decided on; True when it was."""
        if a.status != "firing":
            return False
        resolved = [
            (r[0], r[1])
            for r in db.execute(
                "SELECT starts_at, ends_at FROM alerts WHERE fingerprint=? AND status='resolved' "
                f"AND NOT (stale={REFIRED} AND starts_at=?)",  # a re-fire's repeat: not stale
                (a.fingerprint, a.starts_at),
            )
        ]
        if not ordering.stale(a.status, a.starts_at, resolved):
            return False
        cur = db.execute(
            "INSERT OR IGNORE INTO alerts(key,fingerprint,starts_at,status,node,labels,"
            "received_at,processed,stale) VALUES(?,?,?,?,?,?,?,1,1)",
            (a.key + "|stale", a.fingerprint, a.starts_at, a.status, a.node,
             json.dumps(dict(a.labels), sort_keys=True), now),
        )  # fmt: skip
        if not cur.rowcount:
            return True  # its repeat: journaled once already
        db.execute(
            "INSERT INTO decisions(alert_key,node,fault_class,action,verdict,guard,reason,"
            "evidence,at) VALUES(?,?,?,?,?,?,?,?,?)",
            (a.key, a.node[:253], a.labels.get("fault_class", "")[:64], "notify", "allow",
             "stale", f"stale firing (startsAt {a.starts_at[:40]}): a resolve of this alert "
             "that began or ended after it was already seen; ignored", "{}", now),
        )  # fmt: skip
        return True

    # ------------------------------------------------------------------ decisions/actions
    def occurrences(self, node: str, fault_class: str, since: float) -> int:
        """Incidents of this node and fault class since ``since`` that got a disruptive action.

        Incidents, not alerts: one fault reported per GPU is one rung of the ladder."""
        return int(
            self.scalar(
                "SELECT COUNT(*) FROM incidents WHERE node=? AND fault_class=? "
                "AND acted IS NOT NULL AND opened_at>=?",
                (node, fault_class, since),
            )
        )

    def incident(self, node: str, fault_class: str, now: float, window: float) -> dict[str, Any]:
        """The open incident this alert belongs to (last alert within ``window``), or a new one."""
        with self.tx() as db:
            row = db.execute(
                "SELECT * FROM incidents WHERE node=? AND fault_class=? AND closed=0 "
                "AND last_at>=? ORDER BY id DESC LIMIT 1",
                (node, fault_class, now - window),
            ).fetchone()
            if row is None:
                iid = db.execute(
                    "INSERT INTO incidents(node,fault_class,opened_at,last_at) VALUES(?,?,?,?)",
                    (node, fault_class, now, now),
                ).lastrowid
            else:
                iid = row["id"]
                db.execute("UPDATE incidents SET last_at=? WHERE id=?", (now, iid))
            out = dict(db.execute("SELECT * FROM incidents WHERE id=?", (iid,)).fetchone())
            return {**out, "created": row is None}

    def forget_incident(self, incident_id: int) -> None:
        """Remove an incident opened by a decision that then waited (the scheduler did not
        answer): the alert is decided again later, and must not leave one incident per try."""
        with self.tx() as db:
            db.execute("DELETE FROM incidents WHERE id=? AND acted IS NULL", (incident_id,))

    def cluster_incident(
        self, fault_class: str, subject: str, now: float, firing: bool, window: float = 0.0
    ) -> int | None:
        """The cluster-level incident (node '') of ``fault_class`` about ``subject`` (a mount):
        opened by the first firing alert, touched by every later one, closed by a resolve; a
        firing alert within ``window`` of the close reopens it (a flap is the same incident).
        Returns its id (None: a resolve with no incident open)."""
        with self.tx() as db:
            row = db.execute(
                "SELECT id, closed FROM incidents WHERE node='' AND fault_class=? AND subject=? "
                "AND (closed=0 OR last_at>=?) ORDER BY id DESC LIMIT 1",
                (fault_class, subject, now - window),
            ).fetchone()
            if row is not None and row[1] and not firing:
                row = None  # already closed: a repeated resolve changes nothing
            if row is None and not firing:
                return None
            if row is None:
                return db.execute(
                    "INSERT INTO incidents(node,fault_class,subject,opened_at,last_at) "
                    "VALUES('',?,?,?,?)",
                    (fault_class, subject, now, now),
                ).lastrowid
            db.execute(
                "UPDATE incidents SET last_at=?, closed=? WHERE id=?",
                (now, int(not firing), row[0]),
            )
            return int(row[0])

    def open_cluster_incident(self, fault_class: str, subject: str) -> int | None:
        """The id of the open cluster-level incident of ``fault_class`` about ``subject``."""
        row = self.rows(
            "SELECT id FROM incidents WHERE node='' AND fault_class=? AND subject=? AND closed=0 "
            "ORDER BY id DESC LIMIT 1",
            (fault_class, subject),
        )
        return int(row[0]["id"]) if row else None

    def close_incidents(self, db: sqlite3.Connection, node: str) -> None:
        db.execute("UPDATE incidents SET closed=1 WHERE node=? AND closed=0", (node,))

    def actions_since(self, since: float) -> int:
        return int(self.scalar("SELECT COUNT(*) FROM actions WHERE started_at>=?", (since,)))

    def pending_actions(self) -> list[dict[str, Any]]:
        """Actions to run now: pending (new, or interrupted by a crash) and those waiting."""
        return self.rows(
            "SELECT * FROM actions WHERE state IN ('pending','waiting','paused') ORDER BY id"
        )

    def due_retries(self, now: float) -> list[dict[str, Any]]:
        return self.rows(
            "SELECT * FROM actions WHERE state='retry' AND next_at<=? ORDER BY id", (now,)
        )

    def epoch(self, node: str) -> int:
        return int(self.scalar("SELECT epoch FROM nodes WHERE node=?", (node,)) or 0)

    def step_detail(self, action_id: int, step: str) -> str:
        return str(
            self.scalar("SELECT detail FROM steps WHERE action_id=? AND step=?", (action_id, step))
            or ""
        )

    def step_deadline(self, action_id: int, step: str, deadline: float) -> float:
        """The deadline of a wait step: set once (persisted), then read back after restarts."""
        with self.tx() as db:
            db.execute(
                "INSERT OR IGNORE INTO steps(action_id,step,state,detail,deadline) "
                "VALUES(?,?,'waiting','',?)",
                (action_id, step, deadline),
            )
            row = db.execute(
                "SELECT deadline FROM steps WHERE action_id=? AND step=?", (action_id, step)
            ).fetchone()
        return float(row[0])

    def step_state(self, action_id: int, step: str) -> str | None:
        return self.scalar(  # type: ignore[no-any-return]
            "SELECT state FROM steps WHERE action_id=? AND step=?", (action_id, step)
        )

    def set_step(self, action_id: int, step: str, state: str, detail: str = "") -> None:
        with self.tx() as db:
            db.execute(
                "INSERT INTO steps(action_id,step,state,detail) VALUES(?,?,?,?) "
                "ON CONFLICT(action_id,step) DO UPDATE SET state=excluded.state, "
                "detail=excluded.detail",
                (action_id, step, state, detail),
            )

    def finish_action(
        self,
        action_id: int,
        state: str,
        outcome: str,
        now: float,
        next_at: float | None = None,
        node_state: str | None = None,
    ) -> None:
        """Record an action's state; ``node_state`` also sets its node's (one commit)."""
        with self.tx() as db:
            db.execute(
                "UPDATE actions SET state=?, outcome=?, finished_at=?, next_at=?, "
                "attempts=attempts+? WHERE id=?",
                (state, outcome, now, next_at, int(state in ("retry", "failed")), action_id),
            )
            if node_state is not None:
                row = db.execute("SELECT node FROM actions WHERE id=?", (action_id,)).fetchone()
                db.execute("UPDATE nodes SET state=? WHERE node=?", (node_state, row[0]))

    # ------------------------------------------------------------------ nodes
    def held_nodes(self) -> frozenset[str]:
        marks = ",".join("?" * len(HELD_STATES))
        rows = self.rows(f"SELECT node FROM nodes WHERE state IN ({marks})", HELD_STATES)
        return frozenset(r["node"] for r in rows)

    def node(self, node: str) -> dict[str, Any] | None:
        rows = self.rows("SELECT * FROM nodes WHERE node=?", (node,))
        return rows[0] if rows else None

    def set_node(self, db: sqlite3.Connection, node: str, **fields: Any) -> None:
        db.execute("INSERT OR IGNORE INTO nodes(node) VALUES(?)", (node,))
        sets = ",".join(f"{k}=?" for k in fields)
        db.execute(f"UPDATE nodes SET {sets} WHERE node=?", (*fields.values(), node))

    # ------------------------------------------------------------------ evacuations
    def block_evacuation(
        self, node: str, scope: str, action_id: int, pods: list[dict[str, Any]], now: float
    ) -> dict[str, Any]:
        """Record that the node's evacuation is blocked now: ``pods`` (pod, status, reason,
        message), each keeping the time it was first seen blocked; returns the record."""
        with self.tx() as db:
            row = db.execute("SELECT since, pods FROM evacuations WHERE node=?", (node,)).fetchone()
            before = {p["pod"]: p["since"] for p in json.loads(row[1])} if row else {}
            pods = [{**p, "since": before.get(p["pod"], now)} for p in pods]
            since = min([row[0]] if row else [now])
            db.execute(
                "INSERT OR REPLACE INTO evacuations VALUES(?,?,?,?,?,?)",
                (node, scope, action_id, since, now, json.dumps(pods)),
            )
        return {"node": node, "state": "blocked", "scope": scope, "action_id": action_id,
                "since": since, "last": now, "pods": pods}  # fmt: skip

    def clear_evacuation(self, node: str, action_id: int) -> None:
        """The action that found the node's evacuation blocked is over: not blocked now."""
        with self.tx() as db:
            db.execute("DELETE FROM evacuations WHERE node=? AND action_id=?", (node, action_id))

    def evacuations(self, node: str | None = None) -> dict[str, dict[str, Any]]:
        """Blocked evacuations by node (the read-only connection: metrics and the API)."""
        where, args = ("WHERE node=?", (node,)) if node else ("", ())
        rows = self.read(f"SELECT * FROM evacuations {where}", args)
        return {r["node"]: {**r, "state": "blocked", "pods": json.loads(r["pods"] or "[]")}
                for r in rows}  # fmt: skip

    # ------------------------------------------------------------------ flags, kv
    def add_flag(self, db: sqlite3.Connection, node: str, at: float) -> None:
        # The latest flag per node is all the storm breaker needs: bounded by the fleet size.
        db.execute("INSERT OR REPLACE INTO flags VALUES(?,?)", (node, at))

    def flag_summary(self, since: float) -> tuple[int, float | None]:
        """(distinct nodes flagged since ``since``, time of the latest flag)."""
        with self._lock:
            row = self.db.execute(
                "SELECT (SELECT COUNT(*) FROM flags WHERE at>=?), (SELECT MAX(at) FROM flags)",
                (since,),
            ).fetchone()
        return int(row[0]), row[1]

    def flags_since(self, since: float) -> list[tuple[str, float]]:
        return [
            (r["node"], r["at"])
            for r in self.rows("SELECT node, at FROM flags WHERE at>=? ORDER BY at", (since,))
        ]

    def prune_flags(self, before: float) -> None:
        with self.tx() as db:
            db.execute("DELETE FROM flags WHERE at < ?", (before,))

    def get(self, key: str, default: str | None = None) -> str | None:
        rows = self.read("SELECT value FROM kv WHERE key=?", (key,))  # committed: no writer wait
        return default if not rows or rows[0]["value"] is None else str(rows[0]["value"])

    def put(self, key: str, value: str | None) -> None:
        with self.tx() as db:
            if value is None:
                db.execute("DELETE FROM kv WHERE key=?", (key,))
            else:
                db.execute("INSERT OR REPLACE INTO kv VALUES(?,?)", (key, value))
