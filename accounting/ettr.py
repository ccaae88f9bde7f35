"""Effective training time ratio: productive / allocated wall-clock GPU-time per job run
(requeues of one run joined under its job id), and for the cluster weighted by GPU-hours
and by job count.

allocated = gpus x (end - start) of the run, clipped to the window; productive = allocated
minus the run's restart and recompute GPU-time (costs.py). A run with no known allocation,
or hit by an interruption without a checkpoint time whose possible recompute lies in the
window, has ETTR None: unknown, never guessed. Jobs interrupted and never resumed whose run
ended are listed (``never_resumed``): their restart stopped at the run's end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accounting import runs as runs_mod
from accounting.costs import hit_costs
from accounting.model import Ident, Incident, JobRun
from accounting.window import Window


@dataclass(frozen=True)
class JobEttr:
    job_id: Ident
    allocated_h: float | None
    lost_h: float | None
    ettr: float | None


@dataclass(frozen=True)
class Ettr:
    gpu_hour_weighted: float | None
    job_count_weighted: float | None
    jobs: tuple[JobEttr, ...]
    never_resumed: tuple[Ident, ...] = ()


def compute(incidents: Sequence[Incident], runs: Sequence[JobRun], window: Window) -> Ettr:
    lost: dict[Ident, float] = defaultdict(float)
    unknown: set[Ident] = set()
    hit_jobs: set[Ident] = set()
    ended: set[Ident] = set()
    in_window = {inc.id for inc in incidents if window.holds(inc.onset)}
    for hit in hit_costs(incidents, window, runs):
        if hit.incident_id in in_window:
            hit_jobs.add(hit.job_id)
            if hit.never_resumed:
                ended.add(hit.job_id)
        lost[hit.job_id] += hit.restart_s + (hit.recompute_s or 0.0)
        if hit.recompute_s is None and hit.unknown_s > 0:
            unknown.add(hit.job_id)
    joined = runs_mod.joined(incidents, runs)
    job_ids = {j for j, r in joined.items() if window.clip(r.start, r.end) > 0} | hit_jobs
    jobs = tuple(
        _job(j, joined.get(j), lost.get(j, 0.0), j in unknown, window)
        for j in sorted(job_ids, key=str)
    )
    never_resumed = tuple(sorted(ended, key=str))
    known = [j for j in jobs if j.ettr is not None and j.allocated_h]
    if not known:
        return Ettr(None, None, jobs, never_resumed)
    allocated = sum(j.allocated_h or 0.0 for j in known)
    productive = sum((j.allocated_h or 0.0) - (j.lost_h or 0.0) for j in known)
    return Ettr(
        productive / allocated,
        sum(j.ettr or 0.0 for j in known) / len(known),
        jobs,
        never_resumed,
    )


def _job(
    job_id: Ident, run: JobRun | None, lost_s: float, unknown: bool, window: Window
) -> JobEttr:
    if run is None:
        return JobEttr(job_id, None, None if unknown else lost_s / 3600.0, None)
    allocated = run.gpus * window.clip(run.start, run.end)
    lost = min(lost_s, allocated)
    if unknown or allocated <= 0:
        return JobEttr(job_id, allocated / 3600.0, None if unknown else lost / 3600.0, None)
    return JobEttr(job_id, allocated / 3600.0, lost / 3600.0, (allocated - lost) / allocated)


def to_json(ettr: Ettr) -> dict[str, Any]:
    return {
        "cluster": {
            "gpu_hour_weighted": ettr.gpu_hour_weighted,
            "job_count_weighted": ettr.job_count_weighted,
        },
        "jobs": [{"job_id": j.job_id, "ettr": j.ettr} for j in ettr.jobs],
        "never_resumed": list(ettr.never_resumed),
    }
