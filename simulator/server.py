"""HTTP for the simulated fleet (``gpuwarden simulate``): per-node metrics, truth, injection.

Sits at the edge: every route is a thin call into :class:`~simulator.simulator.Simulator`.
``GET /nodes/<node>/metrics`` (the node's exporter output; 404 unknown node, 503 rebooting),
``GET /nodes``, ``GET /truth``, ``POST /inject`` (400 with a one-line reason, nothing
changed, on any bad input), ``GET /healthz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from aiohttp import web

from exporter.exposition import CONTENT_TYPE
from simulator.faults import FaultError
from simulator.simulator import NodeDown, Simulator

log = logging.getLogger("gpuwarden.simulate")
Forward = Callable[[dict[str, Any]], Awaitable[None]]
SIM: web.AppKey[Simulator] = web.AppKey("simulator", Simulator)
FORWARD: web.AppKey[Forward | None] = web.AppKey("forward", object)  # type: ignore[arg-type]
FORWARDED = "X-Gpuwarden-Forwarded"  # an injection another worker already checked and applied


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, indent=1))


async def node_metrics(request: web.Request) -> web.Response:
    node = request.match_info["node"]
    try:
        body = request.app[SIM].metrics(node)
    except KeyError:
        raise web.HTTPNotFound(
            text=f"unknown node {node!r} (or served by another worker)\n"
        ) from None
    except NodeDown:
        raise web.HTTPServiceUnavailable(text=f"node {node} is rebooting\n") from None
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


async def inject(request: web.Request) -> web.Response:
    try:
        payload = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return _json({"error": "body is not valid JSON"}, 400)
    sim, forwarded = request.app[SIM], FORWARDED in request.headers
    try:
        fault = sim.inject(payload, lead_ticks=2 if sim.shard[1] > 1 else 1, late_ok=forwarded)
    except FaultError as e:
        return _json({"error": str(e)}, 400)
    forward = request.app[FORWARD]
    if forward is not None and not forwarded:  # the other workers step the same fleet
        await forward({**payload, "onset": fault.onset})
    return _json(fault.to_json(sim.fleet.topo), 201)


async def truth(request: web.Request) -> web.Response:
    return _json(request.app[SIM].truth())


async def nodes(request: web.Request) -> web.Response:
    return _json(request.app[SIM].nodes())


async def healthz(request: web.Request) -> web.Response:
    sim = request.app[SIM]
    sim.sync()
    return web.Response(text=f"ok: {len(sim.fleet.nodes)} nodes, t={sim.fleet.t:.1f}s\n")


async def _keep_stepping(app: web.Application) -> AsyncIterator[None]:
    """Step the model every tick even when nobody scrapes, so workers stay in lockstep."""
    sim = app[SIM]

    async def loop() -> None:
        while True:
            sim.sync()
            await asyncio.sleep(sim.tick_s)

    task = asyncio.create_task(loop())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def make_app(sim: Simulator, forward: Forward | None = None) -> web.Application:
    app = web.Application()
    app[SIM] = sim
    app[FORWARD] = forward
    app.cleanup_ctx.append(_keep_stepping)
    app.router.add_get("/nodes/{node}/metrics", node_metrics)
    app.router.add_get("/nodes", nodes)
    app.router.add_get("/truth", truth)
    app.router.add_post("/inject", inject)
    app.router.add_get("/healthz", healthz)
    return app
