"""Remediation's warm standby (remediation/leader): how long after its leader stops does a
standby act? Real processes (``python -m remediation``, dry-run backend) at the default
timings (a 15 s lease, a 10 s renew deadline, a 2 s retry), electing through a lease file
in a directory: a first start, then rounds of a leader killed with SIGKILL (the standby
waits out the lease) and stopped with SIGTERM (it releases the lease). A standby "acts" once
its ``/readyz`` answers 200 (polled every 50 ms). Ratios are against the lease term."""

from __future__ import annotations

import signal
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from gpuwarden.processes import wait_until
from remediation.settings import Settings
from tests.realcomp import free_port
from tests.remediation.helpers import LIVE_POLICY, get_status, start_service

LEASE_S = Settings().leader_lease_s  # the default term the instances run with


def _acting(port: int, limit: float = 60.0) -> float:
    """Seconds until the instance on ``port`` acts."""
    t0 = time.monotonic()
    url = f"http://127.0.0.1:{port}/readyz"
    wait_until(
        lambda: get_status(url, timeout=2) == 200, limit, 0.05, f"an instance acting on {port}"
    )
    return time.monotonic() - t0


def measure(rounds: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-standby-"))
    (tmp / "policy.yaml").write_text(LIVE_POLICY.replace("dry_run: false", "dry_run: true"))
    lease = tmp / "lease"
    lease.mkdir()
    flags = ["--leader-elect", "directory", "--leader-dir", str(lease)]
    procs: list[subprocess.Popen[bytes]] = []

    def start() -> int:
        port = free_port()
        procs.append(start_service(tmp, port, None, *flags))
        return port

    kills: list[float] = []
    terms: list[float] = []
    try:
        leader = start()
        first = _acting(leader)
        for _ in range(rounds):
            for how, out in ((signal.SIGKILL, kills), (signal.SIGTERM, terms)):
                standby = start()
                time.sleep(3)  # it has read the lease a few times
                old = procs[-2]
                old.send_signal(how)
                t0 = time.monotonic()
                _acting(standby)
                out.append(time.monotonic() - t0)
                old.wait(30)
                leader = standby
    finally:
        for p in procs:
            p.kill()
            p.wait(10)
    return {"first": first, "kill": kills, "term": terms}


def run(quick: bool) -> list[dict[str, Any]]:
    m = measure(1 if quick else 3)
    kill, term = m["kill"], m["term"]
    each = ", ".join(f"{x:.2f}" for x in kill)
    return [
        {"name": "standby_first_start_acts_after", "value": round(m["first"], 2), "unit": "s",
         "note": f"{m['first'] / LEASE_S:.2f}x the lease: a missing lease waits one term"},
        {"name": "standby_acts_after_leader_kill9", "value": round(statistics.median(kill), 2),
         "unit": "s", "note": f"median of {len(kill)} ({each}); "
         f"{statistics.median(kill) / LEASE_S:.2f}x the lease"},
        {"name": "standby_acts_after_leader_sigterm", "value": round(statistics.median(term), 2),
         "unit": "s", "note": f"median of {len(term)} ({', '.join(f'{x:.2f}' for x in term)}); "
         f"{statistics.median(term) / LEASE_S:.2f}x the lease: released, no term to wait"},
    ]  # fmt: skip
