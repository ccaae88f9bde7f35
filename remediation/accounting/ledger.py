"""The incident ledger from what the system already records: the remediation journal for
events (incidents, actions, releases) and Prometheus, behind ``Evidence``, for what the
journal cannot know (onset, GPU model, exposure, the jobs hit and their checkpoints).

Per journal incident (cluster-wide ones, node '', are not a unit's failure and are left out):
detected = the earliest alert startsAt (else when remediation opened it); onset = the
earliest evidence in Prometheus (else detected); mitigated = the first disruptive action of
the incident that finished ``done`` (remediation/model.py's DISRUPTIVE: reset_gpu and
inspect included); returned = the first allowed release of the node after that; gpus_out =
1 when that action isolated one GPU (its ``isolate_gpu`` step: a DRA device taint), else
the node's GPUs. A ``reset_gpu`` takes the node out (remediation/gpureset/saga.py: the node
is cordoned and every job on it requeued before the reset) and so counts the node's GPUs.
Read-only: the journal is opened ``mode=ro``.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Protocol

from remediation import model
from remediation.accounting import outages
from remediation.accounting.components import component
from remediation.accounting.model import Exposure, Incident, JobHit, JobRun

DISRUPTIVE = tuple(sorted(model.DISRUPTIVE))
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
    from remediation.accounting.prometheus_evidence import PrometheusEvidence

    return PrometheusEvidence(prometheus, gpus_per_node)


def _connect(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    db.row_factory = sqlite3.Row
    return db


def _epoch(starts_at: str | None) -> float | None:
    if not starts_at:
        return None
    try:
        return datetime.fromisoformat(starts_at.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _labels(db: sqlite3.Connection, inc: sqlite3.Row) -> tuple[dict[str, str], float | None]:
    """The first alert's labels and the earliest startsAt of the incident's alerts."""
    rows = db.execute(
        "SELECT a.labels, a.starts_at FROM decisions d JOIN alerts a ON a.key = d.alert_key "
        "WHERE d.node=? AND d.fault_class=? AND d.at>=? AND d.at<=? ORDER BY d.at",
        (inc["node"], inc["fault_class"], inc["opened_at"], inc["last_at"]),
    ).fetchall()
    labels: dict[str, str] = json.loads(rows[0]["labels"]) if rows else {}
    starts = [t for t in (_epoch(r["starts_at"]) for r in rows) if t is not None]
    return labels, min(starts) if starts else None


def _mitigated(db: sqlite3.Connection, incident_id: int) -> tuple[float, bool] | None:
    """When the first disruptive action finished, and whether it took one GPU only."""
    marks = ",".join("?" * len(DISRUPTIVE))
    row = db.execute(
        f"SELECT a.finished_at, EXISTS(SELECT 1 FROM steps s WHERE s.action_id = a.id "
        f"AND s.step='isolate_gpu' AND s.state='done') FROM actions a WHERE a.incident_id=? "
        f"AND a.state='done' AND a.finished_at IS NOT NULL AND a.action IN ({marks}) "
        f"ORDER BY a.finished_at, a.id LIMIT 1",
        (incident_id, *DISRUPTIVE),
    ).fetchone()
    return None if row is None else (float(row[0]), bool(row[1]))


def _gpus_out(mitigation: tuple[float, bool] | None, node_gpus: int) -> int:
    if mitigation is None:
        return 0
    return 1 if mitigation[1] else node_gpus


def _returned(db: sqlite3.Connection, node: str, after: float) -> float | None:
    value = db.execute(
        "SELECT MIN(at) FROM decisions WHERE node=? AND action='release' AND verdict='allow' "
        "AND at>=?",
        (node, after),
    ).fetchone()[0]
    return None if value is None else float(value)


def _acked(db: sqlite3.Connection, incident_id: int) -> dict[str, float]:
    """Jobs that acknowledged a checkpoint (remediation/checkpoint.py) before this
    incident's action moved them: job id -> when the action finished (the ack came before)."""
    rows = db.execute(
        "SELECT s.step, a.finished_at FROM steps s JOIN actions a ON a.id = s.action_id "
        "WHERE a.incident_id=? AND s.step LIKE 'ack:%' AND s.state='done' "
        "AND a.finished_at IS NOT NULL",
        (incident_id,),
    ).fetchall()
    return {str(r["step"])[4:]: float(r["finished_at"]) for r in rows}


