"""Remediation: webhook throughput and receipt-to-decision latency, and alert-to-drain on Slurm.

- alerts/s accepted and decided by the service (dry-run backend, 500-node topology, real
  HTTP on loopback), against a baseline aiohttp handler that only parses the JSON (same run,
  same client, same payloads);
- p50/p99 time from receipt (journaled) to decision, from the journal's own timestamps;
- time from POST /alertmanager to the node showing DRAIN in `sinfo`, on a real slurmctld.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web

from remediation.app import build_app
from remediation.backends.runner import SubprocessRunner
from remediation.clock import SystemClock
from remediation.service import Service
from tests.realcomp import free_port
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, payload, service, topology_file
from tests.slurmcluster import slurm_cluster

BENCH_POLICY = LIVE_POLICY.replace("storm: {max_nodes: 50,", "storm: {max_nodes: 100000,").replace(
    "rate_limit: {max_actions: 100,", "rate_limit: {max_actions: 100000,"
)


def _bodies(n_alerts: int, per_post: int) -> list[bytes]:
    alerts = [
        alert(f"gpu-node-{1 + i % 500:03d}", fp=f"fp{i}", gpu=str(i % 8)) for i in range(n_alerts)
    ]
    return [payload(*alerts[i : i + per_post]) for i in range(0, n_alerts, per_post)]


async def _serve(app: web.Application) -> tuple[web.AppRunner, str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}"


async def _blast(url: str, bodies: list[bytes], concurrency: int = 4) -> float:
    queue = list(bodies)
    t0 = time.perf_counter()
    async with aiohttp.ClientSession(headers=AUTH) as s:

        async def sender() -> None:
            while queue:
                body = queue.pop()
                async with s.post(f"{url}/alertmanager", data=body) as r:
                    assert r.status == 200, r.status

        await asyncio.gather(*(sender() for _ in range(concurrency)))
    return time.perf_counter() - t0


async def _baseline(bodies: list[bytes]) -> float:
    async def handler(request: web.Request) -> web.Response:
        data = json.loads(await request.read())
        return web.json_response({"accepted": len(data["alerts"])})

    app = web.Application(client_max_size=1 << 20)
    app.router.add_post("/alertmanager", handler)
    runner, url = await _serve(app)
    try:
        return await _blast(url, bodies)
    finally:
        await runner.cleanup()


async def _service(tmp: Path, bodies: list[bytes], isolated: int) -> tuple[float, float, Service]:
    svc = service(tmp, BENCH_POLICY, clock=SystemClock(), topology=topology_file(tmp, 500))
    runner, url = await _serve(build_app(svc))
    try:
        t0 = time.perf_counter()
        accept = await _blast(url, bodies)
        await svc.worker.idle(600)
        total = time.perf_counter() - t0
        async with aiohttp.ClientSession(headers=AUTH) as s:
            for i in range(isolated):  # one alert at a time: decision latency without a queue
                body = payload(alert(f"gpu-node-{1 + i % 500:03d}", fp=f"iso{i}"))
                async with s.post(f"{url}/alertmanager", data=body) as r:
                    assert r.status == 200
                await svc.worker.idle(30)
        return accept, total, svc
    finally:
        await runner.cleanup()


def _latencies(svc: Service, prefix: str) -> list[float]:
    rows = svc.journal.rows(
        "SELECT d.at - a.received_at AS dt FROM decisions d JOIN alerts a ON a.key = d.alert_key "
        "WHERE a.fingerprint LIKE ?",
        (prefix + "%",),
    )
    return sorted(r["dt"] for r in rows)


async def _slurm_drain(tmp: Path, reps: int) -> list[float]:
    out = []
    with slurm_cluster(live=1, ghosts=2) as sc:
        svc = service(
            tmp, BENCH_POLICY, clock=SystemClock(), runner=SubprocessRunner(sc.env), backend="slurm"
        )
        runner, url = await _serve(build_app(svc))
        try:
            async with aiohttp.ClientSession(headers=AUTH) as s:
                for i in range(reps):
                    node = sc.ghosts[i % 2]
                    body = payload(alert(node, fp=f"slurm{i}"))
                    t0 = time.perf_counter()
                    async with s.post(f"{url}/alertmanager", data=body) as r:
                        assert r.status == 200
                    while "DRAIN" not in sc.node_state(node)["flags"]:  # type: ignore[operator]
                        await asyncio.sleep(0.005)
                        if time.perf_counter() - t0 > 30:
                            raise TimeoutError("drain not visible in 30 s")
                    out.append(time.perf_counter() - t0)
                    await svc.worker.idle(30)
                    svc.engine.release(node, manual=True, who="bench")
        finally:
            await runner.cleanup()
            svc.journal.close()
    return out


def _ms(v: float) -> float:
    return round(v * 1000, 2)


async def _run(quick: bool) -> list[dict[str, Any]]:
    n = 600 if quick else 3000
    bodies = _bodies(n, 20)
    with tempfile.TemporaryDirectory() as d:
        base = await _baseline(bodies)
        accept, total, svc = await _service(Path(d), bodies, 20 if quick else 100)
        lat, iso = _latencies(svc, "fp"), _latencies(svc, "iso")
        decided = len(lat)
        svc.journal.close()
    with tempfile.TemporaryDirectory() as d:
        drains = await _slurm_drain(Path(d), 3 if quick else 10)
    note = f"{n} alerts in webhooks of 20, 4 concurrent senders, 500-node topology"
    return [
        {
            "name": "baseline_parse_only_alerts_per_s",
            "value": n / base,
            "unit": "alerts/s",
            "note": "aiohttp handler that only parses the JSON",
        },
        {
            "name": "webhook_accepted_alerts_per_s",
            "value": n / accept,
            "unit": "alerts/s",
            "note": f"journaled (idempotency key committed) before 200; {note}",
        },
        {
            "name": "webhook_accept_vs_baseline",
            "value": accept / base,
            "unit": "x time",
            "note": "accept path time / parse-only handler time (same payloads, same client)",
        },
        {
            "name": "accepted_and_decided_alerts_per_s",
            "value": n / total,
            "unit": "alerts/s",
            "note": f"until every alert has a decision ({decided} decisions), dry-run backend",
        },
        {
            "name": "receipt_to_decision_p50",
            "value": _ms(statistics.median(lat)),
            "unit": "ms",
            "note": "journal timestamps; includes queueing behind the burst",
        },
        {
            "name": "receipt_to_decision_p99",
            "value": _ms(lat[int(0.99 * (len(lat) - 1))]),
            "unit": "ms",
            "note": "journal timestamps; includes queueing behind the burst",
        },
        {
            "name": "isolated_receipt_to_decision_p50",
            "value": _ms(statistics.median(iso)),
            "unit": "ms",
            "note": f"{len(iso)} alerts one at a time (no queue)",
        },
        {
            "name": "isolated_receipt_to_decision_p99",
            "value": _ms(iso[int(0.99 * (len(iso) - 1))]),
            "unit": "ms",
            "note": "same",
        },
        {
            "name": "alert_to_slurm_drain_p50",
            "value": _ms(statistics.median(drains)),
            "unit": "ms",
            "note": f"POST -> DRAIN visible in sinfo, real slurmctld, {len(drains)} runs",
        },
        {
            "name": "alert_to_slurm_drain_max",
            "value": _ms(max(drains)),
            "unit": "ms",
            "note": "same runs",
        },
    ]


def run(quick: bool) -> list[dict[str, Any]]:
    return asyncio.run(_run(quick))
