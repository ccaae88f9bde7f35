"""Parser for NVIDIA Health Validation's node verdict (one JSON ``NodeVerdict`` on stdout).

NVIDIA Health Validation (github.com/dsx-ai-factory/health-validation; documentation at
docs.nvidia.com/health-validation) evaluates one node's GPUs, NVLink, CPU/NUMA, Xid events and
InfiniBand links against its check catalogue, writes a single JSON ``NodeVerdict`` to stdout
and exits: 0 for PASS, INFO and WARNING, 1 for CRITICAL and UNKNOWN, 2 when it produced no
verdict at all. Origins of each fact and of the fixtures: ``fixtures/validation/README.md``.

What is read (a verdict whose repository schema, ``node-verdict.schema.json``, was not at hand:
the keys marked *assumed* follow the documented Go types' naming, snake_case JSON names, and
are the first thing to check against a real verdict):

- ``overall_severity``: PASS, INFO, WARNING, CRITICAL or UNKNOWN (the documented ``Severity``
  values). PASS and INFO pass; WARNING passes with a ``warn`` check whose detail keeps the
  warning (as ``dcgmi diag``'s warnings do); CRITICAL fails; UNKNOWN fails too: the node's
  health could not be assessed, and a node nobody could assess is not released.
- ``schema_version`` (*assumed*): when present, its major version must be 1; absent is read.
- ``checks`` (*assumed*): the per-check verdicts, each with ``check_id`` (a catalogue ID such
  as ``gpu_xid_48`` or ``nvlink_active``), ``severity``, and optionally ``entity`` (the GPU
  index, or its UUID), ``message``, ``recommended_action`` (``operational_state`` and
  ``steps``, the documented remediation vocabulary: ``drain``, then ``reset_gpu`` ->
  ``restart_os`` -> ``service_required``) and ``measurements`` (name -> number).
- ``affected_components`` (the documented ``AffectedComponent``: ``category``, ``check_ids``,
  ``entities``, ``max_severity``; the list's key is *assumed*): read when ``checks`` is absent,
  one check per category.

Each non-passing check verdict becomes a :class:`Check` named by its check ID, with the GPU
(when the entity is an index) and, in its detail, the message, the recommended action and the
gpuwarden action each step corresponds to (``reset_gpu`` -> ``reset_gpu``, ``restart_os`` ->
``reboot``, ``service_required`` -> ``inspect``, operational state ``drain`` -> ``drain``):
what an operator reads; remediation's policy is not changed by it. Numeric measurements become
``<check_id>.<name>`` (``<check_id>.gpu<N>.<name>`` per GPU index, ``<check_id>.<entity>.<name>``
for another entity such as a GPU UUID), and the counts
``critical_checks``, ``warning_checks``, ``unknown_checks``.

Never a pass: empty output (health-validation's exit 2 writes no verdict), text that is not
one JSON object, an unknown schema major version, a missing or unknown ``overall_severity``,
and a verdict that contradicts itself (a failing check under an overall PASS, INFO or WARNING).

Only ``overall_severity`` is confirmed by NVIDIA's documentation (its FAQ: read it for the
precise level), so only it decides. The per-check details are read leniently: an entry whose
shape is not the assumed one (no ``check_id``, a severity that is not one of the five, an
action or measurements of another shape) does not fail a node the tool passed; it becomes a
``warn`` check that quotes the entry, so a schema that differs from the assumed one shows up
in the suite's evidence instead of failing every node.
"""

from __future__ import annotations

import json
import re
from typing import Any

from remediation.validation.results import Check, ParseError, ToolResult

TOOL = "health-validation"
SEVERITIES = ("PASS", "INFO", "WARNING", "CRITICAL", "UNKNOWN")
_STATUS = {"PASS": "pass", "INFO": "pass", "WARNING": "warn", "CRITICAL": "fail", "UNKNOWN": "fail"}
SUPPORTED_MAJOR = 1
# Health Validation's remediation vocabulary -> gpuwarden's actions (remediation.model.ACTIONS)
GPUWARDEN_ACTION = {
    "drain": "drain",
    "reset_gpu": "reset_gpu",
    "restart_os": "reboot",
    "service_required": "inspect",
}
_GPU_INDEX = re.compile(r"^(?:gpu[\s:_#-]*)?(?P<i>\d+)$", re.I)
OVERALL = "node verdict"


