"""Worker processes of ``gpuwarden simulate --workers N``: their command lines, start-up
wait, and the forwarding of injections to them.

Sits beside :mod:`simulator.cli`. Every worker builds the same fleet from the same
seed, scenario and epoch and steps the same time grid, so only injections need carrying
over: the first worker checks and applies one, then posts it with its onset to the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import subprocess
import sys
from typing import Any

import aiohttp

from exporter.settings import parse_listen
from simulator.server import FORWARDED, Forward

log = logging.getLogger("gpuwarden.simulate")


def worker_argv(s: Any, i: int) -> list[str]:
    """The command line of worker ``i``: the same fleet, its own port, no file_sd."""
    host, port = parse_listen(s.listen)
    argv = [sys.executable, "-m", "gpuwarden", "simulate", "--listen", f"{host}:{port + i}",
            "--shard", str(i), "--epoch", repr(s.epoch), "--log-level", "warning"]  # fmt: skip
    for name in ("nodes", "seed", "scenario", "compat", "time_scale", "tick", "nodes_per_leaf",
                 "sku", "skus", "power_caps", "signals", "duration", "workers", "max_staleness",
                 "telemetry", "dme_prefix"):  # fmt: skip
        value = getattr(s, name, None)
        if value is not None and value != "":
            argv += [f"--{name.replace('_', '-')}", str(value)]
    return argv


def start(s: Any) -> list[subprocess.Popen[bytes]]:
    """Start workers 1..N-1 (this process is worker 0)."""
    return [subprocess.Popen(worker_argv(s, i)) for i in range(1, s.workers)]


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:  # busy rendering a backlog: stop it hard
            p.kill()
            p.wait(10)


def forwarder(s: Any) -> Forward | None:
    """POST an applied injection (with its onset) to every other worker."""
    if s.workers == 1:
        return None
    host, port = parse_listen(s.listen)
    urls = [f"http://{host}:{port + i}/inject" for i in range(1, s.workers)]

    async def forward(payload: dict[str, Any]) -> None:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
            for url in urls:
                try:
                    async with http.post(url, json=payload, headers={FORWARDED: "1"}) as r:
                        if r.status != 201:
                            log.error("worker %s refused an injection: %s", url, await r.text())
                except aiohttp.ClientError as e:
                    log.error("worker %s unreachable for an injection: %s", url, e)

    return forward


async def wait_healthy(urls: list[str], timeout: float = 60.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as http:
        for url in urls:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(url) as r:
                        if r.status == 200:
                            break
                if asyncio.get_running_loop().time() > deadline:
                    raise TimeoutError(f"worker {url} did not start")
                await asyncio.sleep(0.1)
