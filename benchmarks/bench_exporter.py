"""Exporter cost for one simulated 8-GPU, 8-port node with every collector on.

- CPU per collection cycle (in process), and the InfiniBand part of it against Debian's
  node_exporter (``prometheus-node-exporter``, infiniband collector only) reading the *same*
  sysfs tree on disk: batches of node_exporter scrapes and of our collections interleave, so
  load from other work hits both alike; node_exporter's CPU comes from /proc/<pid>/stat.
  Goal: one of our collections costs at most one node_exporter scrape.
- rendering against rendering: the same samples through our renderer and through
  prometheus_client's text writer (``generate_latest`` over pre-built families);
- scrape latency of /metrics (p50/p99) against a server returning a pre-rendered byte string
  (the floor; goal: within 2x);
- RSS of the exporter process after 1k, 5k and 10k scrapes (goal: <= 40 MiB, flat), for the
  simulated source (which also loads the simulator) and for the nvml source (the node agent as
  deployed; without a driver its GPU collector fails each cycle, so GPU series are absent).
"""

from __future__ import annotations

import http.client
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from benchmarks.procstat import cpu_seconds
from tests.realcomp import free_port, wait_until

NODE_EXPORTER = "prometheus-node-exporter"
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
# The node agent as deployed on an 8-GPU, 8-HCA node, without the simulator package: the NVML
# fake is loaded from its file (importing it as simulator.nvml_fake would load the fleet model
# and numpy), the IB tree is the simulated node's, written to disk.
_FAKE_NODE = textwrap.dedent(
    """
    import importlib.util, sys
    spec = importlib.util.spec_from_file_location("nvml_fake", sys.argv[3])
    fake = importlib.util.module_from_spec(spec)
    sys.modules["nvml_fake"] = fake
    spec.loader.exec_module(fake)
    from exporter.assemble import collectors_for
    from exporter.collection import CollectionLoop
    from exporter.server import MetricsServer
    from exporter.sources.kmsg import ListKernelLog
    from exporter.sources.sysfs import DirSysfs
    cols = collectors_for("bench-node", fake.hgx_node("h100", seed="bench"),
                          DirSysfs(sys.argv[2]), ListKernelLog())
    loop = CollectionLoop(cols, "bench-node", source="fake", interval=15)
    loop.start()
    MetricsServer(loop, 60, None, ("127.0.0.1", int(sys.argv[1]))).serve_forever()
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
        conn.getresponse().read()
        out.append(time.perf_counter() - t0)
    conn.close()
    return out


def _start(cmd: list[str], port: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: _scrape_latencies(port, 1), 30, 0.1, f"server on {port}")
    return proc


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))] * 1000


def _row(name: str, value: float, unit: str, note: str = "") -> dict[str, Any]:
    return {"name": name, "value": value, "unit": unit, "note": note}


def _node() -> Any:
    from exporter.assemble import assemble
    from exporter.collection import CollectionLoop
    from exporter.settings import ExporterSettings

    asm = assemble(ExporterSettings(source="simulated", node="bench-node"))
    loop = CollectionLoop(
        asm.collectors, "bench-node", source="simulated", interval=15, before_cycle=asm.before_cycle
    )
    loop.run_once()
    return asm, loop


def _cycle_cpu(loop: Any, cycles: int) -> tuple[float, int]:
    loop.run_once()
    t0 = time.process_time()
    for _ in range(cycles):
        snap = loop.run_once()
    return (time.process_time() - t0) / cycles, snap.series


def _write_tree(sysfs: Any, root: Path, path: str = "class/infiniband") -> None:
    for name in sysfs.listdir(path):
        p = f"{path}/{name}"
        if sysfs.is_dir(p):
            _write_tree(sysfs, root, p)
        else:
            (root / p).parent.mkdir(parents=True, exist_ok=True)
            (root / p).write_text(sysfs.read_text(p))


def _ib_vs_node_exporter(asm: Any, rounds: int, batch: int) -> list[dict[str, Any]]:
    from exporter.collection import CollectionLoop
    from exporter.collectors.infiniband import InfinibandCollector
    from exporter.sources.sysfs import DirSysfs

    binary = shutil.which(NODE_EXPORTER)
    if binary is None:
        return [
            _row("IB collection vs node_exporter", float("nan"), "x", f"{NODE_EXPORTER} missing")
        ]
    tree = Path(tempfile.mkdtemp(prefix="gpuwarden-bench-sys-"))
    ib_source = next(c for c in asm.collectors if isinstance(c, InfinibandCollector))
    _write_tree(ib_source.sysfs, tree)
    ports = sum(
        len(os.listdir(tree / "class/infiniband" / d / "ports"))
        for d in os.listdir(tree / "class/infiniband")
    )
    loop = CollectionLoop(
        [InfinibandCollector(DirSysfs(tree), "bench-node")],
        "bench-node",
        source="bench",
        interval=15,
    )
    loop.run_once()
    port = free_port()
    cmd = [
        binary,
        "--collector.disable-defaults",
        "--collector.infiniband",
        f"--path.sysfs={tree}",
        f"--web.listen-address=127.0.0.1:{port}",
    ]
    proc = _start(cmd, port)
    ours_s, theirs_s, ratios = [], [], []
    try:
        _scrape_latencies(port, 20)
        for _ in range(rounds):
            c0 = cpu_seconds(proc.pid)
            _scrape_latencies(port, batch)
            theirs = (cpu_seconds(proc.pid) - c0) / batch
            t0 = time.process_time()
            for _ in range(batch):
                loop.run_once()
            ours = (time.process_time() - t0) / batch
            ours_s.append(ours)
            theirs_s.append(theirs)
            ratios.append(ours / theirs if theirs else float("nan"))
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tree, ignore_errors=True)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stderr
    version = (version or "").split("\n", 1)[0].replace("node_exporter, ", "")
    note = f"{ports} ports, same tree, {rounds} interleaved rounds x {batch}"
    return [
        _row("IB collection + render, ours", statistics.median(ours_s) * 1000, "ms CPU", note),
        _row(
            "IB scrape, node_exporter",
            statistics.median(theirs_s) * 1000,
            "ms CPU",
            version.strip()[:40],
        ),
        _row("ratio ours / node_exporter (IB)", statistics.median(ratios), "x", "goal <= 1"),
    ]


def _render_vs_client(loop: Any, n: int) -> list[dict[str, Any]]:
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    from exporter.collection import Snapshot
    from exporter.exposition import Prefixes, group, render

    samples = []
    for st in loop._states:  # the same samples a cycle renders
        samples += list(st.collector.collect())
    families = []
    for metric, rows in group(samples).items():
        if metric.type == "histogram" or metric.name.startswith("DCGM_"):
            continue
        cls = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
        fam = cls(metric.name, metric.help, labels=list(metric.labels))
        for s in rows:
            fam.add_metric(list(s.label_values), s.value)
        families.append(fam)

    class _Static:
        def collect(self) -> list[Any]:
            return families

    reg = CollectorRegistry()
    reg.register(_Static())  # type: ignore[arg-type]
    prefixes = Prefixes()
    render(samples, prefixes=prefixes)
    t0 = time.process_time()
    for _ in range(n):
        body = render(samples, prefixes=prefixes)
    ours = (time.process_time() - t0) / n
    t0 = time.process_time()
    for _ in range(n):
        generate_latest(reg)
    theirs = (time.process_time() - t0) / n
    del Snapshot
    note = f"{len(samples)} series, {len(body)} bytes"
    return [
        _row("render, ours", ours * 1000, "ms CPU", note),
        _row("render, prometheus_client generate_latest", theirs * 1000, "ms CPU", note),
        _row("ratio render ours / prometheus_client", ours / theirs, "x", "goal <= 1"),
    ]


def _exporter_cmd(port: int, source: str, extra: list[str]) -> list[str]:
    return [
        sys.executable,
        "-m",
        "exporter",
        "--source",
        source,
        "--node",
        "bench-node",
        "--listen",
        f"127.0.0.1:{port}",
        *extra,
    ]


def run(quick: bool = False) -> list[dict[str, Any]]:
    n_lat = 300 if quick else 2000
    n_rss = 2000 if quick else 10000
    asm, loop = _node()
    cpu, series = _cycle_cpu(loop, 20 if quick else 100)
    rows = [
        _row(
            "series per node", series, "series", "8 GPUs x 18 NVLinks, 8 IB ports, all collectors"
        ),
        _row("CPU per collection cycle", cpu * 1000, "ms", "process CPU time, simulated source"),
    ]
    rows += _ib_vs_node_exporter(asm, 3 if quick else 7, 100 if quick else 300)
    rows += _render_vs_client(loop, 20 if quick else 100)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        port = free_port()
        ours = _start(_exporter_cmd(port, "simulated", []), port)
        procs.append(ours)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.request("GET", "/metrics")
        body = conn.getresponse().read()
        d = Path(tempfile.mkdtemp(prefix="gpuwarden-bench-"))
        (d / "metrics.txt").write_bytes(body)
        floor_port = free_port()
        procs.append(
            _start(
                [sys.executable, "-c", _FLOOR, str(floor_port), str(d / "metrics.txt")], floor_port
            )
        )
        lat = {
            "gpuwarden": _scrape_latencies(port, n_lat),
            "pre-rendered floor": _scrape_latencies(floor_port, n_lat),
        }
        for name, xs in lat.items():
            rows.append(
                _row(
                    f"scrape p50 {name}", _pct(xs, 0.5), "ms", f"{n_lat} scrapes, {len(body)} bytes"
                )
            )
            rows.append(_row(f"scrape p99 {name}", _pct(xs, 0.99), "ms"))
        rows.append(
            _row(
                "ratio vs pre-rendered floor (p50)",
                statistics.median(lat["gpuwarden"]) / statistics.median(lat["pre-rendered floor"]),
                "x",
                "goal <= 2",
            )
        )
        rows += _rss_rows(ours.pid, port, n_rss, "simulated")
        nvml_port = free_port()
        nvml = _start(_exporter_cmd(nvml_port, "nvml", ["--kmsg", os.devnull]), nvml_port)
        procs.append(nvml)
        rows += _rss_rows(nvml.pid, nvml_port, n_rss, "nvml, no driver")
        tree = Path(tempfile.mkdtemp(prefix="gpuwarden-bench-sys-"))
        _write_tree(next(c for c in asm.collectors if hasattr(c, "sysfs")).sysfs, tree)
        fake_port = free_port()
        import simulator.nvml_fake as nvml_fake

        fake = _start(
            [sys.executable, "-c", _FAKE_NODE, str(fake_port), str(tree), nvml_fake.__file__],
            fake_port,
        )
        procs.append(fake)
        rows += _rss_rows(fake.pid, fake_port, n_rss, "8 GPUs + 8 HCAs, no simulator")
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
        for t in Path(tempfile.gettempdir()).glob("gpuwarden-bench-*"):
            shutil.rmtree(t, ignore_errors=True)
    return rows


def _rss_rows(pid: int, port: int, n: int, source: str) -> list[dict[str, Any]]:
    rows = []
    done = 0
    for mark in sorted({n // 10, n // 2, n}):
        _scrape_latencies(port, mark - done)
        done = mark
        rows.append(
            _row(
                f"exporter RSS ({source}) after {mark} scrapes",
                _rss_mib(pid),
                "MiB",
                "goal <= 40 MiB and flat",
            )
        )
    return rows