def _load(text: str) -> dict[str, Any]:
    if not text.strip():
        raise ParseError(
            "no verdict: empty output (health-validation exits 2 when it produces none)"
        )
    start = text.find("{")
    if start < 0:
        raise ParseError(f"no verdict: no JSON object in the output ({text.strip()[:80]!r})")
    try:
        doc, end = json.JSONDecoder().raw_decode(text, start)
    except json.JSONDecodeError as e:
        raise ParseError(f"NodeVerdict is not valid JSON (cut off or garbled): {e}") from None
    if text[end:].strip():
        raise ParseError("text after the NodeVerdict (expected one JSON object alone)")
    assert isinstance(doc, dict)  # decoded from a "{": an object or an error above
    return doc


def _check_version(doc: dict[str, Any]) -> None:
    if "schema_version" not in doc:
        return
    raw = doc["schema_version"]
    m = re.match(r"^v?(\d+)(?:\.\d+)*$", str(raw).strip()) if not isinstance(raw, bool) else None
    if m is None or int(m.group(1)) != SUPPORTED_MAJOR:
        raise ParseError(
            f"unsupported NodeVerdict schema_version {raw!r} (this parser reads {SUPPORTED_MAJOR}.x)"
        )


def _severity(value: Any, where: str) -> str:
    if not isinstance(value, str) or value.strip().upper() not in SEVERITIES:
        raise ParseError(f"{where}: {value!r} is not one of {', '.join(SEVERITIES)}")
    return value.strip().upper()


def _known(value: Any) -> bool:
    return isinstance(value, str) and value.strip().upper() in SEVERITIES


def _unread(where: str, raw: Any) -> Check:
    """A part of the verdict in another shape than the assumed one: shown, never failing."""
    quoted = json.dumps(raw, sort_keys=True, default=str)
    return Check(f"unread {where}", "warn", (), f"not in the assumed shape: {quoted[:160]}")


def _gpus(entity: Any) -> tuple[int, ...]:
    if isinstance(entity, int) and not isinstance(entity, bool):
        return (entity,)
    m = _GPU_INDEX.match(str(entity).strip()) if isinstance(entity, str) else None
    return (int(m.group("i")),) if m else ()


def _action(raw: Any) -> tuple[str | None, list[str]]:
    """(operational state, steps) of a recommended action."""
    if raw is None:
        return None, []
    if isinstance(raw, str):
        return None, [raw]
    if isinstance(raw, list) and all(isinstance(s, str) for s in raw):
        return None, list(raw)
    if isinstance(raw, dict):
        state = raw.get("operational_state")
        steps = raw.get("steps") or []
        state_ok = state is None or isinstance(state, str)
        if state_ok and isinstance(steps, list) and all(isinstance(s, str) for s in steps):
            return state, list(steps)
    return None, [f"unread ({json.dumps(raw)[:80]})"]


def _ours(word: str) -> str:
    return GPUWARDEN_ACTION.get(word, f"{word} (no gpuwarden action)")


def _describe_action(state: str | None, steps: list[str]) -> str:
    """``recommended: drain, then reset_gpu -> service_required (gpuwarden: drain, then
    reset_gpu -> inspect)``; empty when the check recommends nothing."""
    if not state and not steps:
        return ""
    theirs, ours = " -> ".join(steps), " -> ".join(map(_ours, steps))
    if state:
        theirs = f"{state}, then {theirs}" if steps else state
        ours = f"{_ours(state)}, then {ours}" if steps else _ours(state)
    return f"recommended: {theirs} (gpuwarden: {ours})"


def _measurements(raw: Any, prefix: str, out: dict[str, float]) -> None:
    if raw is None:
        return
    if not isinstance(raw, dict):
        return  # another shape than the assumed one: not read (the overall decides)
    for name, value in raw.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            out[f"{prefix}.{name}"] = float(value)


