"""Events as OTLP log records (``--events-mode otlp``): the OTLP/HTTP JSON mapping, and
delivery through the same outbox to a real loopback receiver.

The request shape was checked once against opentelemetry-proto's own definitions
(``logs/v1/logs.proto``, ``collector/logs/v1/logs_service.proto``, ``common/v1/common.proto``
at commit ac2c4b5, compiled with grpc_tools.protoc and parsed with
``json_format.Parse(..., ignore_unknown_fields=False)``); these tests pin the field names and
JSON types that check accepted, without the proto files (not vendored here).
"""

from __future__ import annotations

import json
from pathlib import Path

from remediation.clock import FakeClock
from remediation.events import cloudevent, otlp
from tests.remediation.events_receiver import Receiver
from tests.remediation.test_events_relay import put_events, relay_on


def event() -> dict[str, object]:
    e = cloudevent.make(
        id="decision-3@x", source="/gpuwarden/remediation", kind="decision",
        time="2026-11-29T10:00:00.250Z", subject_="gpu-node-001/3", partition="gpu-node-001",
        severity="critical", data={"verdict": "allow", "evidence": {"n": 3, "f": 0.5,
                                   "ok": True, "nodes": ["a", 1]}},
    )  # fmt: skip
    return {**e, "sequence": cloudevent.sequence(7)}


def test_one_event_is_one_log_record_in_an_export_logs_service_request():
    headers, body = otlp.logs(event(), 1_800_000_000_000_000_000)
    assert headers == {"Content-Type": "application/json"}
    req = json.loads(body)
    (rl,) = req["resourceLogs"]
    assert rl["resource"]["attributes"] == [
        {"key": "service.name", "value": {"stringValue": "gpuwarden-remediation"}}]  # fmt: skip
    (sl,) = rl["scopeLogs"]
    assert sl["scope"] == {"name": "gpuwarden.remediation.events"}
    (rec,) = sl["logRecords"]
    assert rec["timeUnixNano"] == "1795946400250000000"  # 64-bit integers: decimal strings
    assert rec["observedTimeUnixNano"] == "1800000000000000000"
    assert (rec["severityNumber"], rec["severityText"]) == (17, "critical")  # ERROR
    assert rec["eventName"] == "io.gpuwarden.decision.v1"
    attrs = {a["key"]: a["value"]["stringValue"] for a in rec["attributes"]}
    assert attrs["cloudevents.event_id"] == "decision-3@x"
    assert attrs["cloudevents.event_spec_version"] == "1.0"
    assert attrs["cloudevents.event_subject"] == "gpu-node-001/3"
    assert attrs["gpuwarden.sequence"] == "00000000000000000007"


def test_the_data_becomes_a_structured_body_with_otlp_json_value_types():
    assert otlp.any_value({"n": 3, "f": 0.5, "ok": True, "s": "x", "l": ["a", 1]}) == {
        "kvlistValue": {"values": [
            {"key": "n", "value": {"intValue": "3"}},
            {"key": "f", "value": {"doubleValue": 0.5}},
            {"key": "ok", "value": {"boolValue": True}},
            {"key": "s", "value": {"stringValue": "x"}},
            {"key": "l", "value": {"arrayValue": {"values": [
                {"stringValue": "a"}, {"intValue": "1"}]}}},
        ]}
    }  # fmt: skip


def test_severities_map_to_otlp_severity_numbers_and_none_is_left_unspecified():
    assert otlp.SEVERITY_NUMBER == {"info": 9, "warning": 13, "critical": 17}
    rec = otlp.record({**event(), "severity": ""}, 0)
    assert "severityNumber" not in rec and "severityText" not in rec


def test_otlp_mode_delivers_the_outbox_in_order_to_a_real_receiver(tmp_path: Path):
    receiver = Receiver()
    try:
        clock = FakeClock()
        relay, journal = relay_on(tmp_path, receiver.url, clock, mode="otlp")
        put_events(journal, "n1", 3, clock.now())
        relay.cycle()
        got = receiver.settled()
    finally:
        receiver.stop()
    assert [(d.mode, d.problems) for d in got] == [("otlp", [])] * 3
    assert [d.event["sequence"] for d in got] == sorted(d.event["sequence"] for d in got)
    assert [d.event["id"] for d in got] == ["ev-n1-0", "ev-n1-1", "ev-n1-2"]
