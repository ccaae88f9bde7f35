"""OpenMetrics history of a simulated fleet, for ``promtool tsdb create-blocks-from openmetrics``.

Steps :class:`simulator.fleet.Fleet` through virtual time and records each frame as scraped
with :class:`gpuwarden.lab.openmetrics.ScrapeRecorder` (the writer ``gpuwarden evaluate --via
prometheus`` uses): every series the analyzer reads, with the exporter's label set, one sample
per step, at full fleet size; a few faults start inside the span.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpuwarden.lab.dcgm_openmetrics import DcgmScrapeRecorder
from gpuwarden.lab.openmetrics import ScrapeRecorder
from simulator.fleet import Fleet
from simulator.model import SKUS
from simulator.topology import gpu_uuid


def write(
    path: Path,
    nodes: int,
    t0: float,
    steps: int,
    step: float = 15.0,
    seed: int = 0,
    part: tuple[int, int] | None = None,
    telemetry: str = "gpuwarden",
) -> dict[str, int]:
    """History of ``steps`` samples ending at ``t0 + step * (steps - 1)``; returns counts.
    ``part=(lo, hi)``: only nodes ``lo..hi-1`` of the whole fleet (simulated whole each time:
    stepping is cheap next to writing and backfilling the text). ``telemetry="dcgm-exporter"``:
    the same fleet as dcgm-exporter + node_exporter serve it (gpuwarden.lab.dcgm_openmetrics)."""  # fmt: skip
    fleet = Fleet(nodes, seed=seed, start=t0 - step)
    late = t0 + step * (steps - 12)  # a few faults that start inside the analysed span
    fleet.schedule([
        {"kind": "nvlink_errors", "node": fleet.nodes[1], "target": "gpu2/5", "onset": late},
        {"kind": "xid", "node": fleet.nodes[2], "target": "gpu3", "onset": late},
        {"kind": "ib_symbol_errors", "node": fleet.nodes[3], "target": "mlx5_1/1", "onset": late},
        {"kind": "straggler", "node": fleet.nodes[4], "target": "gpu5", "onset": late},
    ])  # fmt: skip
    make = DcgmScrapeRecorder if telemetry == "dcgm-exporter" else ScrapeRecorder
    rec = make(fleet.nodes, gpu_uuid, [SKUS[k].name for k in fleet.sku_of], 0.0,
               path.parent, part)  # fmt: skip
    try:
        for frame in fleet.run(t0 + step * (steps - 1), step):
            rec.push(frame, fleet.jobs_at(frame.t))
        rec.write(path)
        return {"samples": rec.samples, "steps": rec.steps}
    finally:
        rec.close()


def backfill(promtool: str, om: Path, data: Path, timeout: float = 3 * 3600) -> None:
    """Blocks from the OpenMetrics file ``om`` into ``data`` (``promtool tsdb
    create-blocks-from openmetrics``); ``om`` is removed either way, a failure raises with
    promtool's last words."""
    argv = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(om), str(data)]
    r = subprocess.run(argv, capture_output=True, timeout=timeout, check=False)
    om.unlink()
    if r.returncode != 0:
        raise RuntimeError(f"promtool: {r.stderr.decode()[-400:]}")
