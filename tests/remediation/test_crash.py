"""Crash safety: kill -9 the service at random points during a stream of alerts, 20 times.

After each restart the journal reconciles in-flight actions against the (dry-run) scheduler
state: no action is executed twice, no accepted alert is lost, the journal stays consistent.
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.realcomp import free_port, wait_until
from tests.remediation.helpers import LIVE_POLICY, TOKEN, alert, payload, topology_file
from tests.remediation.helpers import start_service as start
from tests.slurmcluster import SlurmCluster

RUNS = 20


def post(port: int, body: bytes) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/alertmanager",
        data=body,
        headers={"Authorization": f"Bearer {TOKEN}"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(r.status)


def stream(
    port: int, bodies: list[tuple[str, bytes]], acked: list[str], stop: threading.Event
) -> None:
    for key, body in bodies:
        if stop.is_set():
            return
        try:
            if post(port, body) == 200:
                acked.append(key)
        except (OSError, urllib.error.URLError):
            return  # killed mid-request: not acknowledged, so Alertmanager would retry


@pytest.mark.slow
def test_kill_9_at_random_points_loses_nothing_and_repeats_nothing(tmp_path: Path) -> None:
    rng = random.Random(20261129)
    (tmp_path / "policy.yaml").write_text(LIVE_POLICY)
    topology_file(tmp_path, 60)
    alerts = [
        alert(
            f"gpu-node-{rng.randint(1, 60):03d}",
            fp=f"fp{i}",
            starts_at=f"2026-11-29T10:{i // 60:02d}:{i % 60:02d}Z",
        )
        for i in range(400)
    ]
    bodies = [(a.key, payload(a)) for a in alerts]
    acked: list[str] = []
    sent = 0
    for _ in range(RUNS):
        port = free_port()
        proc = start(tmp_path, port)
        stop = threading.Event()
        chunk = bodies[sent : sent + 20]
        t = threading.Thread(target=stream, args=(port, chunk, acked, stop))
        t.start()
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        stop.set()
        t.join(5)
        sent += len(chunk)
    port = free_port()
    proc = start(tmp_path, port)
    try:
        for _key, body in bodies[:sent]:  # Alertmanager's retries of everything
            assert post(port, body) == 200

        def settled() -> bool:
            db = sqlite3.connect(tmp_path / "state.db")
            try:
                todo = db.execute("SELECT COUNT(*) FROM alerts WHERE processed=0").fetchone()[0]
                pend = db.execute("SELECT COUNT(*) FROM actions WHERE state='pending'").fetchone()[
                    0
                ]
            finally:
                db.close()
            return todo == 0 and pend == 0

        wait_until(settled, 60, 0.2, "journal settled")
    finally:
        proc.terminate()
        proc.wait(10)
    db = sqlite3.connect(tmp_path / "state.db")
    db.row_factory = sqlite3.Row
    assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    keys = {r[0] for r in db.execute("SELECT key FROM alerts")}
    assert set(acked) <= keys, "an acknowledged alert was lost"
    assert keys == {k for k, _ in bodies[:sent]}
    undecided = db.execute(
        "SELECT COUNT(*) FROM alerts a WHERE NOT EXISTS "
        "(SELECT 1 FROM decisions d WHERE d.alert_key=a.key)"
    ).fetchone()[0]
    assert undecided == 0
    twice = db.execute(
        "SELECT action_id, op, COUNT(*) FROM dry_run_effects GROUP BY action_id, op "
        "HAVING COUNT(*) > 1"
    ).fetchall()
    assert twice == [], "an action was executed twice"
    per_decision = db.execute(
        "SELECT d.id, COUNT(a.id) AS n FROM decisions d LEFT JOIN actions a ON a.decision_id=d.id "
        "WHERE d.verdict='allow' AND d.action IN ('drain','checkpoint_restart','reboot','inspect') "
        "GROUP BY d.id"
    ).fetchall()
    assert per_decision and all(r["n"] == 1 for r in per_decision)
    states = {r[0] for r in db.execute("SELECT DISTINCT state FROM actions")}
    assert states <= {"done"}, states
    drained = {r[0] for r in db.execute("SELECT node FROM dry_run_effects WHERE op='take_out'")}
    held = {
        r[0]
        for r in db.execute("SELECT node FROM nodes WHERE state IN ('quarantined', 'inspection')")
    }
    assert drained == held
    reconciled = db.execute("SELECT COUNT(*) FROM steps WHERE detail LIKE '%restart%'").fetchone()[
        0
    ]
    print(json.dumps({"acked": len(acked), "sent": sent, "reconciled_steps": reconciled}))


@pytest.mark.real
def test_a_kill_after_the_drain_took_effect_is_reconciled_against_real_slurm_not_repeated(
    clean_slurm: SlurmCluster, tmp_path: Path, readable_dir: Path
) -> None:
    """kill -9 exactly between the scheduler's change and its journal entry."""
    d = readable_dir
    (d / "scontrol").write_text(
        "#!/bin/sh\n"
        f'echo "$*" >> {d}/calls.log\n'
        '/usr/bin/scontrol "$@"; rc=$?\n'
        f'case "$*" in *State=DRAIN*) echo $$ > {d}/pid; exec sleep 30;; esac\n'
        "exit $rc\n"
    )
    (d / "scontrol").chmod(0o755)
    (tmp_path / "policy.yaml").write_text(LIVE_POLICY)
    env = {**clean_slurm.env, "PATH": f"{d}:{os.environ['PATH']}"}
    port = free_port()
    proc = start(tmp_path, port, env, "--backend", "slurm")
    try:
        assert post(port, payload(alert("gpu-node-003"))) == 200
        wait_until(lambda: (d / "pid").exists(), 20, 0.05, "drain issued")
        os.kill(proc.pid, signal.SIGKILL)  # the drain happened; its journal entry did not
        proc.wait(5)
        os.kill(int((d / "pid").read_text()), signal.SIGKILL)
        assert "DRAIN" in clean_slurm.node_state("gpu-node-003")["flags"]
        db = sqlite3.connect(tmp_path / "state.db")
        assert db.execute("SELECT state FROM actions").fetchall() == [("pending",)]
        assert db.execute("SELECT step, state FROM steps").fetchall() == [("take_out", "started")]
        db.close()
        proc = start(tmp_path, free_port(), env, "--backend", "slurm")

        def finished() -> list[tuple[str, str]]:
            db = sqlite3.connect(tmp_path / "state.db")
            try:
                return db.execute(
                    "SELECT state, outcome FROM actions WHERE state!='pending'"
                ).fetchall()
            finally:
                db.close()

        [(state, outcome)] = wait_until(finished, 20, 0.1, "action finished after restart")
    finally:
        proc.terminate()
        proc.wait(10)
    assert state == "done" and outcome == "reconciled after restart"
    drains = [c for c in (d / "calls.log").read_text().splitlines() if "State=DRAIN" in c]
    assert len(drains) == 1  # never drained twice
    assert str(clean_slurm.node_state("gpu-node-003")["reason"]).startswith("gpuwarden: drain")
