"""Jobs collector: the scheduler's GPU -> job map -> ``catalog.GPU_ALLOCATION_INFO``.

Sits between a :class:`~exporter.sources.protocols.JobMap` (Slurm prolog/epilog files; pods
have their own collector; see :mod:`exporter.sources.jobmap`) and the collection
loop. One series per allocated GPU, value 1, labelled with the GPU's UUID so queries can join
it onto any per-GPU series (``<per-GPU series> * on(node, gpu) group_left(job_id)
<allocation series>``) without a job label multiplying every series.

A job map that exposes ``read_errors`` (DirJobMap does) reports them as this collector's own.
"""

from __future__ import annotations

from exporter.catalog import GPU_ALLOCATION_INFO, Sample
from exporter.collectors.base import ReadErrors
from exporter.sources.protocols import GpuLookup, JobMap


class JobsCollector:
    """Emits ``GPU_ALLOCATION_INFO{node,gpu,uuid,job_id,scheduler} 1`` per allocated GPU."""

    name = "jobs"

    def __init__(self, job_map: JobMap, gpus: GpuLookup, node: str) -> None:
        self.job_map = job_map
        self.gpus = gpus
        self.node = node
        shared = getattr(job_map, "read_errors", None)
        self.read_errors: ReadErrors = shared if isinstance(shared, ReadErrors) else ReadErrors()

    def collect(self) -> list[Sample]:
        allocations = self.job_map.allocations()
        if not allocations:
            return []
        uuids = self._uuids()
        scheduler = self.job_map.scheduler
        return [
            GPU_ALLOCATION_INFO.make(1, self.node, gpu, uuids.get(gpu, ""), job, scheduler)
            for gpu, job in sorted(allocations.items(), key=lambda kv: _index_order(kv[0]))
        ]

    def _uuids(self) -> dict[str, str]:
        """GPU index -> UUID; an unanswering lookup costs the uuid label, not the series."""
        try:
            return {ident.index: ident.uuid for ident in self.gpus().values()}
        except Exception:  # the GPU source is down; the job map is still worth reporting
            self.read_errors.add("gpu_lookup")
            return {}


def _index_order(gpu: str) -> tuple[int, str]:
    return (int(gpu), gpu) if gpu.isdigit() else (1 << 30, gpu)
