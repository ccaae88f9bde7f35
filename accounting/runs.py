"""A job's run: the pieces of its allocation (the scheduler's or the allocation series'
``JobRun``s, and the ``start``/``end`` a hit carries) joined under its job id, requeues
included. costs.py stops a restart at the run's end (a job that ended is not waiting to
restart) and starts recompute no earlier than the run's start; ettr.py divides by it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from accounting.model import Ident, Incident, JobRun


def joined(incidents: Sequence[Incident], runs: Sequence[JobRun]) -> dict[Ident, JobRun]:
    """One run per job id: the earliest start, the latest end (None while a piece runs on)."""
    parts: dict[Ident, list[JobRun]] = defaultdict(list)
    for run in runs:
        parts[run.job_id].append(run)
    for inc in incidents:
        for job in inc.jobs:
            if job.start is not None:
                parts[job.job_id].append(JobRun(job.job_id, job.gpus, job.start, job.end))
    out = {}
    for job_id, pieces in parts.items():
        ends = [p.end for p in pieces]
        end = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
        out[job_id] = JobRun(job_id, max(p.gpus for p in pieces), min(p.start for p in pieces), end)
    return out
