"""Another process holding the SQLite write lock: health and metrics still answer at once,
the webhook answers 503 with Retry-After (Alertmanager retries), never 500, and no alert is
lost once the lock is gone."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog
from remediation.app import build_app
from remediation.clock import FakeClock
from tests.remediation.helpers import AUTH, alert, payload, service, topology_file

HOLD_S = 7.0  # longer than the journal's 5 s busy timeout


def hold_write_lock(path: Path, started: threading.Event, seconds: float) -> None:
    """What a sqlite3 shell or a backup tool doing a write transaction does."""
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("BEGIN IMMEDIATE")
    db.execute("INSERT OR REPLACE INTO kv VALUES('other', 'process')")
    started.set()
    time.sleep(seconds)
    db.execute("COMMIT")
    db.close()


async def test_a_locked_journal_gets_503_retry_after_and_health_and_metrics_stay_fast(
    tmp_path: Path,
) -> None:
    svc = service(tmp_path, clock=FakeClock(), topology=topology_file(tmp_path, 4))
    async with TestClient(TestServer(build_app(svc))) as client:
        started = threading.Event()
        holder = threading.Thread(
            target=hold_write_lock, args=(tmp_path / "state.db", started, HOLD_S)
        )
        holder.start()
        assert await asyncio.to_thread(started.wait, 5)
        body = payload(alert("gpu-node-002"))
        webhook = asyncio.create_task(client.post("/alertmanager", data=body, headers=AUTH))
        await asyncio.sleep(0.2)  # the webhook now waits for the lock in its thread
        for path in ("/healthz", "/metrics"):
            t0 = time.monotonic()
            r = await client.get(path)
            took = time.monotonic() - t0
            assert r.status == 200 and took < 1.0, (path, r.status, took)
        r = await webhook
        assert r.status == 503 and r.headers["Retry-After"] == "5"
        assert "journal busy" in (await r.json())["error"]
        await asyncio.to_thread(holder.join, 10)
        r = await client.post("/alertmanager", data=body, headers=AUTH)  # Alertmanager's retry
        assert r.status == 200 and (await r.json())["accepted"] == 1
        await svc.worker.idle(20)
        metrics = await (await client.get("/metrics")).text()
    [row] = svc.journal.rows("SELECT * FROM alerts")
    assert row["processed"] == 1 and row["node"] == "gpu-node-002"
    name = catalog.REMEDIATION_WEBHOOK_ERRORS.name
    assert f'{name}{{reason="journal_busy"}} 1.0' in metrics
    assert 'code="500"' not in metrics


async def test_healthz_names_a_lagging_tick_loop_and_an_action_past_its_deadline(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    async with TestClient(TestServer(build_app(svc))) as client:
        await svc.worker.idle(10)
        assert (await client.get("/healthz")).status == 200
        with svc.journal.tx() as db:  # a wait whose deadline passed long ago, still waiting
            db.execute(
                "INSERT INTO actions(id,node,action,state,epoch) "
                "VALUES(77,'gpu-node-001','drain','waiting',0)"
            )
            db.execute("INSERT INTO steps VALUES(77,'ack:1','waiting','',?)", (clock.now() - 100,))
        problem = svc.health_problem()  # no await in between: the worker has not run it
        assert problem == "action 77 on gpu-node-001 is past its deadline"
        svc.journal.db.execute("DELETE FROM actions WHERE id=77")
        svc.worker.last_tick -= 1000  # no await until checked: the worker cannot tick
        assert svc.health_problem().startswith("tick loop lags: last cycle")
        svc.worker.last_tick += 1000
        svc.worker.write_error = "attempt to write a readonly database"
        assert svc.health_problem() == "journal unwritable: attempt to write a readonly database"
