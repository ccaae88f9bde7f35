"""The analyzer service: a timed loop (source -> engine -> outputs) behind a small HTTP API.

Edge of the analyzer: serves ``GET /metrics`` (findings + self-metrics), ``GET /findings``
(JSON), ``GET /healthz``; optionally posts findings to Alertmanager's v2 API each cycle.
Clock and HTTP clients are injected; a failing source or Alertmanager is counted and the
loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from analyzer.engine import Engine
from analyzer.output import alertmanager_alerts, findings_json, render_metrics
from analyzer.replicas.membership import Plan
from analyzer.replicas.role import ReplicaRole
from analyzer.sources import SeriesSource
from analyzer.sources.dialects import coverage
from analyzer.window import Window

log = logging.getLogger(__name__)


class AnalyzerService:
    def __init__(
        self,
        source: SeriesSource,
        engine: Engine,
        interval: float,
        alertmanager: str = "",
        clock: Callable[[], float] = time.time,
        replica: ReplicaRole | None = None,
    ) -> None:
        """``replica``: the sharded mode (:mod:`analyzer.replicas`): judge only the units
        this replica owns under each cycle's plan."""
        self.source, self.engine, self.interval = source, engine, interval
        self.replica = replica
        self.alertmanager = alertmanager.rstrip("/")
        self.clock = clock
        self.source_errors: dict[str, int] = {source.name: 0}
        self.last_ok: float | None = None
        self.last_error = ""
        self.missing: tuple[str, ...] = ()  # what the last cycle could not read
        self.window: Window | None = None  # the last cycle's (for /coverage)
        self._session: ClientSession | None = None

    async def run_cycle(self, at: float | None = None, plan: Plan | None = None) -> None:
        """One cycle at ``at`` (a past moment, for ``--at`` / ``--replay``) or now; with
        ``plan`` (sharded mode), judging only this replica's units under it."""
        now = self.clock() if at is None else at
        sharded = self.replica is not None and plan is not None
        if hasattr(self.source, "scope"):  # a source that can read only this replica's nodes
            role = self.replica
            self.source.scope = (
                functools.partial(role.owned, plan=plan) if role is not None and plan else None
            )
            if hasattr(self.source, "share"):  # the leader's topology, read once for all
                self.source.share = role.sharing(plan) if role is not None and plan else None
        try:
            window = await self.source.read(now)
        except Exception as e:  # a source failure costs a count, never the loop
            self.source_errors[self.source.name] = self.source_errors.get(self.source.name, 0) + 1
            self.last_error = f"{type(e).__name__}: {e}"
            log.warning("source %s failed: %s", self.source.name, self.last_error)
            return
        if sharded:
            assert self.replica is not None and plan is not None
            findings = await asyncio.to_thread(self.replica.judge, self.engine, window, plan)
        else:
            findings = await asyncio.to_thread(self.engine.cycle, window)
        self.window = window
        self.missing = window.missing
        if window.missing:
            self.last_error = "degraded cycle, missing: " + ", ".join(window.missing)
            log.warning("%s", self.last_error)
        self.last_ok = now
        if self.alertmanager:
            await self._push(findings, now)

    async def _push(self, findings: list[Any], now: float) -> None:
        body = alertmanager_alerts(findings, now, resolve_after=3 * self.interval)
        if not body:
            return
        try:
            if self._session is None:
                self._session = ClientSession(timeout=ClientTimeout(total=5))
            async with self._session.post(f"{self.alertmanager}/api/v2/alerts", json=body) as r:
                if r.status >= 300:
                    raise RuntimeError(f"HTTP {r.status}")
        except Exception as e:
            self.source_errors["alertmanager"] = self.source_errors.get("alertmanager", 0) + 1
            log.warning("alertmanager push failed: %s", e)

    async def loop(self) -> None:
        if self.replica is not None:
            return await self._replica_loop(self.replica)
        while True:
            started = self.clock()
            await self.run_cycle()
            await asyncio.sleep(max(0.0, self.interval - (self.clock() - started)))

    async def _replica_loop(self, role: ReplicaRole) -> None:
        """Ask the coordinator often; judge a cycle as soon as its plan is known."""
        try:
            while True:
                now = self.clock()
                try:
                    plan = await asyncio.to_thread(role.turn, now)
                except Exception as e:  # the membership store is unreachable: no plan
                    self.source_errors["membership"] = self.source_errors.get("membership", 0) + 1
                    log.warning("membership: %s: %s", type(e).__name__, e)
                    plan = None
                if plan is not None:
                    await self.run_cycle(now, plan)
                await asyncio.sleep(role.poll)
        finally:
            with contextlib.suppress(Exception):
                await asyncio.to_thread(role.leave)  # hand the units over at once

    # ------------------------------------------------------------------ HTTP
    async def metrics(self, _: web.Request) -> web.Response:
        text = render_metrics(
            self.engine.findings,
            self.engine.stats,
            self.source_errors,
            getattr(self.source, "stats", None),
            self.replica.stats if self.replica is not None else None,
        )
        return web.Response(text=text, content_type="text/plain", charset="utf-8")

    async def findings(self, _: web.Request) -> web.Response:
        return web.json_response(findings_json(self.engine.findings, self.clock(), self.missing))

    async def healthz(self, _: web.Request) -> web.Response:
        if self.last_ok is None:
            return web.Response(status=503, text=f"no cycle completed yet {self.last_error}\n")
        age = self.clock() - self.last_ok
        if age > 3 * self.interval:
            return web.Response(
                status=503, text=f"last good cycle {age:.0f}s ago: {self.last_error}\n"
            )
        return web.Response(text="ok\n")

    def coverage(self) -> dict[str, Any]:
        """What each detector can judge per node group in the last cycle's window."""
        if self.window is None:
            return {"groups": [], "error": f"no cycle completed yet {self.last_error}".strip()}
        rep = coverage.report(self.window)
        found = getattr(self.source, "found", None)
        if found is not None:
            rep["dialects"] = list(found.dialects)
            rep["dcgm_generations"] = list(found.generations)
        return rep

    async def coverage_page(self, request: web.Request) -> web.Response:
        rep = self.coverage()
        if "json" in request.headers.get("Accept", "") or request.query.get("format") == "json":
            return web.json_response(rep)
        return web.Response(text=coverage.text(rep), content_type="text/plain", charset="utf-8")

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self.metrics)
        app.router.add_get("/findings", self.findings)
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/coverage", self.coverage_page)
        app.cleanup_ctx.append(self._background)
        return app

    async def _background(self, _: web.Application) -> Any:
        task = asyncio.create_task(self.loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        close = getattr(self.source, "close", None)
        if close is not None:
            await close()
        if self._session is not None:
            await self._session.close()
