"""Steps collector: the training side's per-rank step times -> ``catalog.JOB_STEP_SECONDS``.

Sits between :class:`~exporter.sources.steps.DirSteps` and the collection loop. Each series is
labelled like ``GPU_ALLOCATION_INFO`` (node, gpu, uuid, job_id), so it joins onto the job map
and the per-GPU series. Where the node has a job map, a report for a GPU that the map gives
to another job (a leftover of an earlier job) is dropped: the scheduler's word wins.
"""

from __future__ import annotations

from exporter.catalog import JOB_STEP_SECONDS, Sample
from exporter.collectors.base import ReadErrors
from exporter.sources.protocols import GpuLookup, JobMap
from exporter.sources.steps import StepSource


class StepsCollector:
    name = "steps"

    def __init__(
        self, steps: StepSource, gpus: GpuLookup, node: str, job_map: JobMap | None = None
    ) -> None:
        self.steps, self.gpus, self.node, self.job_map = steps, gpus, node, job_map
        self.read_errors: ReadErrors = steps.read_errors

    def collect(self) -> list[Sample]:
        reports = self.steps.reports()
        if not reports:
            return []
        try:
            ids = list(self.gpus().values())
        except Exception:  # the GPU source is down: indexes stay, UUIDs cannot be resolved
            self.read_errors.add("gpu_lookup")
            ids = []
        uuid_of = {i.index: i.uuid for i in ids}
        index_of = {i.uuid: i.index for i in ids}
        owner = self.job_map.allocations() if self.job_map is not None else None
        out = []
        for r in reports:
            index = r.gpu if r.gpu.isdigit() else index_of.get(r.gpu)
            if index is None:
                self.read_errors.add("steps/unknown_gpu")
                continue
            if owner is not None and owner.get(index) != r.job:
                continue
            out.append(
                JOB_STEP_SECONDS.make(r.seconds, self.node, index, uuid_of.get(index, ""), r.job)
            )
        return out
