"""Paging a human when the storm breaker opens: an alert posted to Alertmanager's v2 API.

The breaker metric (``gpuwarden_remediation_breaker_open``) is the other half; this is for
setups where remediation should not wait for a Prometheus rule. Best effort: a failed page is
logged, never blocks a decision.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from datetime import UTC, datetime, timedelta
from typing import Protocol

log = logging.getLogger("gpuwarden.remediation")
ALERTNAME = "GpuwardenRemediationBreakerOpen"


class Pager(Protocol):
    def page(self, summary: str, hold_s: float) -> None: ...


class NoPager:
    def page(self, summary: str, hold_s: float) -> None:
        log.warning("storm breaker open: %s", summary)


class AlertmanagerPager:
    def __init__(self, url: str, timeout: float = 3.0) -> None:
        self.url, self.timeout = url.rstrip("/"), timeout

    def page(self, summary: str, hold_s: float) -> None:
        now = datetime.now(UTC)
        alert = {
            "labels": {"alertname": ALERTNAME, "severity": "critical", "component": "remediation"},
            "annotations": {
                "summary": summary,
                "description": "gpuwarden stopped acting; it resumes by itself "
                "after a quiet period. Check the fleet.",
            },
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(seconds=hold_s)).isoformat(),
        }
        req = urllib.request.Request(
            f"{self.url}/api/v2/alerts",
            data=json.dumps([alert]).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout):
                pass
        except OSError as e:
            log.error("could not page through Alertmanager: %s", e)
