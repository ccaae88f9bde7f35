"""Maintenance runs in the remediation journal (SQLite, WAL): a row per run, a row per node.

Sits under the runner. A tick's new states are written in one transaction with the
maintenance events they make (the events outbox, remediation/events/outbox.py), so after a
kill -9 the run continues from its last commit and every step reported was a step taken.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import asdict, fields
from typing import Any

from remediation.events import cloudevent, outbox
from remediation.events.capture import rfc3339
from remediation.journal import Journal
from remediation.maintenance.model import IN_FLIGHT, YIELDABLE, NodeRun, Operation, Run, Spec

SCHEMA = """
CREATE TABLE IF NOT EXISTS maintenance_runs(id INTEGER PRIMARY KEY AUTOINCREMENT,
  spec TEXT NOT NULL, state TEXT NOT NULL, created_at REAL, who TEXT, reason TEXT);
CREATE TABLE IF NOT EXISTS maintenance_nodes(run_id INTEGER, node TEXT, pos INTEGER,
  state TEXT NOT NULL, detail TEXT NOT NULL, PRIMARY KEY(run_id, node));
CREATE INDEX IF NOT EXISTS maintenance_nodes_state ON maintenance_nodes(state);
CREATE TABLE IF NOT EXISTS maintenance_verdicts(handle TEXT PRIMARY KEY, run_id INTEGER,
  node TEXT, verdict TEXT NOT NULL, at REAL);
"""
LIVE_RUNS = ("running", "paused", "stopped")  # a stopped run still finishes what it started
_NODE_FIELDS = tuple(f.name for f in fields(NodeRun))


def ensure(journal: Journal) -> None:
    with journal.tx() as db:
        for stmt in SCHEMA.strip().split(";"):
            if stmt.strip():
                db.execute(stmt)


def _spec(text: str) -> Spec:
    raw = json.loads(text)
    raw["operation"] = Operation(**{**raw["operation"], "argv": tuple(raw["operation"]["argv"])})
    raw["nodes"] = tuple(raw["nodes"])
    return Spec(**raw)


def _node(text: str) -> NodeRun:
    raw = json.loads(text)
    for key in ("signalled", "requeued"):
        raw[key] = tuple(raw[key])
    return NodeRun(**{k: v for k, v in raw.items() if k in _NODE_FIELDS})


def create(journal: Journal, spec: Spec, nodes: tuple[NodeRun, ...], now: float, who: str) -> Run:
    with journal.tx() as db:
        cur = db.execute(
            "INSERT INTO maintenance_runs(spec,state,created_at,who,reason) VALUES(?,?,?,?,'')",
            (json.dumps(asdict(spec)), "running", now, who),
        )
        rid = int(cur.lastrowid or 0)
        for pos, n in enumerate(nodes):
            db.execute(
                "INSERT INTO maintenance_nodes(run_id,node,pos,state,detail) VALUES(?,?,?,?,?)",
                (rid, n.node, pos, n.state, json.dumps(asdict(n))),
            )
    return Run(rid, spec, "running", nodes, now, who)


def load(journal: Journal, run_id: int, reader: bool = False) -> Run | None:
    read = journal.read if reader else journal.rows
    rows = read("SELECT * FROM maintenance_runs WHERE id=?", (run_id,))
    if not rows:
        return None
    r = rows[0]
    nodes = read("SELECT detail FROM maintenance_nodes WHERE run_id=? ORDER BY pos", (run_id,))
    return Run(r["id"], _spec(r["spec"]), r["state"], tuple(_node(n["detail"]) for n in nodes),
               r["created_at"], r["who"] or "", r["reason"] or "")  # fmt: skip


def ids(journal: Journal, live_only: bool = False, reader: bool = False) -> list[int]:
    read = journal.read if reader else journal.rows
    where = f"WHERE state IN ({','.join('?' * len(LIVE_RUNS))})" if live_only else ""
    rows = read(
        f"SELECT id FROM maintenance_runs {where} ORDER BY id", LIVE_RUNS if live_only else ()
    )
    return [int(r["id"]) for r in rows]


def keep_verdict(journal: Journal, run_id: int, node: str, handle: str, verdict: str,
                 now: float) -> None:  # fmt: skip
    """A suite's verdict, read before the stop that deletes what it was read from (a Job):
    committed before the stop is asked for, so a kill -9 before the stop is confirmed
    finds it after the restart instead of reading its own clean-up as a cancel."""
    with journal.tx() as db:
        db.execute(
            "INSERT OR IGNORE INTO maintenance_verdicts(handle,run_id,node,verdict,at) "
            "VALUES(?,?,?,?,?)",
            (handle, run_id, node, verdict, now),
        )


def kept_verdict(journal: Journal, handle: str) -> str | None:
    rows = journal.rows("SELECT verdict FROM maintenance_verdicts WHERE handle=?", (handle,))
    return str(rows[0]["verdict"]) if rows else None


def save(journal: Journal, before: Run, after: Run, now: float, source: str | None) -> None:
    """Write what changed; with ``source`` (events out is on), one maintenance event per
    node whose state changed and one for the run's, in the same transaction. A kept suite
    verdict goes in that transaction too, once its node has moved on from it."""
    old = {n.node: n for n in before.nodes}
    with journal.tx() as db:
        if after.state != before.state or after.reason != before.reason:
            db.execute("UPDATE maintenance_runs SET state=?, reason=? WHERE id=?",
                       (after.state, after.reason, after.id))  # fmt: skip
            if source:
                _event(db, after, "", after.state, after.reason, now, source, now)
        for n in after.nodes:
            if old.get(n.node) == n:
                continue
            db.execute(
                "UPDATE maintenance_nodes SET state=?, detail=? WHERE run_id=? AND node=?",
                (n.state, json.dumps(asdict(n)), after.id, n.node),
            )
            prev = old.get(n.node)
            if (
                prev is not None
                and prev.handle
                and (prev.handle != n.handle or n.state != prev.state)
            ):
                db.execute("DELETE FROM maintenance_verdicts WHERE handle=?", (prev.handle,))
            if source and (prev is None or prev.state != n.state):
                _event(db, after, n.node, n.state, n.reason, now, source, n.since)


def _event(
    db: sqlite3.Connection, run: Run, node: str, state: str, reason: str, now: float,
    source: str, since: float,
) -> None:  # fmt: skip
    eid = f"maintenance-{run.id}-{node or 'run'}-{state}-{since:.6f}"  # one per transition
    data: dict[str, Any] = {"run": run.id, "node": node, "state": state, "reason": reason,
                            "operation": run.spec.operation.describe()}  # fmt: skip
    event = cloudevent.make(id=eid, source=source, kind="maintenance", time=rfc3339(now),
                            data=data, subject_=node, partition=node,
                            severity="warning" if state == "failed" else "info")  # fmt: skip
    outbox.put(db, eid, node, "maintenance", event, now)


def out_for_maintenance(journal: Journal, yieldable_only: bool = False) -> frozenset[str]:
    """Nodes out for maintenance now (every live run); ``yieldable_only``: only those a
    fault may take the budget of (not yet operated on). Empty before the first run."""
    states = YIELDABLE if yieldable_only else IN_FLIGHT
    marks = ",".join("?" * len(states))
    try:
        rows = journal.read(
            f"SELECT n.node FROM maintenance_nodes n JOIN maintenance_runs r ON r.id=n.run_id "
            f"WHERE n.state IN ({marks}) AND r.state IN ('running','paused','stopped','aborted')",
            tuple(states),
        )
    except sqlite3.OperationalError:  # no table yet: no run ever
        return frozenset()
    return frozenset(r["node"] for r in rows)
