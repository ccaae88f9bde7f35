"""The asynchronous worker: decides journaled alerts and executes actions off the request path.

The webhook only journals and wakes this worker, so a slow scheduler never blocks
Alertmanager. Decisions run one at a time (guards see a consistent journal); actions run
concurrently across nodes but one at a time per node. Every tick (and on start, after a
crash) the actions that can move are run again: pending, waiting on a deadline, paused,
due for a retry, and deferred reboots of nodes still held. A run never sleeps, so the
thread pool stays free for the API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from typing import Any

from remediation.backends.base import Unavailable
from remediation.engine import Engine
from remediation.executor import TERMINAL, Executor

log = logging.getLogger("gpuwarden.remediation")


def parse_ts(value: str) -> float | None:
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class Worker:
    def __init__(self, engine: Engine, executor: Executor, tick_s: float = 5.0) -> None:
        self.engine, self.executor, self.tick_s = engine, executor, tick_s
        self.wake = asyncio.Event()
        self.tasks: set[asyncio.Task[None]] = set()
        self.locks: dict[str, asyncio.Lock] = {}
        self.main: asyncio.Task[None] | None = None
        self.running: set[int] = set()
        # actions run on their own threads: a tick re-running hundreds of waiting actions
        # must not queue the API's and the webhook's journal calls behind it
        self.pool = ThreadPoolExecutor(4, thread_name_prefix="gpuwarden-action")
        self.busy = False
        self.stopping = False
        self.last_tick = 0.0  # monotonic time of the last finished cycle (health)
        self.write_error = ""  # the last cycle could not write the journal (health)
        # the backend did not answer while deciding: alerts wait undecided (status, metrics)
        self.unreachable = ""
        # more loops run on each cycle after the engine's tick (rolling maintenance)
        self.ticks: list[Callable[[], None]] = []

    async def start(self) -> None:
        await self.resume_actions()  # interrupted by a crash: finish, reconciling each step
        self.main = asyncio.create_task(self._loop())

    async def resume_actions(self) -> None:
        j = self.engine.journal
        rows = await asyncio.to_thread(j.pending_actions)
        rows += await asyncio.to_thread(j.due_retries, self.engine.clock.now())
        held = await asyncio.to_thread(j.held_nodes)
        deferred = await asyncio.to_thread(
            j.rows, "SELECT * FROM actions WHERE state='deferred' ORDER BY id"
        )
        for row in rows + [r for r in deferred if r["node"] in held]:
            self._spawn(row)

    def alive(self) -> bool:
        return self.main is not None and not self.main.done()

    async def _loop(self) -> None:
        while not self.stopping:
            # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.tick_s):
                    await self.wake.wait()
            self.wake.clear()
            try:
                await self.drain_until_unreachable()
                await asyncio.to_thread(self.engine.tick)
                for more in self.ticks:
                    await asyncio.to_thread(more)
                await self.resume_actions()
                self.last_tick, self.write_error = time.monotonic(), ""
            except sqlite3.OperationalError as e:  # locked or read-only: retried next cycle
                self.write_error = str(e)
                log.warning("worker cycle: journal unwritable: %s", e)
            except Unavailable as e:  # the tick's reads: retried next cycle
                log.warning("worker cycle: %s", e)
            except Exception:  # a bug must not kill the worker; it is logged and retried
                log.exception("worker cycle failed")
                await asyncio.sleep(1.0)

    async def drain_until_unreachable(self) -> None:
        """Decide what waits (``drain``); when the scheduler or API server did not answer,
        say so (status, gauge, one log line) until a cycle decides everything again."""
        try:
            await self.drain()
        except Unavailable as e:
            if not self.unreachable:
                log.warning("deciding waits: the backend does not answer: %s", e)
            self.unreachable = str(e)
        else:
            if self.unreachable:
                log.info("the backend answers again; waiting alerts decided")
            self.unreachable = ""

    async def drain(self) -> None:
        """Decide every undecided alert in arrival order. An alert the backend could not be
        asked about (``Unavailable``) is left undecided, not denied; after it, only alerts
        of no node (a whole NVLink domain, shared storage: decided from the journal alone)
        are decided, so a domain's outage is known before its nodes' waiting alerts are,
        and each node's alerts keep their order. Raises that ``Unavailable`` after the
        pass; the next cycle (a tick, or the next webhook) tries again."""
        self.busy = True
        missed: Unavailable | None = None
        try:
            seq = 0
            while todo := await asyncio.to_thread(self.engine.journal.todo, 500, seq):
                seq = todo[-1][0]
                for _, alert in todo:
                    if missed is not None and alert.node:
                        continue
                    try:
                        aid = await asyncio.to_thread(self._decide, alert)
                    except Unavailable as e:
                        missed = e
                        continue
                    if aid is not None:
                        rows = self.engine.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
                        self._spawn(rows[0])
        finally:
            self.busy = False
        if missed is not None:
            raise missed

    def _decide(self, alert: Any) -> int | None:
        try:
            return self.engine.decide(alert, parse_ts(alert.starts_at))
        except Unavailable:
            raise  # not decided: the alert waits (drain_until_unreachable)
        except Exception as e:  # recorded as a denial so the alert is accounted for
            log.exception("deciding %s failed", alert.key)
            self.engine.record_error(alert, e)
            return None

    def _spawn(self, row: dict[str, Any]) -> None:
        if row["id"] in self.running or self.stopping:
            return
        self.running.add(row["id"])
        task = asyncio.create_task(self._execute(row))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _execute(self, row: dict[str, Any]) -> None:
        lock = self.locks.setdefault(row["node"], asyncio.Lock())
        try:
            async with lock:
                loop = asyncio.get_running_loop()
                before = await asyncio.to_thread(
                    self.engine.journal.scalar, "SELECT state FROM actions WHERE id=?", (row["id"],)
                )
                state, outcome = await loop.run_in_executor(self.pool, self.executor.run, row)
        finally:
            self.running.discard(row["id"])
        if state in ("waiting", "paused", "deferred") or before in TERMINAL:
            return  # not an outcome yet, or one counted already (a stale row run again)
        m, now = self.engine.metrics, self.engine.clock.now()
        m.actions.labels(self.engine.backend.name, row["action"], state).inc()
        if state == "failed":
            m.failures.labels(row["action"]).inc()
        if state == "done" and row.get("alert_started"):
            m.alert_to_action.labels(row["action"]).observe(max(0.0, now - row["alert_started"]))
        log.info(
            "action %s %s on %s: %s (%s)", row["id"], row["action"], row["node"], state, outcome
        )

    async def idle(self, timeout: float = 30.0) -> None:
        """Wait until every accepted alert is decided and every action finished (tests)."""
        async with asyncio.timeout(timeout):
            while True:
                todo = await asyncio.to_thread(self.engine.journal.todo, 1)
                moving = await asyncio.to_thread(
                    self.engine.journal.scalar,
                    "SELECT COUNT(*) FROM actions WHERE state IN ('pending','waiting')",
                )
                if not todo and not moving and not self.tasks and not self.busy:
                    return
                self.wake.set()
                await asyncio.sleep(0.02)

    async def stop(self) -> None:
        self.stopping = True
        # an action already on a thread takes no further side-effecting step: it is parked
        # (resumable) at the next one instead of running on past the shutdown
        self.executor.stopping = "service stopping"
        if self.main is not None:
            self.main.cancel()
            await asyncio.wait({self.main}, timeout=5)
        for t in list(self.tasks):
            t.cancel()
        if self.tasks:
            await asyncio.wait(list(self.tasks), timeout=5)
        self.pool.shutdown(wait=False, cancel_futures=True)
