"""Webhook intake: an Alertmanager v4 payload (bytes) to validated Alerts, or a 4xx reason.

The first stop of the data flow inside remediation. Pure: no I/O, so every malformed input
is rejected here with a reason before anything is journaled.
"""

from __future__ import annotations

import json
from typing import Any

from remediation.model import Alert

MAX_ALERTS = 5000
MAX_LABEL = 1024


class IntakeError(ValueError):
    """The payload is not an acceptable Alertmanager webhook; the message is the reason."""

    def __init__(self, reason: str, code: str = "invalid") -> None:
        super().__init__(reason)
        self.code = code


def _str_map(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise IntakeError(f"{where}: expected an object")
    for k, x in v.items():
        if not isinstance(x, str) or len(k) > MAX_LABEL or len(x) > 16 * MAX_LABEL:
            raise IntakeError(f"{where}.{k[:40]}: expected a string value of sane length")
    return dict(v)


def _alert(a: Any, i: int) -> Alert:
    if not isinstance(a, dict):
        raise IntakeError(f"alerts[{i}]: expected an object")
    status, fp, starts = a.get("status"), a.get("fingerprint"), a.get("startsAt")
    if status not in ("firing", "resolved"):
        raise IntakeError(f"alerts[{i}].status: expected firing or resolved")
    if not isinstance(fp, str) or not fp or len(fp) > 128:
        raise IntakeError(f"alerts[{i}].fingerprint: expected a non-empty string")
    if not isinstance(starts, str) or not starts or len(starts) > 64:
        raise IntakeError(f"alerts[{i}].startsAt: expected a timestamp string")
    labels = _str_map(a.get("labels"), f"alerts[{i}].labels")
    if not labels:
        raise IntakeError(f"alerts[{i}].labels: missing")
    return Alert(
        fp, starts, status, labels, _str_map(a.get("annotations"), f"alerts[{i}].annotations")
    )


def parse(body: bytes) -> list[Alert]:
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise IntakeError(f"body is not JSON ({type(e).__name__})", "not_json") from None
    if not isinstance(data, dict):
        raise IntakeError("expected a JSON object (Alertmanager webhook v4)", "schema")
    if str(data.get("version", "4")) != "4":
        raise IntakeError(f"unsupported webhook version {data.get('version')!r}", "version")
    alerts = data.get("alerts")
    if not isinstance(alerts, list):
        raise IntakeError("'alerts' must be a list", "schema")
    if len(alerts) > MAX_ALERTS:
        raise IntakeError(f"too many alerts ({len(alerts)} > {MAX_ALERTS})", "too_many")
    try:
        return [_alert(a, i) for i, a in enumerate(alerts)]
    except IntakeError as e:
        raise IntakeError(str(e), "schema") from None