def _from_checks(entries: Any, measurements: dict[str, float]) -> tuple[list[Check], list[str]]:
    if not isinstance(entries, list):
        return [_unread("checks", entries)], []
    checks: list[Check] = []
    severities: list[str] = []
    for i, entry in enumerate(entries):
        where = f"checks[{i}]"
        check_id = entry.get("check_id") if isinstance(entry, dict) else None
        raw_severity = entry.get("severity") if isinstance(entry, dict) else None
        if not isinstance(check_id, str) or not check_id or not _known(raw_severity):
            checks.append(_unread(where, entry))
            continue
        assert isinstance(entry, dict)
        severity = _severity(raw_severity, f"{where} ({check_id}).severity")
        severities.append(severity)
        entity = entry.get("entity")
        gpus = _gpus(entity)
        if gpus:
            prefix = f"{check_id}.gpu{gpus[0]}"
        elif entity not in (None, ""):
            prefix = f"{check_id}.{entity}"
        else:
            prefix = check_id
        _measurements(entry.get("measurements"), prefix, measurements)
        if severity in ("PASS", "INFO"):
            continue
        parts = [severity]
        if entity not in (None, "") and not gpus:
            parts.append(f"entity {entity}")
        message = entry.get("message")
        if isinstance(message, str) and message:
            parts.append(message)
        action = _describe_action(*_action(entry.get("recommended_action")))
        if action:
            parts.append(action)
        if severity == "UNKNOWN":
            parts.append("not assessed: failed closed")
        checks.append(Check(check_id, _STATUS[severity], gpus, "; ".join(parts)))
    return checks, severities


def _from_components(entries: Any) -> tuple[list[Check], list[str]]:
    if not isinstance(entries, list):
        return [_unread("affected_components", entries)], []
    checks: list[Check] = []
    severities: list[str] = []
    for i, entry in enumerate(entries):
        where = f"affected_components[{i}]"
        if not isinstance(entry, dict) or not _known(entry.get("max_severity")):
            checks.append(_unread(where, entry))
            continue
        severity = _severity(entry.get("max_severity"), f"{where}.max_severity")
        severities.append(severity)
        ids = [str(c) for c in entry.get("check_ids") or []]
        entities = [str(e) for e in entry.get("entities") or []]
        gpus = tuple(sorted({g for e in entities for g in _gpus(e)}))
        if severity in ("PASS", "INFO"):
            continue
        name = str(entry.get("category") or "uncategorised")
        detail = f"{severity}; checks {', '.join(ids) or '?'}"
        if entities:
            detail += f"; entities {', '.join(entities)}"
        checks.append(Check(name, _STATUS[severity], gpus, detail))
    return checks, severities


def parse_health_validation(text: str) -> ToolResult:
    doc = _load(text)
    _check_version(doc)
    if "overall_severity" not in doc:
        raise ParseError("NodeVerdict has no overall_severity")
    overall = _severity(doc["overall_severity"], "NodeVerdict.overall_severity")
    measurements: dict[str, float] = {}
    if "checks" in doc:
        checks, severities = _from_checks(doc["checks"], measurements)
    elif "affected_components" in doc:
        checks, severities = _from_components(doc["affected_components"])
    else:
        checks, severities = [], []
    failing = [s for s in severities if _STATUS[s] == "fail"]
    if failing and _STATUS[overall] != "fail":
        raise ParseError(
            f"NodeVerdict contradicts itself: overall_severity {overall} with "
            f"{len(failing)} {'/'.join(sorted(set(failing)))} check(s)"
        )
    for name in ("CRITICAL", "WARNING", "UNKNOWN"):
        measurements[f"{name.lower()}_checks"] = float(severities.count(name))
    if overall == "UNKNOWN":
        detail = "overall UNKNOWN: the node's health could not be assessed (failed closed)"
    elif overall == "WARNING":
        warned = [c.name for c in checks if c.status == "warn"]
        detail = "overall WARNING" + (f": {', '.join(warned)}" if warned else "")
    else:
        detail = f"overall {overall}"
    overall_check = Check(OVERALL, _STATUS[overall], (), detail)
    return ToolResult(TOOL, (overall_check, *checks), measurements)
