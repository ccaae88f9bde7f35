"""The same events as OTLP log records (OTLP/HTTP with JSON, one record per request; pure).

``--events-mode otlp`` with ``--events-url`` an OTLP/HTTP logs endpoint (an OpenTelemetry
Collector's ``http://HOST:4318/v1/logs``): each outbox event becomes an
``ExportLogsServiceRequest`` holding one ``LogRecord``, so the outbox's order, retries and
dead letters hold unchanged (OTLP/HTTP answers 400 for bad data, 429/502/503/504 for
"retry"). Field names from opentelemetry-proto (``opentelemetry/proto/logs/v1/logs.proto``,
``collector/logs/v1/logs_service.proto``, ``common/v1/common.proto``) in the OTLP JSON
mapping (lowerCamelCase names, 64-bit integers as decimal strings, enums as numbers); the
CloudEvents attributes as the OpenTelemetry semantic conventions' ``cloudevents.*``
attributes; the event's ``data`` as a structured body.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

CONTENT_TYPE = "application/json"
SCOPE = "gpuwarden.remediation.events"
# logs.proto SeverityNumber: INFO 9, WARN 13, ERROR 17 (the alert rules' severities)
SEVERITY_NUMBER = {"info": 9, "warning": 13, "critical": 17}


def any_value(v: Any) -> dict[str, Any]:
    """common.proto AnyValue in OTLP JSON."""
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, Mapping):
        return {"kvlistValue": {"values": [{"key": str(k), "value": any_value(x)}
                                           for k, x in v.items()]}}  # fmt: skip
    if isinstance(v, (list, tuple)):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    if v is None:
        return {}
    return {"stringValue": str(v)}


def _nanos(rfc3339: str) -> str:
    try:
        t = datetime.fromisoformat(rfc3339.replace("Z", "+00:00"))
    except (ValueError, AttributeError):
        return "0"
    return str(int(t.timestamp()) * 1_000_000_000 + t.microsecond * 1000)


def _attr(key: str, value: str) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": value}}


def record(event: Mapping[str, Any], observed_ns: int) -> dict[str, Any]:
    """One LogRecord for one CloudEvent."""
    names = {"id": "cloudevents.event_id", "source": "cloudevents.event_source",
             "specversion": "cloudevents.event_spec_version",
             "type": "cloudevents.event_type", "subject": "cloudevents.event_subject",
             "partitionkey": "gpuwarden.node", "sequence": "gpuwarden.sequence",
             "gpuwardenkind": "gpuwarden.kind"}  # fmt: skip
    attrs = [_attr(k, str(event[a])) for a, k in names.items() if event.get(a)]
    severity = str(event.get("severity") or "")
    rec: dict[str, Any] = {
        "timeUnixNano": _nanos(str(event.get("time", ""))),
        "observedTimeUnixNano": str(observed_ns),
        "eventName": str(event.get("type", "")),
        "attributes": attrs,
        "body": any_value(event.get("data")),
    }
    if severity:
        rec["severityText"] = severity
        rec["severityNumber"] = SEVERITY_NUMBER.get(severity, 0)
    return rec


def logs(event: Mapping[str, Any], observed_ns: int) -> tuple[dict[str, str], bytes]:
    """(headers, body): an ExportLogsServiceRequest with this event's record."""
    request = {
        "resourceLogs": [{
            "resource": {"attributes": [_attr("service.name", "gpuwarden-remediation")]},
            "scopeLogs": [{"scope": {"name": SCOPE}, "logRecords": [record(event, observed_ns)]}],
        }]
    }  # fmt: skip
    return {"Content-Type": CONTENT_TYPE}, json.dumps(request, separators=(",", ":")).encode()
