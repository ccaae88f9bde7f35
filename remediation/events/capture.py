"""Capture: copy what the journal committed (findings, decisions, actions) into the outbox.

Where it sits: between the journal's tables and the outbox, run by the relay each cycle.
Findings reach remediation as alerts (the analyzer's findings, through the alert rules and
Alertmanager), so each alert the journal accepted is a ``finding`` event; each row of
``decisions`` a ``decision``; each state an action is seen in (with its steps as evidence) an
``action`` (a state it passed through between two cycles is not seen: its last one is).
Read, put into the outbox and the cursor moved in one transaction, so a crash never loses
or doubles one (ids are stable: ``<kind>-<row>[-<state>]@<journal id>``).

The first capture starts at the journal's present (no flood of history into a new sink):
the service places the cursor (:func:`prime`) before it takes its first alert.
The mapping from rows to events is pure (:func:`finding`, :func:`decision`, :func:`action`).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from remediation.events import cloudevent, outbox
from remediation.events.filter import Filter
from remediation.journal import Journal

CURSOR_KEY = "events_cursor"
JOURNAL_ID_KEY = "events_journal_id"
BATCH = 500
# within one capture, a node's events in causal order: an alert, its decision, its action
_KIND_ORDER = {"finding": 0, "decision": 1, "action": 2}


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _json(text: str | None) -> Any:
    try:
        return json.loads(text or "{}")
    except json.JSONDecodeError:
        return {"raw": text}


def _alert_time(labels_status: str, starts_at: str, ends_at: str, received_at: float) -> str:
    """When the finding happened: its startsAt (firing) or endsAt (resolved), as sent."""
    t = ends_at if labels_status == "resolved" and ends_at else starts_at
    try:
        datetime.fromisoformat(t.replace("Z", "+00:00"))
        return t
    except (ValueError, AttributeError):
        return rfc3339(received_at)


Item = tuple[float, int, int, str, str, str, dict[str, Any], str, dict[str, str]]
# (time, kind order, row, id, kind, partition, event-without-seq, severity, labels)


def finding(r: dict[str, Any], jid: str, source: str) -> Item:
    labels = _json(r["labels"])
    node = r["node"] or ""
    data = {
        "status": r["status"], "alertname": labels.get("alertname", ""),
        "fault_class": labels.get("fault_class", ""), "action": labels.get("action", ""),
        "fingerprint": r["fingerprint"], "starts_at": r["starts_at"],
        "ends_at": r["ends_at"] or "", "labels": labels,
        "annotations": _json(r["annotations"]), "received_at": rfc3339(r["received_at"]),
    }  # fmt: skip
    ev = {
        "id": f"finding-{r['seq']}@{jid}", "source": source, "kind": "finding",
        "time": _alert_time(r["status"], r["starts_at"], r["ends_at"] or "", r["received_at"]),
        "subject_": cloudevent.subject(node, labels.get("gpu", "")), "partition": node,
        "severity": labels.get("severity", ""), "data": data,
    }  # fmt: skip
    return (r["received_at"], 0, r["seq"], ev["id"], "finding", node, ev,
            labels.get("severity", ""), labels)  # fmt: skip


def decision(r: dict[str, Any], jid: str, source: str) -> Item:
    labels = _json(r.get("labels"))
    node = r["node"] or ""
    data = {
        "decision_id": r["id"], "verdict": r["verdict"], "guard": r["guard"],
        "action": r["action"], "fault_class": r["fault_class"] or "", "reason": r["reason"],
        "evidence": _json(r["evidence"]), "alert_key": r["alert_key"],
        "alertname": labels.get("alertname", ""),
    }  # fmt: skip
    ev = {
        "id": f"decision-{r['id']}@{jid}", "source": source, "kind": "decision",
        "time": rfc3339(r["at"]), "subject_": cloudevent.subject(node, labels.get("gpu", "")),
        "partition": node, "severity": labels.get("severity", ""), "data": data,
    }  # fmt: skip
    return (r["at"], 1, r["id"], ev["id"], "decision", node, ev,
            labels.get("severity", ""), labels)  # fmt: skip


def action(r: dict[str, Any], steps: list[dict[str, Any]], jid: str, source: str) -> Item:
    labels = _json(r.get("labels"))
    node = r["node"] or ""
    at = r["finished_at"] if r["finished_at"] is not None else r["started_at"]
    data = {
        "action_id": r["id"], "decision_id": r["decision_id"], "action": r["action"],
        "backend": r["backend"], "state": r["state"], "outcome": r["outcome"] or "",
        "reason": r["reason"] or "", "fault_class": r["fault_class"] or "",
        "attempts": r["attempts"], "started_at": rfc3339(r["started_at"]),
        "steps": [{"step": s["step"], "state": s["state"], "detail": s["detail"] or ""}
                  for s in steps],
    }  # fmt: skip
    ev = {
        "id": f"action-{r['id']}-{r['state']}-{r['attempts']}@{jid}", "source": source,
        "kind": "action", "time": rfc3339(at or 0.0),
        "subject_": cloudevent.subject(node, labels.get("gpu", "")), "partition": node,
        "severity": labels.get("severity", ""), "data": data,
    }  # fmt: skip
    return (at or 0.0, 2, r["id"], ev["id"], "action", node, ev,
            labels.get("severity", ""), labels)  # fmt: skip


def _journal_id(db: sqlite3.Connection) -> str:
    row = db.execute("SELECT value FROM kv WHERE key=?", (JOURNAL_ID_KEY,)).fetchone()
    if row is not None:
        return str(row[0])
    jid = uuid.uuid4().hex[:12]
    db.execute("INSERT INTO kv VALUES(?,?)", (JOURNAL_ID_KEY, jid))
    return jid


def _start_at_present(db: sqlite3.Connection) -> dict[str, int]:
    """The first capture: history stays in the journal; only what follows goes out."""
    db.execute("UPDATE actions SET evented=state||'/'||attempts")
    cursor = {
        "alerts": int(db.execute("SELECT IFNULL(MAX(seq),0) FROM alerts").fetchone()[0]),
        "decisions": int(db.execute("SELECT IFNULL(MAX(id),0) FROM decisions").fetchone()[0]),
    }
    db.execute("INSERT OR REPLACE INTO kv VALUES(?,?)", (CURSOR_KEY, json.dumps(cursor)))
    return cursor


def _rows(db: sqlite3.Connection, sql: str, args: tuple[Any, ...]) -> list[dict[str, Any]]:
    cur = db.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r, strict=True)) for r in cur.fetchall()]


def _read(db: sqlite3.Connection, cursor: dict[str, int], jid: str, source: str) -> list[Item]:
    alerts = _rows(
        db,
        "SELECT seq, fingerprint, starts_at, ends_at, status, node, labels, annotations, "
        "received_at FROM alerts WHERE seq>? AND stale=0 ORDER BY seq LIMIT ?",
        (cursor["alerts"], BATCH),
    )
    skipped = db.execute(  # stale firings are never decided: no finding either
        "SELECT MAX(seq) FROM (SELECT seq FROM alerts WHERE seq>? ORDER BY seq LIMIT ?)",
        (cursor["alerts"], BATCH),
    ).fetchone()[0]
    decisions = _rows(
        db,
        "SELECT d.*, a.labels FROM decisions d LEFT JOIN alerts a ON a.key=d.alert_key "
        "WHERE d.id>? ORDER BY d.id LIMIT ?",
        (cursor["decisions"], BATCH),
    )
    actions = _rows(
        db,
        "SELECT x.*, a.labels FROM actions x LEFT JOIN decisions d ON d.id=x.decision_id "
        "LEFT JOIN alerts a ON a.key=d.alert_key "
        "WHERE IFNULL(x.evented,'')!=x.state||'/'||x.attempts ORDER BY x.id LIMIT ?",
        (BATCH,),
    )
    items = [finding(r, jid, source) for r in alerts]
    items += [decision(r, jid, source) for r in decisions]
    for r in actions:
        steps = _rows(
            db, "SELECT step, state, detail FROM steps WHERE action_id=? ORDER BY rowid", (r["id"],)
        )
        items.append(action(r, steps, jid, source))
        db.execute(
            "UPDATE actions SET evented=? WHERE id=?", (f"{r['state']}/{r['attempts']}", r["id"])
        )
    cursor["alerts"] = max(cursor["alerts"], int(skipped or 0))
    if decisions:
        cursor["decisions"] = decisions[-1]["id"]
    return items


def prime(journal: Journal) -> bool:
    """Before the service takes its first alert: place the cursor at the journal's present
    if it has none yet (True when it was placed now; history is not replayed)."""
    with journal.tx() as db:
        _journal_id(db)
        if db.execute("SELECT 1 FROM kv WHERE key=?", (CURSOR_KEY,)).fetchone() is not None:
            return False
        _start_at_present(db)
        return True


def capture(
    journal: Journal, source: str, keep: Filter, now: Callable[[], float]
) -> tuple[int, bool]:
    """One batch from the journal into the outbox: (events put in, more may be waiting)."""
    if prime(journal):
        return 0, False
    with journal.tx() as db:
        jid = _journal_id(db)
        row = db.execute("SELECT value FROM kv WHERE key=?", (CURSOR_KEY,)).fetchone()
        cursor = json.loads(row[0])
        items = _read(db, cursor, jid, source)
        put = 0
        t = now()
        for _, _, _, eid, kind, part, ev, sev, labels in sorted(items, key=lambda i: i[:3]):
            if not keep.passes(kind, sev, labels):
                continue
            event = cloudevent.make(**{k: v for k, v in ev.items() if k != "kind"}, kind=kind)
            if outbox.put(db, eid, part, kind, event, t) is None:
                continue
            put += 1
        db.execute("INSERT OR REPLACE INTO kv VALUES(?,?)", (CURSOR_KEY, json.dumps(cursor)))
    return put, len(items) >= BATCH
