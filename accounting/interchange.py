"""Read the ledger's interchange format: ``gpuwarden.incident/v1`` and
``gpuwarden.exposure/v1`` JSON lines (docs/accounting.md); ``writer`` writes them.

Reading is all or nothing: the first line that does not parse raises ``InterchangeError``
naming ``FILE:LINE`` (1-based) and nothing of the file is returned. Unknown keys are ignored;
blank lines are skipped. Times are RFC 3339 strings (with an offset or ``Z``) or epoch seconds.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Iterator
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from accounting.model import (
    COMPONENTS,
    EXPOSURE_SCHEMA,
    INCIDENT_SCHEMA,
    Exposure,
    Incident,
    JobHit,
)


class InterchangeError(ValueError):
    """A line that does not parse; the message starts with ``FILE:LINE:``."""


# An RFC 3339 time split at its fractional seconds: (up to the seconds, ".digits", offset).
_FRACTION = re.compile(r"(.*?[0-9]{2}:[0-9]{2}:[0-9]{2})(\.[0-9]+)?(.*)", re.S)


class _Bad(Exception):
    pass


def parse_time(value: Any, key: str) -> float:
    if isinstance(value, bool) or value is None:
        raise _Bad(f"{key}: expected an RFC 3339 time or epoch seconds, got {value!r}")
    if isinstance(value, int | float):
        if not math.isfinite(value):
            raise _Bad(f"{key}: time is not finite")
        return float(value)
    if isinstance(value, str):
        try:  # epoch seconds written as a string, as a spreadsheet or CSV export does
            seconds = float(value)
        except ValueError:
            pass
        else:
            if not math.isfinite(seconds):
                raise _Bad(f"{key}: time is not finite")
            return seconds
        # RFC 3339 allows t and z; the fraction is read apart, every digit of it, since
        # datetime keeps only microseconds and an exported time must read back exactly.
        text = value.strip().upper()
        split = _FRACTION.fullmatch(text)
        head, fraction, tail = split.groups("") if split else (text, "", "")
        try:
            parsed = datetime.fromisoformat(head + tail)
        except ValueError:
            raise _Bad(f"{key}: {value!r} is not an RFC 3339 time") from None
        if parsed.tzinfo is None:
            raise _Bad(f"{key}: {value!r} has no UTC offset (RFC 3339 needs one, e.g. Z)")
        seconds = parsed.timestamp()
        return float(Decimal(seconds) + Decimal(f"0{fraction}")) if fraction else seconds
    raise _Bad(f"{key}: expected an RFC 3339 time or epoch seconds, got {value!r}")


def _time_or_none(obj: dict[str, Any], key: str) -> float | None:
    value = obj.get(key)
    return None if value is None else parse_time(value, key)


def _text(obj: dict[str, Any], key: str) -> str:
    value = obj.get(key)
    if isinstance(value, bool) or value is None:
        raise _Bad(f"{key}: missing")
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str) or not value:
        raise _Bad(f"{key}: expected a non-empty string, got {value!r}")
    return value


def _ident(obj: dict[str, Any], key: str) -> str | int:
    value = obj.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if not isinstance(value, str) or not value:
        raise _Bad(f"{key}: expected a non-empty string or an integer, got {value!r}")
    return value


def _text_or_none(obj: dict[str, Any], key: str) -> str | None:
    """Null, absent or "" (a spreadsheet's empty cell) is None."""
    return None if obj.get(key) in (None, "") else _text(obj, key)


def _count(obj: dict[str, Any], key: str) -> int:
    value = obj.get(key)
    if isinstance(value, float) and value.is_integer():
        value = int(value)  # 8.0 from a tool that writes every number as a float
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise _Bad(f"{key}: expected a non-negative integer, got {value!r}")
    return value


def _not_before(later: float | None, earlier: float | None, names: str) -> None:
    if later is not None and earlier is not None and later < earlier:
        raise _Bad(f"{names}: times out of order")


def _job(obj: Any, index: int) -> JobHit:
    if not isinstance(obj, dict):
        raise _Bad(f"jobs[{index}]: expected an object")
    try:
        job = JobHit(
            job_id=_ident(obj, "job_id"),
            gpus=_count(obj, "gpus"),
            interrupted=parse_time(obj.get("interrupted"), "interrupted"),
            resumed=_time_or_none(obj, "resumed"),
            last_checkpoint=_time_or_none(obj, "last_checkpoint"),
            start=_time_or_none(obj, "start"),
            end=_time_or_none(obj, "end"),
        )
        _not_before(job.resumed, job.interrupted, "resumed < interrupted")
        _not_before(job.interrupted, job.last_checkpoint, "interrupted < last_checkpoint")
    except _Bad as exc:
        raise _Bad(f"jobs[{index}].{exc}") from None
    return job


def incident_from(obj: dict[str, Any]) -> Incident:
    component = obj.get("component")
    if component not in COMPONENTS:
        raise _Bad(f"component: {component!r} is not one of {', '.join(COMPONENTS)}")
    jobs = obj.get("jobs", [])
    if not isinstance(jobs, list):
        raise _Bad("jobs: expected a list")
    inc = Incident(
        id=_ident(obj, "id"),
        node=_text(obj, "node"),
        gpu=_text_or_none(obj, "gpu"),
        gpu_model=_text(obj, "gpu_model"),
        component=str(component),
        fault_class=_text_or_none(obj, "fault_class") or "",  # an RMA record may have none
        onset=parse_time(obj.get("onset"), "onset"),
        detected=parse_time(obj.get("detected"), "detected"),
        mitigated=_time_or_none(obj, "mitigated"),
        returned=_time_or_none(obj, "returned"),
        gpus_out=_count(obj, "gpus_out"),
        jobs=tuple(_job(j, i) for i, j in enumerate(jobs)),
    )
    _not_before(inc.detected, inc.onset, "detected < onset")
    _not_before(inc.mitigated, inc.detected, "mitigated < detected")
    _not_before(inc.returned, inc.mitigated if inc.mitigated is not None else inc.onset, "returned")
    return inc


def exposure_from(obj: dict[str, Any]) -> Exposure:
    row = Exposure(
        unit=_ident(obj, "unit"),
        node=_text(obj, "node"),
        gpu=_text_or_none(obj, "gpu"),
        gpu_model=_text(obj, "gpu_model"),
        start=parse_time(obj.get("start"), "start"),
        end=_time_or_none(obj, "end"),
    )
    _not_before(row.end, row.start, "end < start")
    return row


def _objects(lines: Iterable[str], schema: str) -> Iterator[tuple[int, dict[str, Any]]]:
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise _LineBad(lineno, f"not JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise _LineBad(lineno, "expected a JSON object")
        if obj.get("schema") != schema:
            raise _LineBad(lineno, f"schema: expected {schema!r}, got {obj.get('schema')!r}")
        yield lineno, obj


class _LineBad(Exception):
    def __init__(self, lineno: int, why: str) -> None:
        super().__init__(why)
        self.lineno = lineno
        self.why = why


def read_incidents(lines: Iterable[str], name: str = "incidents") -> list[Incident]:
    out: list[Incident] = []
    seen: dict[str | int, int] = {}
    try:
        for lineno, obj in _objects(lines, INCIDENT_SCHEMA):
            try:
                inc = incident_from(obj)
            except _Bad as exc:
                raise _LineBad(lineno, str(exc)) from None
            if inc.id in seen:
                raise _LineBad(lineno, f"id {inc.id!r} already on line {seen[inc.id]}")
            seen[inc.id] = lineno
            out.append(inc)
    except _LineBad as exc:
        raise InterchangeError(f"{name}:{exc.lineno}: {exc.why}") from None
    return out


def read_exposure(lines: Iterable[str], name: str = "exposure") -> list[Exposure]:
    out: list[Exposure] = []
    by_unit: dict[str | int, list[tuple[int, Exposure]]] = {}
    try:
        for lineno, obj in _objects(lines, EXPOSURE_SCHEMA):
            try:
                row = exposure_from(obj)
            except _Bad as exc:
                raise _LineBad(lineno, str(exc)) from None
            for other_line, other in by_unit.get(row.unit, []):
                if _overlap(row, other):
                    raise _LineBad(
                        lineno, f"unit {row.unit!r} overlaps its interval on line {other_line}"
                    )
            by_unit.setdefault(row.unit, []).append((lineno, row))
            out.append(row)
    except _LineBad as exc:
        raise InterchangeError(f"{name}:{exc.lineno}: {exc.why}") from None
    return out


def _overlap(a: Exposure, b: Exposure) -> bool:
    a_end = math.inf if a.end is None else a.end
    b_end = math.inf if b.end is None else b.end
    return a.start < b_end and b.start < a_end


def _decoded(raw_lines: Iterable[bytes], name: str) -> Iterator[str]:
    """Each line as UTF-8 (a byte-order mark on the first, as Windows tools write, is
    dropped); a line that is not UTF-8 is a malformed line, named like the others."""
    for lineno, raw in enumerate(raw_lines, start=1):
        try:
            yield raw.decode("utf-8-sig" if lineno == 1 else "utf-8")
        except UnicodeDecodeError:
            raise InterchangeError(f"{name}:{lineno}: not UTF-8") from None


def load_incidents(path: str | Path) -> list[Incident]:
    with open(path, "rb") as fh:
        return read_incidents(_decoded(fh, str(path)), str(path))


def load_exposure(path: str | Path) -> list[Exposure]:
    with open(path, "rb") as fh:
        return read_exposure(_decoded(fh, str(path)), str(path))
