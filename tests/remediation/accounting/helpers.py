"""Build a report from interchange lines, as the CLI does from files."""

from __future__ import annotations

import json
from typing import Any

from remediation.accounting import report
from remediation.accounting.interchange import read_exposure, read_incidents


def report_of(incidents: list[dict], exposure: list[dict], **kw: Any) -> dict[str, Any]:
    incs = read_incidents([json.dumps(o) for o in incidents], "incidents")
    rows = read_exposure([json.dumps(o) for o in exposure], "exposure")
    return report.to_json(report.build(incs, rows, **kw))


def cell(doc: dict, model: str, component: str) -> dict:
    (found,) = [c for c in doc["mtbf"] if c["gpu_model"] == model and c["component"] == component]
    return found
