"""A small recorded-looking history for the Prometheus source tests, as OpenMetrics text.

Three H100 nodes, one job; node-01 GPU 3 logs XID 79 (its counter series appears mid-window),
node-00's port mlx5_2/1 goes down for the last three samples, NVLink 1 of node-02 GPU 5 counts
replays from the middle of the window and NVLink 1 of node-01 GPU 2 goes down for the last ten
samples; port mlx5_4/1 of node-02 counts ~27 symbol errors a second from sample 25 and
mlx5_5/1 of node-01 logs a link_downed at sample 35. node-00 and node-02 serve the exporter's
per-GPU NVLink and per-port error sums; node-01 (an older exporter) does not, so both of the
analyzer's read paths are exercised.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from exporter import catalog as c
from tests.realcomp import Prometheus, promtool, run_prometheus

NODES = ("node-00", "node-01", "node-02")
STEP = 15.0
POINTS = 41


def _labels(**kw: object) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kw.items()) + "}"


def openmetrics(end: float) -> str:
    times = [end - STEP * (POINTS - 1 - i) for i in range(POINTS)]
    out: list[str] = []

    def family(m: c.MetricDef, series: list[tuple[str, list[tuple[float, float]]]]) -> None:
        base = m.name.removesuffix("_total") if m.type == "counter" else m.name
        out.append(f"# TYPE {base} {m.type}")
        for labels, points in series:
            out.extend(f"{m.name}{labels} {v} {t:.3f}" for t, v in points)

    def per_gpu(fn) -> list[tuple[str, list[tuple[float, float]]]]:
        return [
            (
                _labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}"),
                [(t, fn(n, g, i)) for i, t in enumerate(times)],
            )
            for n in NODES
            for g in range(8)
        ]

    family(c.GPU_UTILIZATION, per_gpu(lambda n, g, i: 0.8))
    family(c.GPU_TEMPERATURE, per_gpu(lambda n, g, i: 70.0))
    family(c.GPU_POWER, per_gpu(lambda n, g, i: 600.0))
    family(c.GPU_SM_CLOCK, per_gpu(lambda n, g, i: 1.98e9))
    up = [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}", reason=""), [(t, 1.0) for t in times])
        for n in NODES
        for g in range(8)
    ]
    family(c.GPU_UP, up)
    info = [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}", name="NVIDIA H100 80GB HBM3",
                 pci_bus_id=f"00000000:{g:02X}:00.0", serial=f"{g}", vbios_version="96.00.74",
                 driver_version="550.54.15"),
         [(t, 1.0) for t in times])
        for n in NODES
        for g in range(8)
    ]  # fmt: skip
    family(c.GPU_INFO, info)
    alloc = [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}", job_id="777", scheduler="slurm"),
         [(t, 1.0) for t in times])
        for n in NODES
        for g in range(8)
    ]  # fmt: skip
    family(c.GPU_ALLOCATION_INFO, alloc)
    xid = _labels(node="node-01", gpu=3, uuid="GPU-node-01-3", xid=79)
    family(c.GPU_XID_ERRORS, [(xid, [(t, 1.0) for t in times[30:]])])
    state = [
        (_labels(node=n, device=f"mlx5_{p}", port=1),
         [(t, 1.0 if (n, p) == ("node-00", 2) and i >= POINTS - 3 else 4.0) for i, t in enumerate(times)])
        for n in NODES
        for p in range(8)
    ]  # fmt: skip
    family(c.IB_PORT_STATE, state)

    def replays(n: str, g: int, link: int, i: int) -> float:
        return 3.0 * max(i - 20, 0) if (n, g, link) == ("node-02", 5, 1) else 0.0

    def link_up(n: str, g: int, link: int, i: int) -> float:
        return 0.0 if (n, g, link) == ("node-01", 2, 1) and i >= POINTS - 10 else 1.0

    links = [(n, g, link) for n in NODES for g in range(8) for link in (0, 1)]
    family(c.NVLINK_UP, [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}", link=link),
         [(t, link_up(n, g, link, i)) for i, t in enumerate(times)])
        for n, g, link in links
    ])  # fmt: skip
    family(c.NVLINK_ERRORS, [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}", link=link, error_type="replay"),
         [(t, replays(n, g, link, i)) for i, t in enumerate(times)])
        for n, g, link in links
    ])  # fmt: skip
    summed = [(n, g) for n in ("node-00", "node-02") for g in range(8)]
    family(c.GPU_NVLINK_ERRORS, [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}"),
         [(t, sum(replays(n, g, k, i) for k in (0, 1))) for i, t in enumerate(times)])
        for n, g in summed
    ])  # fmt: skip
    family(c.GPU_NVLINK_DOWN, [
        (_labels(node=n, gpu=g, uuid=f"GPU-{n}-{g}"),
         [(t, sum(1.0 - link_up(n, g, k, i) for k in (0, 1))) for i, t in enumerate(times)])
        for n, g in summed
    ])  # fmt: skip
    rate = [
        (_labels(node=n, device=f"mlx5_{p}", port=1), [(t, 50e9) for t in times])
        for n in NODES
        for p in range(8)
    ]
    family(c.IB_PORT_RATE, rate)

    def symbol_errors(n: str, p: int, i: int) -> float:
        return 3.0 + (400.0 * max(i - 25, 0) if (n, p) == ("node-02", 4) else 0.0)

    def downed(n: str, p: int, i: int) -> float:
        return 1.0 if (n, p) == ("node-01", 5) and i >= 35 else 0.0

    ports = [(n, p) for n in NODES for p in range(8)]
    family(c.IB_COUNTER, [
        (_labels(node=n, device=f"mlx5_{p}", port=1, counter=k),
         [(t, fn(n, p, i)) for i, t in enumerate(times)])
        for n, p in ports
        for k, fn in (("symbol_error", symbol_errors), ("link_downed", downed))
    ])  # fmt: skip
    family(c.IB_PORT_ERRORS, [
        (_labels(node=n, device=f"mlx5_{p}", port=1),
         [(t, symbol_errors(n, p, i) + downed(n, p, i)) for i, t in enumerate(times)])
        for n, p in ports
        if n != "node-01"
    ])  # fmt: skip
    out.append("# EOF")
    return "\n".join(out) + "\n"


def backfilled(tmp: Path, edit: Callable[[str], str] = str) -> Iterator[tuple[Prometheus, float]]:
    """A real Prometheus serving this history (``edit``-ed first), ending two hours ago,
    backfilled by promtool in ``tmp`` (a module fixture's directory); and the history's end."""
    end = (time.time() // STEP) * STEP - 7200
    (tmp / "data.om").write_text(edit(openmetrics(end)))
    data = tmp / "data"
    r = promtool("tsdb", "create-blocks-from", "openmetrics", str(tmp / "data.om"), str(data))
    assert r.returncode == 0, r.stderr.decode()
    data.chmod(0o777)
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data) as p:
        yield p, end
