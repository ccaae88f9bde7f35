"""A small simulated fleet, recorded as dcgm-exporter + node_exporter (and, for a mixed fleet,
part of it as gpuwarden's exporter), backfilled into a real Prometheus and read back by the
analyzer's real Prometheus source with dialect discovery on."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from analyzer.sources.dialects.identity import NodeMap
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import Window
from gpuwarden.lab.dcgm_openmetrics import DcgmScrapeRecorder
from gpuwarden.lab.openmetrics import ScrapeRecorder
from gpuwarden.lab.via_prometheus import backfill, prometheus
from simulator.fleet import Fleet
from simulator.model import SKUS
from simulator.topology import gpu_uuid
from tests.realcomp import require_binary

STEP = 15.0
HORIZON = 900.0  # virtual seconds simulated (the analyzer's window is the last 600)


def epoch() -> float:
    """Virtual 0 as Unix time: recent enough for Prometheus to serve, a whole block back."""
    return (time.time() // 7200 - 2) * 7200


@contextmanager
def served(tmp: Path, nodes: int, faults: Callable[[Fleet], None], native_nodes: int = 0,
           overlap: bool = False, generations: Sequence[str] = (), last: list[Any] | None = None,
           skus: Sequence[str] | None = None,
           **dcgm_kw: Any) -> Iterator[tuple[str, Fleet, float]]:  # fmt: skip
    """Simulate ``nodes`` for HORIZON seconds with ``faults`` injected; the first
    ``native_nodes`` are recorded as gpuwarden's exporter serves them, the rest as dcgm-exporter
    + node_exporter (``overlap``: every node as dcgm-exporter + node_exporter too, as a
    gpuwarden fleet with ``--compat dcgm`` and node_exporter serves it); ``generations``: one
    dcgm-exporter naming generation per dcgm node (exporter.catalog_dcgm, as the exporter's
    ``--compat dcgm:<gen>`` names them; default 4.8 for all); ``last`` gets the last frame;
    ``skus``: a model per node (a mixed fleet, every node busy);
    yields (Prometheus URL, fleet, Unix time of the last scrape)."""
    require_binary("promtool")
    require_binary("prometheus")
    fleet = Fleet(nodes, seed=3) if skus is None else Fleet(nodes, seed=3, skus=skus,
                                                            idle_fraction=0.0)  # fmt: skip
    faults(fleet)
    names = [SKUS[k].name for k in fleet.sku_of]
    t0 = epoch()
    lo = 0 if overlap else native_nodes
    if generations:
        assert len(generations) == nodes - lo, "one generation per dcgm node"
        parts = [((lo + i, lo + i + 1), g) for i, g in enumerate(generations)]
    else:
        parts = [((lo, nodes), "4.8")]
    recorders = [DcgmScrapeRecorder(fleet.nodes, gpu_uuid, names, t0, tmp, part=part,
                                    generation=gen, **dcgm_kw) for part, gen in parts]  # fmt: skip
    native = ScrapeRecorder(fleet.nodes, gpu_uuid, names, t0, tmp, part=(0, native_nodes))
    t = 0.0
    while t <= HORIZON + 1e-9:
        frame = fleet.step(t)
        jobs = fleet.jobs_at(t)
        for dcgm in recorders:
            dcgm.push(frame, jobs)
        if last is not None:
            last[:] = [frame]
        if native_nodes:
            native.push(frame, jobs)
        t += STEP
    data = tmp / "tsdb"
    recs = [(f"dcgm{i}", r) for i, r in enumerate(recorders)] + [("native", native)]
    for name, rec in recs:
        if name == "native" and not native_nodes:
            continue
        om = rec.write(tmp / f"{name}.om")
        rec.close()
        backfill(om, data)
    # a live Prometheus marks a vanished series stale at once; backfilled blocks cannot carry
    # the markers, so this one looks back half a scrape (gpuwarden.lab.via_prometheus)
    with prometheus(data, STEP, tmp) as url:
        yield url, fleet, t0 + t - STEP


def read(url: str, end: float, node_map: NodeMap | None = None) -> tuple[Window, Any]:
    """One cold read of the window ending at ``end``, with discovery (the CLI's default)."""
    src = PrometheusSource(url, window=600.0, step=STEP, discover=True, node_map=node_map)

    async def go() -> Window:
        try:
            return await src.read(end + src.settle)
        finally:
            await src.close()

    return asyncio.run(go()), src
