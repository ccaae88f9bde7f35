"""``/api/v1/maintenance``: plan (a dry run: the waves, nothing changes), start, list, show,
pause, resume, abort, and the operator's call on a stuck node (skip or force). Same
credentials as the rest of ``/api/v1/`` (the app's middleware). Bad input: 400 with the
reason, nothing recorded; a run that cannot take the verb: 409.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import asdict
from typing import Any

from aiohttp import web

from remediation.maintenance import machine
from remediation.maintenance.model import Run, SpecError
from remediation.maintenance.runner import Maintenance


def _err(status: int, reason: str) -> web.Response:
    return web.json_response({"error": reason}, status=status)


def public(run: Run, now: float) -> dict[str, Any]:
    done, eta = machine.progress(run, now)
    counts: dict[str, int] = {}
    for n in run.nodes:
        counts[n.state] = counts.get(n.state, 0) + 1
    return {
        "id": run.id,
        "state": run.state,
        "reason": run.reason,
        "who": run.who,
        "created_at": run.created_at,
        "progress": round(done, 4),
        "eta_s": eta,
        "counts": counts,
        "spec": asdict(run.spec),
        "nodes": [
            {
                "node": n.node,
                "wave": n.wave,
                "state": n.state,
                "since": n.since,
                "reason": n.reason,
                "jobs_signalled": list(n.signalled),
                "jobs_requeued": list(n.requeued),
            }
            for n in run.nodes
        ],
    }


class MaintenanceApi:
    def __init__(self, m: Maintenance, wake: Any) -> None:
        self.m, self.wake = m, wake

    async def _body(self, request: web.Request) -> Any:
        try:
            return json.loads(await request.read() or b"{}")
        except ValueError as e:
            raise SpecError(f"body is not JSON: {e}") from None

    async def plan(self, request: web.Request) -> web.Response:
        try:
            spec, waves, room = await asyncio.to_thread(self.m.plan, await self._body(request))
        except SpecError as e:
            return _err(400, str(e))
        return web.json_response({"dry_run": True, "spec": asdict(spec),
                                  "waves": [list(w) for w in waves], **room})  # fmt: skip

    async def start(self, request: web.Request) -> web.Response:
        who = request.query.get("who", "api")[:64]
        try:
            run = await asyncio.to_thread(self.m.start, await self._body(request), who)
        except SpecError as e:
            return _err(400, str(e))
        self.wake()
        return web.json_response(public(run, self.m.clock()), status=201)

    async def list(self, request: web.Request) -> web.Response:
        runs = await asyncio.to_thread(self.m.runs)
        now = self.m.clock()
        return web.json_response({"runs": [public(r, now) for r in runs]})

    def _id(self, request: web.Request) -> int:
        try:
            return int(request.match_info["id"])
        except ValueError:
            raise SpecError("run id must be an integer") from None

    async def show(self, request: web.Request) -> web.Response:
        try:
            run = await asyncio.to_thread(self.m.get, self._id(request))
        except SpecError as e:
            return _err(400, str(e))
        if run is None:
            return _err(404, f"no maintenance run {request.match_info['id']}")
        return web.json_response(public(run, self.m.clock()))

    async def verb(self, request: web.Request) -> web.Response:
        who = request.query.get("who", "api")[:64]
        verb = request.match_info["verb"]
        try:
            rid = self._id(request)
            if verb in ("skip", "force"):
                node = request.query.get("node", "")
                run = await asyncio.to_thread(self.m.decide, rid, node, verb, who)
            else:
                run = await asyncio.to_thread(self.m.set_state, rid, verb, who)
        except SpecError as e:
            return _err(400, str(e))
        except LookupError as e:
            return _err(404, str(e))
        except ValueError as e:
            return _err(409, str(e))
        self.wake()
        return web.json_response(public(run, self.m.clock()))


def routes(app: web.Application, m: Maintenance, wake: Any) -> None:
    api = MaintenanceApi(m, wake)
    app.router.add_post("/api/v1/maintenance/plan", api.plan)
    app.router.add_post("/api/v1/maintenance", api.start)
    app.router.add_get("/api/v1/maintenance", api.list)
    app.router.add_get("/api/v1/maintenance/{id}", api.show)
    app.router.add_post("/api/v1/maintenance/{id}/{verb:pause|resume|abort|skip|force}", api.verb)
