"""The HTTP face of remediation: Alertmanager webhook, metrics, health and the /api/v1/ API.

``POST /alertmanager`` authenticates, parses (intake), journals (idempotency key committed
before the 200) and wakes the worker; it never waits for a decision. Bad input always gets a
4xx with a reason and changes nothing. The API takes the same credentials as the webhook.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from aiohttp import web

from remediation.auth import Credentials
from remediation.intake import IntakeError, parse
from remediation.service import Service

MAX_BODY = 1 << 20
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _err(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def _authorized(creds: Credentials | None, request: web.Request) -> bool:
    return creds is None or creds.check(request.headers.get("Authorization"))


class Api:
    def __init__(self, svc: Service) -> None:
        self.svc = svc
        self.pool = ThreadPoolExecutor(2, thread_name_prefix="gpuwarden-health")

    async def webhook(self, request: web.Request) -> web.Response:
        m = self.svc.metrics
        resp = await self._webhook(request)
        m.requests.labels(str(resp.status)).inc()
        return resp

    async def _webhook(self, request: web.Request) -> web.Response:
        m = self.svc.metrics
        if not _authorized(self.svc.credentials, request):
            m.errors.labels("unauthorized").inc()
            return web.json_response(
                {"error": "missing or wrong credentials"},
                status=401,
                headers={"WWW-Authenticate": 'Bearer realm="gpuwarden"'},
            )
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            m.errors.labels("too_large").inc()
            return _err(413, f"body larger than {MAX_BODY} bytes")
        try:
            alerts = parse(body)
        except IntakeError as e:
            m.errors.labels(e.code).inc()
            return _err(400, str(e))
        now = self.svc.clock.now()
        try:
            new, repeated = await asyncio.to_thread(self.svc.journal.accept, alerts, now)
        except sqlite3.OperationalError as e:  # locked: nothing was committed; AM retries
            m.errors.labels("journal_busy").inc()
            return web.json_response(
                {"error": f"journal busy, retry later ({e})"},
                status=503,
                headers={"Retry-After": "5"},
            )
        for a in alerts:
            m.alerts.labels(a.status).inc()
        self.svc.worker.wake.set()
        return web.json_response({"accepted": new, "repeated": repeated})

    async def metrics(self, request: web.Request) -> web.Response:
        with contextlib.suppress(sqlite3.OperationalError):  # stale gauges beat no metrics
            await self._off_loop(self.svc.refresh_gauges)
        return web.Response(
            body=self.svc.metrics.render(), content_type="text/plain", charset="utf-8"
        )

    async def _off_loop(self, fn: Callable[[], Any]) -> Any:
        """Health and metrics on their own threads: a busy worker pool cannot delay them."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, fn)

    async def healthz(self, request: web.Request) -> web.Response:
        problem = await self._off_loop(self.svc.health_problem)
        if problem:
            return _err(503, problem)
        return web.json_response({"status": "ok"})

    async def nodes(self, request: web.Request) -> web.Response:
        rows = await asyncio.to_thread(self.svc.nodes)
        status = await asyncio.to_thread(self.svc.status)
        return web.json_response({"nodes": rows, **status})

    async def placement(self, request: web.Request) -> web.Response:
        """Every de-preferred node or GPU, its tier, evidence and expiry (Unix seconds)."""
        p = self.svc.engine.placement
        rows = await asyncio.to_thread(p.listing) if p is not None else []
        dra = getattr(self.svc.backend, "dra", None)  # GPUs out by DRA device taints
        if dra is not None:
            try:
                rows += await asyncio.to_thread(dra.listing)
            except Exception as e:  # the listing still answers with what it knows
                rows.append({"node": "", "gpu": None, "tier": "unknown", "reason": str(e),
                             "since": None, "until": None, "evidence": {}})  # fmt: skip
        return web.json_response({"nodes": rows})

    async def node(self, request: web.Request) -> web.Response:
        name = request.match_info["node"]
        recs = await asyncio.to_thread(
            self.svc.journal.read, "SELECT * FROM nodes WHERE node=?", (name,)
        )
        rec = recs[0] if recs else None
        hist = await asyncio.to_thread(self.svc.decisions, name, 200)
        evacuation = await asyncio.to_thread(self.svc.evacuation, name)
        if rec is not None:
            rec = {**rec, "evacuation": evacuation}
        return web.json_response({"node": rec, "history": hist, "evacuation": evacuation})

    async def decisions(self, request: web.Request) -> web.Response:
        try:
            limit = max(1, min(10_000, int(request.query.get("limit", "200"))))
        except ValueError:
            return _err(400, "limit must be an integer")
        rows = await asyncio.to_thread(self.svc.decisions, request.query.get("node"), limit)
        return web.json_response({"decisions": rows})

    async def release(self, request: web.Request) -> web.Response:
        name = request.match_info["node"]
        who = request.query.get("who", "api")[:64]
        status, body = await asyncio.to_thread(self.svc.request_release, name, who)
        return web.json_response(body, status=status)

    async def validate(self, request: web.Request) -> web.Response:
        """Run the node's suite now (202 and the run; the tick concludes it), or 409."""
        from remediation.validation.release import ValidationError

        name = request.match_info["node"]
        who = request.query.get("who", "api")[:64]
        try:
            run = await asyncio.to_thread(
                self.svc.validator.start, name, "on_demand", who, request.query.get("suite")
            )
        except ValidationError as e:
            return _err(409, str(e))
        self.svc.worker.wake.set()
        return web.json_response({"validation": run}, status=202)

    async def validations(self, request: web.Request) -> web.Response:
        try:
            limit = max(1, min(10_000, int(request.query.get("limit", "50"))))
        except ValueError:
            return _err(400, "limit must be an integer")
        rows = await asyncio.to_thread(self.svc.validator.list, request.query.get("node"), limit)
        return web.json_response({"validations": rows})

    async def validation(self, request: web.Request) -> web.Response:
        try:
            vid = int(request.match_info["id"])
        except ValueError:
            return _err(400, "validation id must be an integer")
        run = await asyncio.to_thread(self.svc.validator.get, vid)
        return _err(404, f"no validation {vid}") if run is None else web.json_response(run)

    async def pause(self, request: web.Request) -> web.Response:
        paused = request.path.endswith("/pause")
        who = request.query.get("who", "api")[:64]
        await asyncio.to_thread(self.svc.engine.set_paused, paused, who)
        return web.json_response(await asyncio.to_thread(self.svc.status))

    async def breaker_reset(self, request: web.Request) -> web.Response:
        who = request.query.get("who", "api")[:64]
        await asyncio.to_thread(self.svc.engine.reset_breaker, who)
        return web.json_response(await asyncio.to_thread(self.svc.status))


