"""Exporter cost for one simulated 8-GPU node with every collector on.

- scrape latency of /metrics (p50/p99) against, in the same run and with the same series:
  a plain prometheus_client registry of static gauges (goal: no slower) and a server that
  returns a pre-rendered byte string (the floor; goal: within 2x);
- CPU per collection cycle (in process);
- RSS of the exporter process after 1k, 5k and 10k scrapes (goal: < 80 MiB, not growing).
"""

from __future__ import annotations

import http.client
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.realcomp import free_port, wait_until

_BASELINE_CLIENT = textwrap.dedent(
    """
    import sys, time
    from prometheus_client import CollectorRegistry, Gauge, start_http_server
    from prometheus_client.parser import text_string_to_metric_families
    text = open(sys.argv[2]).read()
    reg = CollectorRegistry()
    for fam in text_string_to_metric_families(text):
        if not fam.samples:
            continue
        names = sorted({k for s in fam.samples for k in s.labels})
        g = Gauge(fam.name.replace("_total", "_t"), fam.documentation or "x", names,
                  registry=reg)
        for s in fam.samples:
            (g.labels(**{k: s.labels.get(k, "") for k in names}) if names else g).set(s.value)
    start_http_server(int(sys.argv[1]), addr="127.0.0.1", registry=reg)
    while True:
        time.sleep(60)
    """
)
_FLOOR = textwrap.dedent(
    """
    import sys
    from aiohttp import web
    body = open(sys.argv[2], "rb").read()
    async def h(request):
        return web.Response(body=body, content_type="text/plain")
    app = web.Application()
    app.router.add_get("/metrics", h)
    web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None, access_log=None)
    """
)


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _scrape_latencies(port: int, n: int) -> list[float]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        conn.request("GET", "/metrics")
        resp = conn.getresponse()
        resp.read()
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


def _start(cmd: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _scrape_latencies(port, 1), 30, 0.1, f"server on {port}")
    return proc


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


def _cycle_cpu(cycles: int) -> tuple[float, int]:
    from exporter.assemble import assemble
    from exporter.collection import CollectionLoop
    from exporter.settings import ExporterSettings

    asm = assemble(ExporterSettings(source="simulated", node="bench-node"))
    loop = CollectionLoop(
        asm.collectors, "bench-node", source="simulated", interval=1, before_cycle=asm.before_cycle
    )
    loop.run_once()
    t0 = time.process_time()
    for _ in range(cycles):
        snap = loop.run_once()
    return (time.process_time() - t0) / cycles, snap.series


def run(quick: bool = False) -> list[dict[str, Any]]:
    n_lat = 300 if quick else 2000
    n_rss = 2000 if quick else 10000
    rows: list[dict[str, Any]] = []
    cpu, series = _cycle_cpu(20 if quick else 100)
    rows.append(
        {
            "name": "series per node",
            "value": series,
            "unit": "series",
            "note": "8 GPUs x 18 NVLinks, 8 IB ports, all collectors",
        }
    )
    rows.append(
        {
            "name": "CPU per collection cycle",
            "value": cpu * 1000,
            "unit": "ms",
            "note": "process CPU time, simulated source",
        }
    )
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        ours = _start(
            [
                sys.executable,
                "-m",
                "exporter",
                "--source",
                "simulated",
                "--node",
                "bench-node",
                "--listen",
                f"127.0.0.1:{port}",  # default 5 s collection interval
            ],
            port,
        )
        procs.append(ours)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
        d = Path(tempfile.mkdtemp(prefix="gpuwarden-bench-"))
        (d / "metrics.txt").write_bytes(body)
        ports = {"prometheus_client": free_port(), "pre-rendered floor": free_port()}
        for name, code in (("prometheus_client", _BASELINE_CLIENT), ("pre-rendered floor", _FLOOR)):
            procs.append(
                _start(
                    [sys.executable, "-c", code, str(ports[name]), str(d / "metrics.txt")],
                    ports[name],
                )
            )
        lat = {"gpuwarden": _scrape_latencies(port, n_lat)}
        for name, p in ports.items():
            lat[name] = _scrape_latencies(p, n_lat)
        for name, xs in lat.items():
            rows.append(
                {
                    "name": f"scrape p50 {name}",
                    "value": _pct(xs, 0.5),
                    "unit": "ms",
                    "note": f"{n_lat} scrapes, {len(body)} bytes",
                }
            )
            rows.append(
                {"name": f"scrape p99 {name}", "value": _pct(xs, 0.99), "unit": "ms", "note": ""}
            )
        ours_p50 = statistics.median(lat["gpuwarden"])
        rows.append(
            {
                "name": "ratio vs prometheus_client (p50)",
                "value": ours_p50 / statistics.median(lat["prometheus_client"]),
                "unit": "x",
                "note": "goal <= 1",
            }
        )
        rows.append(
            {
                "name": "ratio vs pre-rendered floor (p50)",
                "value": ours_p50 / statistics.median(lat["pre-rendered floor"]),
                "unit": "x",
                "note": "goal <= 2",
            }
        )
        rows += _rss_rows(ours.pid, port, n_rss)
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    return rows


def _rss_rows(pid: int, port: int, n: int) -> list[dict[str, Any]]:
    rows = []
    marks = sorted({n // 10, n // 2, n})
    done = 0
    for mark in marks:
        _scrape_latencies(port, mark - done)
        done = mark
        rows.append(
            {
                "name": f"exporter RSS after {mark} scrapes",
                "value": _rss_mib(pid),
                "unit": "MiB",
                "note": "goal < 80 MiB and flat",
            }
        )
    return rows
