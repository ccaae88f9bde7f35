"""The service's side of the election: build the lease from settings, wait as a standby
(serving ``/healthz`` only), and end the process when leadership is lost."""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import signal
import socket
import threading
import time
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Gauge, generate_latest

from exporter import catalog as c
from remediation.leader.elector import Elector, LeaseStore
from remediation.leader.keeper import Keeper
from remediation.settings import Settings

log = logging.getLogger("gpuwarden.remediation.leader")
SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
LOST_EXIT = 75  # EX_TEMPFAIL: systemd and the kubelet restart it, and it waits as a standby
DRAIN_S = 15.0  # a stopped leader waits this long for its last steps (the pod's grace is 30 s)


def identity(s: Settings) -> str:
    """``--leader-identity``, else host, pid and a random tag: never shared by two processes,
    so a restarted instance waits out its predecessor's term like any other."""
    return s.leader_identity or f"{socket.gethostname()}_{os.getpid()}_{secrets.token_hex(3)}"


def namespace(s: Settings) -> str:
    if s.leader_namespace:
        return s.leader_namespace
    try:
        return SA_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


def store(s: Settings) -> LeaseStore:
    if s.leader_elect == "kubernetes":
        from remediation.leader.kube import KubeLeaseStore

        # a renewal is two calls, and one slow call must not cost the whole deadline
        timeout = min(s.command_timeout_s, s.leader_renew_deadline_s / 4)
        return KubeLeaseStore.from_config(namespace(s), s.leader_lease_name, timeout=timeout)
    from remediation.leader.directory import DirectoryLeaseStore

    assert s.leader_dir is not None  # Settings checks it
    return DirectoryLeaseStore(s.leader_dir)


def die(reason: str) -> None:
    """Fail-stop: no acting instance may outlive its lease (remediation.leader.keeper). The
    line is logged if it can be within half a second; the exit does not wait for it."""
    threading.Timer(0.5, os._exit, (LOST_EXIT,)).start()
    try:
        log.critical("%s: exiting now (exit %d); the restart waits as a standby", reason,
                     LOST_EXIT)  # fmt: skip
        _flush_logs()
    finally:
        os._exit(LOST_EXIT)


def hand_over(k: Keeper, drain_s: float = DRAIN_S) -> None:
    """After the service has stopped: wait, still renewing, for the threads that run its
    last steps (a cancelled task leaves its thread running a backend call), then release the
    lease so a standby takes over at once. Threads still running after ``drain_s``: exit
    without releasing, so they die with the process and the lease simply runs out."""
    me = threading.current_thread()
    deadline = time.monotonic() + drain_s
    for t in threading.enumerate():
        if t is not me and not t.daemon:
            t.join(max(0.0, deadline - time.monotonic()))
    busy = sorted(t.name for t in threading.enumerate()
                  if t is not me and not t.daemon and t.is_alive())  # fmt: skip
    if not busy:
        k.stop(release=True)
        return
    k.stop(release=False)
    log.warning("threads still running %.0f s after the stop (%s): exiting without releasing "
                "the leader lease; it expires by itself", drain_s, ", ".join(busy))  # fmt: skip
    _flush_logs()
    os._exit(0)


def _flush_logs() -> None:
    """Before an ``os._exit``, which skips logging's own flush at exit."""
    for h in logging.getLogger().handlers:
        h.flush()


def keeper(s: Settings, lease: LeaseStore | None = None) -> Keeper:
    e = Elector(lease or store(s), identity(s), s.leader_lease_s, s.leader_renew_deadline_s)
    return Keeper(e, s.leader_retry_s, die)


def standby_app(k: Keeper) -> web.Application:
    """What a standby answers: alive on ``/healthz``, not ready on ``/readyz``, 503 with the
    holder's name everywhere else (Alertmanager retries a webhook on 503), and
    ``gpuwarden_remediation_leader 0`` on ``/metrics``."""
    reg = CollectorRegistry()
    d = c.REMEDIATION_LEADER
    Gauge(d.name, d.help, list(d.labels), registry=reg).set(0)

    def holder() -> str:
        return k.elector.holder or "nobody yet"

    async def healthz(request: web.Request) -> web.Response:
        return web.json_response({"status": "standby", "leader": holder()})

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(reg), content_type="text/plain")

    async def refuse(request: web.Request) -> web.Response:
        return web.json_response(
            {"error": f"standby: this instance does not hold the leader lease; {holder()} does"},
            status=503,
        )

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", refuse)
    return app


def wait_as_standby(s: Settings, k: Keeper, ssl_context: Any = None) -> bool:
    """Serve :func:`standby_app` on ``--listen`` until this instance holds the lease (True),
    or SIGTERM/SIGINT (False)."""

    async def main() -> bool:
        runner = web.AppRunner(standby_app(k), access_log=None)
        await runner.setup()
        host, port = s.host_port
        await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
        stop = threading.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            return await asyncio.to_thread(k.acquire, stop)
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.remove_signal_handler(sig)
            await runner.cleanup()

    return asyncio.run(main())
