"""Build a report from interchange lines, as the CLI does from files."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from accounting import report
from accounting.interchange import read_exposure, read_incidents
from gpuwarden import remediation_service
from remediation.service import Service
from tests.realcomp import Prometheus, run_prometheus, serve_expositions
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


@contextlib.contextmanager
def prometheus_scraping(body: bytes, ready: str) -> Iterator[Prometheus]:
    """A real Prometheus scraping ``body`` (one stand-in target, every second), yielded once
    ``ready`` (a PromQL expression) returns something."""
    with serve_expositions({"/metrics": body}) as port:
        config = (
            "global: {scrape_interval: 1s}\n"
            "scrape_configs: [{job_name: node, static_configs: "
            f"[{{targets: ['127.0.0.1:{port}']}}]}}]\n"
        )
        with run_prometheus(config) as p:
            p.wait_for(ready, 60)
            yield p
