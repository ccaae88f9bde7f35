"""One CloudEvent and its two HTTP content modes (pure; no I/O).

Where it sits: the outbox (outbox.py) stores each event as the JSON this module makes; the
relay (relay.py) sends it in binary or structured mode. Taken from the CloudEvents 1.0
specification (github.com/cloudevents/spec, cloudevents/spec.md: required attributes id,
source, specversion, type; attribute names lower-case a-z/0-9) and its HTTP protocol binding
(cloudevents/bindings/http-protocol-binding.md): binary mode puts every attribute but
``datacontenttype`` in a ``ce-<name>`` header, percent-encoding space, double-quote,
percent and anything outside printable ASCII, and ``datacontenttype`` in ``Content-Type``;
structured mode sends the whole event as ``application/cloudevents+json``.

Extensions used: ``partitionkey`` (the partitioning extension: the node, the unit of
ordering), ``sequence`` (the sequence extension: the outbox position, zero-padded so it
orders lexicographically), ``severity`` and ``gpuwardenkind`` (ours).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

SPECVERSION = "1.0"
TYPE_PREFIX = "io.gpuwarden."
# Kinds of event and the versioned CloudEvents ``type`` of each. A change that breaks a
# consumer gets a new version (``.v2``) beside the old, never an edit of the old.
KINDS = ("finding", "decision", "action", "maintenance")
TYPES = {k: f"{TYPE_PREFIX}{k}.v1" for k in KINDS}
JSON = "application/json"
STRUCTURED = "application/cloudevents+json; charset=utf-8"
REQUIRED = ("id", "source", "specversion", "type")
_NAME = re.compile(r"^[a-z0-9]+$")
SEQUENCE_DIGITS = 20  # 2**63 has 19 digits: every outbox position fits, zero-padded


def sequence(seq: int) -> str:
    return str(seq).zfill(SEQUENCE_DIGITS)


def subject(node: str, gpu: str = "") -> str:
    """``node`` or ``node/gpu`` (a GPU's index or UUID, as the finding's ``gpu`` label)."""
    return f"{node}/{gpu}" if node and gpu else node


def problems(event: Mapping[str, Any]) -> list[str]:
    """What makes ``event`` not a valid CloudEvents 1.0 event (empty when valid)."""
    out = [f"{a}: required" for a in REQUIRED if not isinstance(event.get(a), str) or not event[a]]
    if event.get("specversion") not in (None, SPECVERSION):
        out.append(f"specversion: {event.get('specversion')!r} is not {SPECVERSION}")
    for name, value in event.items():
        if name in ("data", "data_base64"):
            continue
        if not _NAME.match(name):
            out.append(f"{name}: attribute names are lower-case letters and digits")
        if value is None:
            out.append(f"{name}: null is not an attribute value (omit it)")
        elif not isinstance(value, (str, int, bool)):
            out.append(f"{name}: {type(value).__name__} is not an attribute type")
    for name in ("subject", "time", "datacontenttype", "partitionkey", "sequence"):
        if name in event and event[name] == "":
            out.append(f"{name}: if present, must be non-empty")
    return out


def make(
    *,
    id: str,
    source: str,
    kind: str,
    time: str,
    data: Mapping[str, Any],
    subject_: str = "",
    partition: str = "",
    seq: int | None = None,
    severity: str = "",
) -> dict[str, Any]:
    """A CloudEvent with JSON ``data``: optional attributes left out when empty."""
    event: dict[str, Any] = {
        "specversion": SPECVERSION,
        "id": id,
        "source": source,
        "type": TYPES[kind],
        "time": time,
        "datacontenttype": JSON,
        "gpuwardenkind": kind,
    }
    optional = {"subject": subject_, "partitionkey": partition, "severity": severity}
    event.update({k: v for k, v in optional.items() if v})
    if seq is not None:
        event["sequence"] = sequence(seq)
    event["data"] = dict(data)
    bad = problems(event)
    if bad:
        raise ValueError(f"not a CloudEvent: {'; '.join(bad)}")
    return event


def _percent(value: str) -> str:
    """The HTTP binding's header encoding (section 3.1.3.2): space, '"', '%' and every
    character outside U+0021..U+007E percent-encoded (UTF-8 bytes, upper-case hex)."""
    out: list[str] = []
    for ch in value:
        if ch in ' "%' or not 0x21 <= ord(ch) <= 0x7E:
            out.extend(f"%{b:02X}" for b in ch.encode("utf-8"))
        else:
            out.append(ch)
    return "".join(out)


def _text(value: Any) -> str:
    """An attribute's canonical string (booleans as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def binary(event: Mapping[str, Any]) -> tuple[dict[str, str], bytes]:
    """(headers, body) in binary content mode: the data is the body."""
    headers = {"Content-Type": str(event.get("datacontenttype") or JSON)}
    for name, value in event.items():
        if name not in ("data", "data_base64", "datacontenttype"):
            headers[f"ce-{name}"] = _percent(_text(value))
    return headers, json.dumps(event.get("data"), separators=(",", ":")).encode()


def structured(event: Mapping[str, Any]) -> tuple[dict[str, str], bytes]:
    """(headers, body) in structured content mode (the JSON event format)."""
    body = json.dumps(dict(event), separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return {"Content-Type": STRUCTURED}, body


MODES = {"binary": binary, "structured": structured}