def _with_acks(jobs: list[JobHit], acked: dict[str, float]) -> list[JobHit]:
    """A hit without a checkpoint time takes its ack's: the work since is ~nothing."""
    out = []
    for job in jobs:
        at = acked.get(str(job.job_id))
        if job.last_checkpoint is None and at is not None:
            job = dataclasses.replace(job, last_checkpoint=min(at, job.interrupted))
        out.append(job)
    return out


def _incident(db: sqlite3.Connection, row: sqlite3.Row, evidence: Evidence) -> Incident:
    labels, starts = _labels(db, row)
    node, gpu = str(row["node"]), labels.get("gpu") or None
    detected = (
        min(float(row["opened_at"]), starts) if starts is not None else float(row["opened_at"])
    )
    seen = evidence.onset(node, gpu, detected)
    onset = detected if seen is None else min(seen, detected)
    mitigation = _mitigated(db, int(row["id"]))
    mitigated = None if mitigation is None else mitigation[0]
    returned = None if mitigated is None else _returned(db, node, mitigated)
    gpus_out = _gpus_out(mitigation, evidence.gpus(node) or 0)
    jobs = evidence.jobs(node, gpu, onset, mitigated if mitigated is not None else detected)
    jobs = _with_acks(jobs, _acked(db, int(row["id"])))
    return Incident(
        id=f"{ID_PREFIX}{row['id']}",
        node=node,
        gpu=gpu,
        gpu_model=labels.get("gpu_model")
        or labels.get("model")
        or evidence.gpu_model(node)
        or "unknown",
        component=component(str(row["fault_class"]), labels),
        fault_class=str(row["fault_class"]),
        onset=onset,
        detected=detected,
        mitigated=mitigated,
        returned=returned,
        gpus_out=gpus_out,
        jobs=tuple(jobs),
    )


FIRST_EVENT = (
    "SELECT MIN(t) FROM (SELECT MIN(received_at) AS t FROM alerts "
    "UNION ALL SELECT MIN(at) FROM decisions UNION ALL SELECT MIN(started_at) FROM actions "
    "UNION ALL SELECT MIN(opened_at) FROM incidents)"
)


def first_event(path: str | Path) -> float | None:
    """The journal's first record (an alert received, a decision, an action, an incident):
    the service watched the fleet from then on, failures or not."""
    db = _connect(Path(path))
    try:
        value = db.execute(FIRST_EVENT).fetchone()[0]
    finally:
        db.close()
    return None if value is None else float(value)


def from_journal(
    path: str | Path,
    evidence: Evidence | None = None,
    now: float = 0.0,
    since: float | None = None,
    until: float | None = None,
) -> tuple[list[Incident], list[Exposure], list[JobRun]]:
    """The journal's incidents (oldest first) and Prometheus' exposure and job runs."""
    evidence = evidence or NoEvidence()
    db = _connect(Path(path))
    try:
        rows = db.execute(
            "SELECT * FROM incidents WHERE node != '' ORDER BY opened_at, id"
        ).fetchall()
        incidents = [_incident(db, row, evidence) for row in rows]
        first, latest = db.execute("SELECT MIN(at), MAX(at) FROM decisions").fetchone()
    finally:
        db.close()
    times = [t for t in (latest, first) if t is not None] + [i.onset for i in incidents]
    if not times:
        return incidents, [], []
    # the report's --since/--until, when given, bound what is read: a quarter's review
    # reads exposure from the quarter's start, however long before the journal's first event
    start = min(times) - LOOKBACK_S if since is None else since
    end = max(max(times), now) if until is None else until
    exposure = outages.in_service(evidence.exposure(start, end), incidents)
    return incidents, exposure, evidence.runs(start, end)
