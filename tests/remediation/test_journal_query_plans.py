"""What the journal does per alert must not grow with its history: at 500 events a second the
decisions table gains ~40 million rows a day, and one full scan of it per repeated alert made
the service's CPU per event double within 10 minutes (benchmarks/bench_eventpath.py).

Every statement the service runs while it accepts and decides new alerts and Alertmanager's
repeats of them is traced and explained by SQLite: none may scan a table that grows with the
events (or the fleet) instead of searching an index."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from tests.remediation.helpers import alert, service, topology_file

# tables whose rows grow with events or with the fleet
GROWING = ("alerts", "decisions", "actions", "steps", "incidents", "nodes", "dry_run_effects",
           "outbox", "evacuations", "flags")  # fmt: skip


def _batch(first: int, last: int) -> list:
    return [
        alert(node=f"gpu-node-{i:03d}", fault_class=fc, action=act, fp=f"fp-{i}-{fc}")
        for i in range(first, last)
        for fc, act in (("xid_fatal", "drain"), ("nvlink_degraded", "notify"))
    ]


def _scans(db: Path, statements: list[str]) -> dict[str, list[str]]:
    """Each distinct statement (literals as parameters) -> the growing tables it scans."""
    shapes = {re.sub(r"'[^']*'|\b\d+(\.\d+)?\b", "?", s) for s in statements}
    ro = sqlite3.connect(db)
    out = {}
    for sql in shapes:
        if not sql.lstrip().upper().startswith(("SELECT", "UPDATE", "DELETE", "INSERT")):
            continue
        plan = ro.execute("EXPLAIN QUERY PLAN " + sql, [None] * sql.count("?")).fetchall()
        scanned = [
            t for _, _, _, step in plan for t in GROWING
            if re.fullmatch(rf"SCAN {t}( AS \w+)?", step)
        ]  # fmt: skip
        if scanned:
            out[sql] = scanned
    ro.close()
    return out


async def test_deciding_new_and_repeated_alerts_searches_indexes_and_scans_no_growing_table(
    tmp_path: Path,
) -> None:
    svc = service(tmp_path, topology=topology_file(tmp_path, 60))
    svc.journal.accept(_batch(1, 20), 1.0)  # warm: start-up reads (the dry-run fleet) happen
    await svc.worker.drain()
    traced: list[str] = []
    svc.journal.db.set_trace_callback(traced.append)
    svc.journal.accept(_batch(20, 40), 2.0)  # new alerts
    await svc.worker.drain()
    svc.journal.accept(_batch(1, 40), 3.0)  # Alertmanager's repeats of every one
    await svc.worker.drain()
    svc.engine.tick()
    svc.journal.db.set_trace_callback(None)
    assert len(traced) > 200  # the trace saw the work
    assert any("FROM decisions WHERE alert_key" in s for s in traced)  # the repeat path ran
    assert _scans(tmp_path / "state.db", traced) == {}


def test_the_plan_check_sees_a_full_scan_where_there_is_one(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    c = sqlite3.connect(db)
    c.execute("CREATE TABLE decisions(id INTEGER PRIMARY KEY, alert_key TEXT, reason TEXT)")
    c.commit()
    c.close()
    found = _scans(
        db, ["SELECT id FROM decisions WHERE reason='x'", "SELECT 1 FROM decisions WHERE id=3"]
    )
    assert found == {"SELECT id FROM decisions WHERE reason=?": ["decisions"]}
