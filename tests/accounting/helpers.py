"""Build a report from interchange lines, as the CLI does from files."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from accounting import report
from accounting.interchange import read_exposure, read_incidents
from gpuwarden import remediation_service
from remediation.service import Service
from tests.remediation import helpers as remediation_helpers


def report_of(incidents: list[dict], exposure: list[dict], **kw: Any) -> dict[str, Any]:
    incs = read_incidents([json.dumps(o) for o in incidents], "incidents")
    rows = read_exposure([json.dumps(o) for o in exposure], "exposure")
    return report.to_json(report.build(incs, rows, **kw))


def cell(doc: dict, model: str, component: str) -> dict:
    (found,) = [c for c in doc["mtbf"] if c["gpu_model"] == model and c["component"] == component]
    return found


def service(tmp: Path, **kw: Any) -> Service:
    """The remediation service as the umbrella assembles it: with accounting's collector."""
    return remediation_helpers.service(tmp, collectors=remediation_service.collectors, **kw)
