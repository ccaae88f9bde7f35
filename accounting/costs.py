"""What each incident cost: TTD, TTM, TTR and GPU-hours lost split into restart, recompute
and capacity, clipped to the window (docs/accounting.md, "Formulas").

    restart   = sum over jobs of gpus x (resumed - interrupted)
    recompute = sum over jobs of gpus x (interrupted - last_checkpoint)
    capacity  = gpus_out x (returned - mitigated), less the GPU-hours an earlier incident of
                the node already took out (outages.py: each GPU-hour out of service once)

A None end time counts to the window's end, except that a restart never runs past the end
of the job's run when that is known: a job interrupted and never resumed whose run ended
(cancelled, or requeued under another id) is not waiting to restart; it is listed as never
resumed. One job hit by several incidents is walked in
order of interruption so that no GPU-second is counted twice: an interruption inside a
restart already counted adds only what lies beyond it, and work redone never reaches back
before the previous resumption (that time was already counted as restart).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from accounting import outages
from accounting import runs as runs_mod
from accounting.model import Ident, Incident, JobHit, JobRun
from accounting.window import Window


@dataclass(frozen=True)
class HitCost:
    """One job's share of one incident, in GPU-seconds; recompute None when unknown, and
    then ``unknown_s`` the wall-clock seconds in the window it could have been (from the
    previous resumption or the run's start to the interruption)."""

    incident_id: Ident
    job_id: Ident
    gpus: int
    restart_s: float
    recompute_s: float | None
    unknown_s: float = 0.0
    never_resumed: bool = False  # not resumed, and the run ended: the restart stops there


@dataclass(frozen=True)
class IncidentCost:
    incident: Incident
    ttd_s: float
    ttm_s: float | None
    ttr_s: float
    restart_h: float
    recompute_h: float | None
    capacity_h: float
    # the recompute of the jobs whose checkpoint is known: when another job's is not,
    # recompute_h is None (the contract) but these hours are still lost, and counted
    recompute_known_h: float = 0.0

    @property
    def total_h(self) -> float:
        return self.restart_h + self.recompute_known_h + self.capacity_h


def hit_costs(
    incidents: Sequence[Incident], window: Window, runs: Sequence[JobRun] = ()
) -> list[HitCost]:
    """Every (incident, job) pair's restart and recompute GPU-seconds, deduplicated per job."""
    by_job: dict[Ident, list[tuple[Incident, JobHit]]] = defaultdict(list)
    for inc in incidents:
        for job in inc.jobs:
            by_job[job.job_id].append((inc, job))
    whole = runs_mod.joined(incidents, runs)
    out: list[HitCost] = []
    for job_id, hits in by_job.items():
        hits.sort(key=lambda pair: (pair[1].interrupted, str(pair[0].id)))
        run = whole.get(job_id)
        run_start = None if run is None else run.start
        run_end = None if run is None else run.end
        covered = -float("inf")  # the end of the restart time already counted for this job
        for inc, job in hits:
            end = window.until if job.resumed is None else job.resumed
            if run_end is not None:
                end = min(end, run_end)
            restart = window.clip(max(job.interrupted, covered), end)
            begin = max([covered, *(t for t in (job.start, run_start) if t is not None)])
            recompute: float | None = None
            if job.last_checkpoint is not None:
                recompute = window.clip(max(job.last_checkpoint, begin), job.interrupted)
            unknown = window.clip(begin, job.interrupted) if recompute is None else 0.0
            covered = max(covered, end)
            out.append(
                HitCost(
                    inc.id,
                    job_id,
                    job.gpus,
                    job.gpus * restart,
                    _times(job.gpus, recompute),
                    unknown,
                    job.resumed is None and run_end is not None,
                )
            )
    return out


def _times(gpus: int, seconds: float | None) -> float | None:
    return None if seconds is None else gpus * seconds


def incident_costs(
    incidents: Sequence[Incident], window: Window, runs: Sequence[JobRun] = ()
) -> list[IncidentCost]:
    """The incidents with onset in the window, ordered by onset, with their costs."""
    hits: dict[Ident, list[HitCost]] = defaultdict(list)
    for hit in hit_costs(incidents, window, runs):
        hits[hit.incident_id].append(hit)
    charges = outages.charges(incidents)
    out = [
        _cost(inc, hits.get(inc.id, []), charges.get(inc.id, []), window)
        for inc in incidents
        if window.holds(inc.onset)
    ]
    out.sort(key=lambda c: (c.incident.onset, str(c.incident.id)))
    return out


def _cost(
    inc: Incident, hits: list[HitCost], charged: list[outages.Charge], window: Window
) -> IncidentCost:
    mitigated = inc.mitigated if inc.gpus_out > 0 else None
    returned = window.until if inc.returned is None else inc.returned
    recompute = [h.recompute_s for h in hits]
    known = None if any(r is None for r in recompute) else sum(r or 0.0 for r in recompute)
    return IncidentCost(
        incident=inc,
        ttd_s=inc.detected - inc.onset,
        ttm_s=None if mitigated is None else mitigated - inc.detected,
        ttr_s=returned - inc.onset,
        restart_h=sum(h.restart_s for h in hits) / 3600.0,
        recompute_h=None if known is None else known / 3600.0,
        recompute_known_h=sum(r or 0.0 for r in recompute) / 3600.0,
        capacity_h=sum(gpus * window.clip(start, end) for start, end, gpus in charged) / 3600.0,
    )
