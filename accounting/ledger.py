"""The incident ledger from what the system already records: the remediation journal for
events (incidents, actions, releases) and Prometheus, behind ``Evidence``, for what the
journal cannot know (onset, GPU model, exposure, the jobs hit and their checkpoints).

Per failure: a journal incident, or the incidents that share an alert (fingerprint +
startsAt; one_per_alert). Cluster-wide incidents (node '') are not a unit's failure and are
left out.
detected = the earliest alert startsAt (else when remediation opened it); onset = the
earliest evidence in Prometheus (else detected); mitigated = the first disruptive action of
the incident that finished ``done`` (remediation.history's DISRUPTIVE: reset_gpu and
inspect included); returned = the first allowed release of the node after that; gpus_out =
1 when that action isolated one GPU (its ``isolate_gpu`` step: a DRA device taint), else
the node's GPUs. A ``reset_gpu`` takes the node out (remediation/gpureset/saga.py: the node
is cordoned and every job on it requeued before the reset) and so counts the node's GPUs.
The journal is read through its seam (journal.py: ``remediation.history``, read-only).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol

from accounting import outages
from accounting.components import component
from accounting.journal import AlertSeen, History, IncidentRow, Mitigation, open_journal
from accounting.model import Exposure, Incident, JobHit, JobRun

ID_PREFIX = "gw-"
LOOKBACK_S = 30 * 86400.0  # exposure is read from this long before the journal's first event


class Evidence(Protocol):
    """What Prometheus knows that the journal does not (prometheus_evidence.py; a fake in tests)."""

    def onset(self, node: str, gpu: str | None, detected: float) -> float | None: ...

    def gpu_model(self, node: str) -> str | None: ...

    def gpus(self, node: str) -> int | None: ...

    def jobs(self, node: str, gpu: str | None, onset: float, at: float) -> list[JobHit]: ...

    def exposure(self, since: float, until: float) -> list[Exposure]: ...

    def runs(self, since: float, until: float) -> list[JobRun]: ...


class NoEvidence:
    """Without Prometheus: onset = detected, no jobs, no exposure; a node's model and GPU
    count from what the service knows of it (the topology file), else unknown and
    ``gpus_per_node``."""

    def __init__(
        self,
        gpus_per_node: int = 8,
        gpus: Mapping[str, int] | None = None,
        models: Mapping[str, str] | None = None,
    ) -> None:
        self.gpus_per_node = gpus_per_node
        self.gpu_counts, self.models = dict(gpus or {}), dict(models or {})

    def onset(self, node: str, gpu: str | None, detected: float) -> float | None:
        return None

    def gpu_model(self, node: str) -> str | None:
        return self.models.get(node)

    def gpus(self, node: str) -> int | None:
        return self.gpu_counts.get(node, self.gpus_per_node)

    def jobs(self, node: str, gpu: str | None, onset: float, at: float) -> list[JobHit]:
        return []

    def exposure(self, since: float, until: float) -> list[Exposure]:
        return []

    def runs(self, since: float, until: float) -> list[JobRun]:
        return []


def evidence_for(prometheus: str | None, gpus_per_node: int) -> Evidence:
    if prometheus is None:
        return NoEvidence(gpus_per_node)
    from accounting.prometheus_evidence import PrometheusEvidence

    return PrometheusEvidence(prometheus, gpus_per_node)


def _epoch(starts_at: str | None) -> float | None:
    if not starts_at:
        return None
    try:
        return datetime.fromisoformat(starts_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _labels(seen: list[AlertSeen]) -> tuple[dict[str, str], float | None]:
    """The first alert's labels and the earliest startsAt of the incident's alerts."""
    labels: dict[str, str] = dict(seen[0].labels) if seen else {}
    starts = [t for t in (_epoch(a.starts_at) for a in seen) if t is not None]
    return labels, min(starts) if starts else None


def one_per_alert(journal: History) -> list[tuple[list[IncidentRow], list[AlertSeen]]]:
    """The journal's incidents joined where they share an alert (fingerprint + startsAt),
    each with its alerts in decision order; oldest first.

    The engine opens a new incident when an alert comes back more than
    ``incident_window_s`` after the last (policy.py): a second decision of the same alert
    after the NVLink settle window (420 s), or on Alertmanager's repeat after a denial
    while paused, would count one fault twice. One alert is one failure."""
    rows = journal.incidents()
    seen = [journal.alerts(row) for row in rows]
    parent = list(range(len(rows)))

    def root(i: int) -> int:
        while parent[i] != i:
            i = parent[i]
        return i

    first: dict[tuple[str, str], int] = {}
    for i, alerts in enumerate(seen):
        for a in alerts:
            j = first.setdefault((a.fingerprint, a.starts_at), i)
            parent[max(root(i), root(j))] = min(root(i), root(j))
    groups: dict[int, list[int]] = {}
    for i in range(len(rows)):
        groups.setdefault(root(i), []).append(i)
    return [
        (
            [rows[i] for i in members],
            sorted((a for i in members for a in seen[i]), key=lambda a: a.decided_at),
        )
        for _, members in sorted(groups.items())
    ]


def _gpus_out(mitigation: Mitigation | None, node_gpus: int) -> int:
    if mitigation is None:
        return 0
    return 1 if mitigation.one_gpu else node_gpus


def _with_acks(jobs: list[JobHit], acked: dict[str, float]) -> list[JobHit]:
    """A hit without a checkpoint time takes its ack's: the work since is ~nothing."""
    out = []
    for job in jobs:
        at = acked.get(str(job.job_id))
        if job.last_checkpoint is None and at is not None:
            job = dataclasses.replace(job, last_checkpoint=min(at, job.interrupted))
        out.append(job)
    return out


