"""The events' wire format against CloudEvents 1.0 and its HTTP protocol binding."""

from __future__ import annotations

import json

import pytest

from remediation.events import cloudevent
from tests.remediation.events_receiver import decode


def event(**changes: object) -> dict[str, object]:
    args: dict[str, object] = dict(
        id="finding-7@abc", source="/gpuwarden/remediation", kind="finding",
        time="2026-11-29T10:00:00Z", data={"status": "firing", "labels": {"gpu": "3"}},
        subject_="gpu-node-001/3", partition="gpu-node-001", severity="critical",
    )  # fmt: skip
    args.update(changes)
    return cloudevent.make(**args)  # type: ignore[arg-type]


def test_every_event_carries_the_four_required_attributes_and_a_versioned_type():
    e = event()
    assert {k: e[k] for k in ("id", "source", "specversion")} == {
        "id": "finding-7@abc", "source": "/gpuwarden/remediation", "specversion": "1.0"
    }  # fmt: skip
    assert e["type"] == "io.gpuwarden.finding.v1"
    assert cloudevent.TYPES == {
        "finding": "io.gpuwarden.finding.v1", "decision": "io.gpuwarden.decision.v1",
        "action": "io.gpuwarden.action.v1", "maintenance": "io.gpuwarden.maintenance.v1",
    }  # fmt: skip
    assert cloudevent.problems(e) == []


def test_attribute_names_are_lower_case_letters_and_digits_of_at_most_twenty_characters():
    e = {**event(), "sequence": cloudevent.sequence(5)}
    for name in e:
        assert name.isalnum() and name == name.lower() and len(name) <= 20, name


def test_an_event_without_an_id_or_with_an_upper_case_attribute_is_refused():
    with pytest.raises(ValueError, match="id: required"):
        event(id="")
    assert cloudevent.problems({**event(), "Node": "x"}) == [
        "Node: attribute names are lower-case letters and digits"
    ]


def test_subject_is_the_node_or_the_node_and_its_gpu():
    assert cloudevent.subject("gpu-node-001") == "gpu-node-001"
    assert cloudevent.subject("gpu-node-001", "3") == "gpu-node-001/3"
    assert "subject" not in event(subject_="", partition="")  # a cluster event: no subject


def test_binary_mode_puts_attributes_in_ce_headers_and_the_data_in_the_body():
    headers, body = cloudevent.binary({**event(), "sequence": cloudevent.sequence(42)})
    assert headers["Content-Type"] == "application/json"
    assert "ce-datacontenttype" not in headers  # the binding: Content-Type carries it
    assert headers["ce-specversion"] == "1.0"
    assert headers["ce-type"] == "io.gpuwarden.finding.v1"
    assert headers["ce-subject"] == "gpu-node-001/3"
    assert headers["ce-partitionkey"] == "gpu-node-001"
    assert headers["ce-sequence"] == "00000000000000000042"
    assert json.loads(body) == {"status": "firing", "labels": {"gpu": "3"}}


def test_binary_header_values_are_percent_encoded_as_the_binding_says():
    # the binding's own example: "Euro € 😀" -> "Euro%20%E2%82%AC%20%F0%9F%98%80"
    headers, _ = cloudevent.binary(event(subject_='Euro € 😀 "x" 100%'))
    assert headers["ce-subject"] == "Euro%20%E2%82%AC%20%F0%9F%98%80%20%22x%22%20100%25"
    assert all(0x21 <= ord(c) <= 0x7E for v in headers.values() for c in v)


def test_structured_mode_sends_the_whole_event_as_application_cloudevents_json():
    e = event()
    headers, body = cloudevent.structured(e)
    assert headers == {"Content-Type": "application/cloudevents+json; charset=utf-8"}
    assert json.loads(body) == e


@pytest.mark.parametrize("mode", ["binary", "structured"])
def test_a_conforming_receiver_reads_back_the_same_event_in_either_mode(mode: str):
    e = {**event(subject_="nœud 7/3"), "sequence": cloudevent.sequence(9)}
    headers, body = cloudevent.MODES[mode](e)
    got, seen_mode, problems = decode({k.lower(): v for k, v in headers.items()}, body)
    assert (seen_mode, problems) == (mode, [])
    if mode == "structured":
        assert got == e
    else:
        assert got == {**e, "datacontenttype": "application/json"}
