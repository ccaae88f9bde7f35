"""Write the ledger as ``gpuwarden.incident/v1`` and ``gpuwarden.exposure/v1`` JSON lines
(docs/accounting.md); ``interchange`` reads them back to the same records."""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any, TextIO

from accounting.model import (
    EXPOSURE_SCHEMA,
    INCIDENT_SCHEMA,
    Exposure,
    Incident,
    JobHit,
)


def format_time(t: float | None) -> str | None:
    """RFC 3339 to the microsecond, for people (the text report's header)."""
    if t is None:
        return None
    text = datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="microseconds")
    text = text.replace(".000000", "")
    return text.replace("+00:00", "Z")


def exact_time(t: float | None) -> str | None:
    """RFC 3339 with as many fractional digits as the float needs to read back as itself
    (``interchange.parse_time`` reads them all), so that exported lines give the same
    report: journal times come from ``time.time()`` and have sub-microsecond digits."""
    if t is None:
        return None
    shortest = Decimal(repr(float(t)))  # the shortest decimal that reads back as t
    whole = math.floor(shortest)
    digits = str(shortest - whole).partition(".")[2].rstrip("0")
    text = datetime.fromtimestamp(whole, tz=UTC).isoformat().replace("+00:00", "")
    return f"{text}.{digits}Z" if digits else f"{text}Z"


def incident_line(inc: Incident) -> dict[str, Any]:
    return {
        "schema": INCIDENT_SCHEMA,
        "id": inc.id,
        "node": inc.node,
        "gpu": inc.gpu,
        "gpu_model": inc.gpu_model,
        "component": inc.component,
        "fault_class": inc.fault_class,
        "onset": exact_time(inc.onset),
        "detected": exact_time(inc.detected),
        "mitigated": exact_time(inc.mitigated),
        "returned": exact_time(inc.returned),
        "gpus_out": inc.gpus_out,
        "jobs": [_job_line(j) for j in inc.jobs],
    }


def _job_line(job: JobHit) -> dict[str, Any]:
    line: dict[str, Any] = {
        "job_id": job.job_id,
        "gpus": job.gpus,
        "interrupted": exact_time(job.interrupted),
        "resumed": exact_time(job.resumed),
        "last_checkpoint": exact_time(job.last_checkpoint),
    }
    if job.start is not None:
        line["start"] = exact_time(job.start)
    if job.end is not None:
        line["end"] = exact_time(job.end)
    return line


def exposure_line(row: Exposure) -> dict[str, Any]:
    return {
        "schema": EXPOSURE_SCHEMA,
        "unit": row.unit,
        "node": row.node,
        "gpu": row.gpu,
        "gpu_model": row.gpu_model,
        "start": exact_time(row.start),
        "end": exact_time(row.end),
    }


def write_lines(out: TextIO, objects: Iterable[dict[str, Any]]) -> None:
    for obj in objects:
        out.write(json.dumps(obj, sort_keys=False) + "\n")
