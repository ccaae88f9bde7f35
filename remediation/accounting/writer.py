"""Write the ledger as ``gpuwarden.incident/v1`` and ``gpuwarden.exposure/v1`` JSON lines
(docs/accounting.md); ``interchange`` reads them back to the same records."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any, TextIO

from remediation.accounting.model import (
    EXPOSURE_SCHEMA,
    INCIDENT_SCHEMA,
    Exposure,
    Incident,
    JobHit,
)


def format_time(t: float | None) -> str | None:
    if t is None:
        return None
    text = datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="microseconds")
    text = text.replace(".000000", "")
    return text.replace("+00:00", "Z")


def incident_line(inc: Incident) -> dict[str, Any]:
    return {
        "schema": INCIDENT_SCHEMA,
        "id": inc.id,
        "node": inc.node,
        "gpu": inc.gpu,
        "gpu_model": inc.gpu_model,
        "component": inc.component,
        "fault_class": inc.fault_class,
        "onset": format_time(inc.onset),
        "detected": format_time(inc.detected),
        "mitigated": format_time(inc.mitigated),
        "returned": format_time(inc.returned),
        "gpus_out": inc.gpus_out,
        "jobs": [_job_line(j) for j in inc.jobs],
    }


def _job_line(job: JobHit) -> dict[str, Any]:
    line: dict[str, Any] = {
        "job_id": job.job_id,
        "gpus": job.gpus,
        "interrupted": format_time(job.interrupted),
        "resumed": format_time(job.resumed),
        "last_checkpoint": format_time(job.last_checkpoint),
    }
    if job.start is not None:
        line["start"] = format_time(job.start)
    if job.end is not None:
        line["end"] = format_time(job.end)
    return line


def exposure_line(row: Exposure) -> dict[str, Any]:
    return {
        "schema": EXPOSURE_SCHEMA,
        "unit": row.unit,
        "node": row.node,
        "gpu": row.gpu,
        "gpu_model": row.gpu_model,
        "start": format_time(row.start),
        "end": format_time(row.end),
    }


def write_lines(out: TextIO, objects: Iterable[dict[str, Any]]) -> None:
    for obj in objects:
        out.write(json.dumps(obj, sort_keys=False) + "\n")