def build_app(svc: Service) -> web.Application:
    api = Api(svc)

    @web.middleware
    async def guard_api(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path.startswith("/api/") and not _authorized(svc.credentials, request):
            return _err(401, "missing or wrong credentials")
        return await handler(request)

    app = web.Application(client_max_size=MAX_BODY, middlewares=[guard_api])
    app.router.add_post("/alertmanager", api.webhook)
    app.router.add_get("/metrics", api.metrics)
    app.router.add_get("/healthz", api.healthz)
    app.router.add_get("/readyz", api.healthz)  # a standby answers 503 here (leader/run.py)
    app.router.add_get("/api/v1/nodes", api.nodes)
    app.router.add_get("/api/v1/nodes/{node}", api.node)
    app.router.add_get("/api/v1/decisions", api.decisions)
    app.router.add_get("/api/v1/placement", api.placement)
    app.router.add_post("/api/v1/nodes/{node}/release", api.release)
    app.router.add_post("/api/v1/nodes/{node}/validate", api.validate)
    app.router.add_get("/api/v1/validations", api.validations)
    app.router.add_get("/api/v1/validations/{id}", api.validation)
    app.router.add_post("/api/v1/pause", api.pause)
    app.router.add_post("/api/v1/resume", api.pause)
    app.router.add_post("/api/v1/breaker/reset", api.breaker_reset)
    if svc.maintenance is not None:
        from remediation.maintenance import http as maintenance_http

        maintenance_http.routes(app, svc.maintenance, svc.worker.wake.set)

    async def lifecycle(app: web.Application) -> Any:
        await svc.worker.start()
        relay = asyncio.create_task(svc.relay.run()) if svc.relay is not None else None
        yield
        if relay is not None:  # a delivery cut short is sent again on the next start
            svc.relay.stopping = True  # type: ignore[union-attr]
            relay.cancel()
            await asyncio.wait({relay}, timeout=5)
        await svc.worker.stop()
        api.pool.shutdown(wait=False)

    app.cleanup_ctx.append(lifecycle)
    return app