def _incident(
    journal: History, rows: list[IncidentRow], alerts: list[AlertSeen], evidence: Evidence
) -> Incident:
    """One failure from its journal incidents (one_per_alert): the first one's id, the
    earliest detection and the earliest mitigation of them all."""
    row = rows[0]
    labels, starts = _labels(alerts)
    node, gpu = row.node, labels.get("gpu") or None
    opened = min(r.opened_at for r in rows)
    detected = opened if starts is None else min(opened, starts)
    seen = evidence.onset(node, gpu, detected)
    onset = detected if seen is None else min(seen, detected)
    found = [m for m in (journal.mitigation(r.id) for r in rows) if m is not None]
    mitigation = min(found, key=lambda m: m.finished_at) if found else None
    mitigated = None if mitigation is None else mitigation.finished_at
    returned = None if mitigated is None else journal.release_after(node, mitigated)
    gpus_out = _gpus_out(mitigation, evidence.gpus(node) or 0)
    jobs = evidence.jobs(node, gpu, onset, mitigated if mitigated is not None else detected)
    jobs = _with_acks(jobs, {k: v for r in rows for k, v in journal.acks(r.id).items()})
    return Incident(
        id=f"{ID_PREFIX}{row.id}",
        node=node,
        gpu=gpu,
        gpu_model=labels.get("gpu_model")
        or labels.get("model")
        or evidence.gpu_model(node)
        or "unknown",
        component=component(row.fault_class, labels),
        fault_class=row.fault_class,
        onset=onset,
        detected=detected,
        mitigated=mitigated,
        returned=returned,
        gpus_out=gpus_out,
        jobs=tuple(jobs),
    )


def first_event(path: str | Path) -> float | None:
    """The journal's first record (an alert received, a decision, an action, an incident):
    the service watched the fleet from then on, failures or not."""
    journal = open_journal(path)
    try:
        return journal.first_event()
    finally:
        journal.close()


def from_journal(
    path: str | Path,
    evidence: Evidence | None = None,
    now: float = 0.0,
    since: float | None = None,
    until: float | None = None,
) -> tuple[list[Incident], list[Exposure], list[JobRun]]:
    """The journal's incidents (oldest first) and Prometheus' exposure and job runs."""
    journal = open_journal(path)
    try:
        return from_history(journal, evidence, now, since, until)
    finally:
        journal.close()


def from_history(
    journal: History,
    evidence: Evidence | None = None,
    now: float = 0.0,
    since: float | None = None,
    until: float | None = None,
) -> tuple[list[Incident], list[Exposure], list[JobRun]]:
    """``from_journal`` over any ``History`` (the seam: a test hands it a fake)."""
    evidence = evidence or NoEvidence()
    incidents = [
        _incident(journal, rows, alerts, evidence) for rows, alerts in one_per_alert(journal)
    ]
    first, latest = journal.decision_span()
    times = [t for t in (latest, first) if t is not None] + [i.onset for i in incidents]
    if not times:
        return incidents, [], []
    # the report's --since/--until, when given, bound what is read: a quarter's review
    # reads exposure from the quarter's start, however long before the journal's first event
    start = min(times) - LOOKBACK_S if since is None else since
    end = max(max(times), now) if until is None else until
    exposure = outages.in_service(evidence.exposure(start, end), incidents)
    return incidents, exposure, evidence.runs(start, end)
