"""The simulator's frames as AMD's Device Metrics Exporter (DME) would have been scraped.

The ``--telemetry amd-dme`` twin of :class:`~gpuwarden.lab.openmetrics.ScrapeRecorder` for the
AMD nodes of a fleet: each frame, for each AMD node, rendered by the simulator's own DME
(:class:`simulator.dme.DmeNode`: DME's field names behind an optional prefix, every field a
gauge, ``hostname`` + ``serial_number`` + ``gpu_id``, ``job_id`` from DME's Slurm prolog, the
last-event AFID gauge), written as OpenMetrics for ``promtool tsdb create-blocks-from`` with
``instance``/``job`` as Prometheus adds them. DME's values come from a cache it refreshes every
``cache`` seconds (15 s): a faster scrape repeats the cached value. ``fields``: only these DME
fields (the analyzer's :func:`exporter.catalog_amd.read_fields`: the rest change no answer).
The NVIDIA nodes, and the AMD nodes' NICs, are the native recorder's
(``ScrapeRecorder(native_gpus=...)``); the two files hold disjoint families and are joined.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from exporter import catalog as c
from gpuwarden.lab.spool import FamilySpool
from simulator.dme import DmeNode

PORT = 5000  # DME's default


class DmeScrapeRecorder(FamilySpool):
    """Frames in, DME OpenMetrics out, for the fleet nodes flagged in ``amd``."""

    def __init__(self, nodes: Sequence[str], amd: Sequence[bool], epoch: float,
                 workdir: Path | None = None, prefix: str = "",
                 fields: Collection[str] | None = None, cache: float = 15.0) -> None:  # fmt: skip
        self.epoch, self.cache = epoch, cache
        self.dme = {i: DmeNode(n, i, prefix, fields)
                    for i, (n, a) in enumerate(zip(nodes, amd, strict=True)) if a}  # fmt: skip
        super().__init__("gpuwarden-dme-om-", workdir)
        self._held: dict[int, dict[str, list[str]]] = {}
        self._tick = -1
        self.samples = 0

    def push(self, frame: Any, jobs: Mapping[Any, Sequence[int]],
             missed: np.ndarray | None = None) -> None:  # fmt: skip
        """One scrape of every AMD node at ``frame.t`` (``missed`` rows, a down node: none)."""
        tick = int(frame.t // self.cache)
        fresh, self._tick = tick != self._tick, tick
        job_of = {int(x): str(j) for j, members in jobs.items() for x in members}
        ts = f" {self.epoch + frame.t:.3f}\n"
        for i, node in self.dme.items():
            gpus = frame.metrics[c.GPU_UP.name][i]
            alloc = {str(g): job_of[i] for g in range(gpus.size)} if i in job_of else {}
            fams = node.families(frame, alloc)  # every step: residency and events advance
            if fresh or i not in self._held:
                self._held[i] = fams
            if np.isnan(gpus).all() or (missed is not None and missed[i]):
                continue
            inst = f',instance="{node.node}:{PORT}",job="amd-dme"}}'
            for fam, lines in self._held[i].items():
                out = "".join(ln.replace("}", inst, 1) + ts for ln in lines)
                self._out(fam).write(out)
                self.samples += len(lines)

    def write(self, path: Path, eof: bool = True) -> Path:
        """Every family as a gauge (as DME types them); ``eof`` False: to join another file."""
        return self._join(path, lambda family: f"# TYPE {family} gauge\n", "a", eof)
