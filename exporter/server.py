"""The exporter's HTTP edge: /metrics serves the last snapshot, /healthz its freshness.

A scrape never waits on collection: it returns the bytes the loop rendered last (gzip when
the scraper asks for it). TLS and basic auth come from the exporter-toolkit web config.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

from exporter.collection import CollectionLoop
from exporter.exposition import CONTENT_TYPE
from exporter.webconfig import WebConfig

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

_LANDING = b"""<html><head><title>gpuwarden exporter</title></head><body>
<h1>gpuwarden exporter</h1><p><a href="/metrics">metrics</a> &middot;
<a href="/healthz">healthz</a></p></body></html>
"""


def make_app(
    loop: CollectionLoop, stale_after: float, web_config: WebConfig | None = None
) -> web.Application:
    wc = web_config or WebConfig()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        # /healthz stays open for liveness probes (it says only whether collection is fresh).
        if (
            request.path != "/healthz"
            and wc.auth_required
            and not wc.check_authorization(request.headers.get("Authorization"))
        ):
            return web.Response(
                status=401,
                text="Unauthorized\n",
                headers={"WWW-Authenticate": 'Basic realm="gpuwarden"'},
            )
        return await handler(request)

    async def metrics(request: web.Request) -> web.Response:
        snap = loop.snapshot
        if "gzip" in request.headers.get("Accept-Encoding", ""):
            return web.Response(
                body=snap.gzipped(),
                headers={"Content-Type": CONTENT_TYPE, "Content-Encoding": "gzip"},
            )
        return web.Response(body=snap.body, headers={"Content-Type": CONTENT_TYPE})

    async def healthz(request: web.Request) -> web.Response:
        ok, reason = loop.health(stale_after)
        return web.Response(status=200 if ok else 503, text=reason + "\n")

    async def landing(request: web.Request) -> web.Response:
        return web.Response(body=_LANDING, content_type="text/html")

    app = web.Application(middlewares=[auth])
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/", landing)
    return app
