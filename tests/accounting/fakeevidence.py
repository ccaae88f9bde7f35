"""A hand-written ``Evidence`` (what Prometheus would say), for the ledger tests."""

from __future__ import annotations

from dataclasses import dataclass, field

from accounting.model import Exposure, JobHit, JobRun


@dataclass
class FakeEvidence:
    onsets: dict[tuple[str, str | None], float] = field(default_factory=dict)
    models: dict[str, str] = field(default_factory=dict)
    gpu_counts: dict[str, int] = field(default_factory=dict)
    hits: dict[str, list[JobHit]] = field(default_factory=dict)
    rows: list[Exposure] = field(default_factory=list)
    job_runs: list[JobRun] = field(default_factory=list)
    asked: list[tuple[str, float, float]] = field(default_factory=list)
    ranges: list[tuple[float, float]] = field(default_factory=list)  # exposure read over

    def onset(self, node: str, gpu: str | None, detected: float) -> float | None:
        return self.onsets.get((node, gpu))

    def gpu_model(self, node: str) -> str | None:
        return self.models.get(node)

    def gpus(self, node: str) -> int | None:
        return self.gpu_counts.get(node)

    def jobs(self, node: str, gpu: str | None, onset: float, at: float) -> list[JobHit]:
        self.asked.append((node, onset, at))
        return self.hits.get(node, [])

    def exposure(self, since: float, until: float) -> list[Exposure]:
        self.ranges.append((since, until))
        return self.rows

    def runs(self, since: float, until: float) -> list[JobRun]:
        return self.job_runs
