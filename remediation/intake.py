"""Webhook intake: an Alertmanager v4 payload (bytes) to validated Alerts, or a 4xx reason.

The first stop of the data flow inside remediation. Pure: no I/O, so every malformed input
is rejected here with a reason before anything is journaled.
"""

from __future__ import annotations

import json
import re
from typing import Any

from remediation.model import Alert

MAX_ALERTS = 5000
MAX_LABEL = 1024


class IntakeError(ValueError):
    """The payload is not an acceptable Alertmanager webhook; the message is the reason."""

    def __init__(self, reason: str, code: str = "invalid") -> None:
        super().__init__(reason)
        self.code = code


# Text that cannot be stored or shown as is: lone UTF-16 surrogates (valid JSON escapes,
# not encodable as UTF-8), NUL and the other C0/C1 control characters.
_LABEL_BAD = re.compile(r"[\ud800-\udfff\x00-\x1f\x7f-\x9f]")
_TEXT_BAD = re.compile(r"[\ud800-\udfff\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # \t \n \r kept


def _bad_text(text: str, pattern: re.Pattern[str]) -> str:
    m = pattern.search(text)
    return "" if m is None else f"U+{ord(m.group()):04X}"


def _str_map(v: Any, where: str, annotations: bool = False) -> dict[str, str]:
    """Labels are identity: one that cannot be stored exactly is a 400 with the reason.
    Annotations are prose: bad characters become U+FFFD (stored safely, shown as such)."""
    if v is None:
        return {}
    if not isinstance(v, dict):
        raise IntakeError(f"{where}: expected an object")
    out = {}
    for k, x in v.items():
        if not isinstance(x, str) or len(k) > MAX_LABEL or len(x) > 16 * MAX_LABEL:
            raise IntakeError(f"{where}.{_safe(k)}: expected a string value of sane length")
        bad = _bad_text(k, _LABEL_BAD)
        if bad:
            raise IntakeError(f"{where}: a name holds {bad}, which a label name cannot")
        if annotations:
            x = _TEXT_BAD.sub("\ufffd", x)
        elif bad := _bad_text(x, _LABEL_BAD):
            raise IntakeError(f"{where}.{_safe(k)}: the value holds {bad} (not storable text)")
        out[k] = x
    return out


def _safe(k: str) -> str:
    return _LABEL_BAD.sub("?", k[:40])


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
    for name, text in (("fingerprint", fp), ("startsAt", starts)):
        if bad := _bad_text(text, _LABEL_BAD):
            raise IntakeError(f"alerts[{i}].{name}: holds {bad}")
    notes = _str_map(a.get("annotations"), f"alerts[{i}].annotations", annotations=True)
    ends = a.get("endsAt")  # only orders a resolve: one that cannot be read is left out
    if not isinstance(ends, str) or len(ends) > 64 or _bad_text(ends, _LABEL_BAD):
        ends = ""
    return Alert(fp, starts, status, labels, notes, ends)


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
