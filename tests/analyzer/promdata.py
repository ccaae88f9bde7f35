"""A small recorded-looking history for the Prometheus source tests, as OpenMetrics text.

Three H100 nodes, one job; node-01 GPU 3 logs XID 79 (its counter series appears mid-window) and
node-00's port mlx5_2/1 goes down for the last three samples.
"""

from __future__ import annotations

from exporter import catalog as c

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
    rate = [
        (_labels(node=n, device=f"mlx5_{p}", port=1), [(t, 50e9) for t in times])
        for n in NODES
        for p in range(8)
    ]
    family(c.IB_PORT_RATE, rate)
    sym = [
        (
            _labels(node=n, device=f"mlx5_{p}", port=1, counter="symbol_error"),
            [(t, 3.0) for t in times],
        )
        for n in NODES
        for p in range(8)
    ]
    family(c.IB_COUNTER, sym)
    out.append("# EOF")
    return "\n".join(out) + "\n"
