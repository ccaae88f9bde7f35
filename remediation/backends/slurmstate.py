"""Slurm's JSON state fields, across the versions in the field (21.08 to 24.11).

``sinfo --json`` / ``squeue --json`` changed shape over the OpenAPI data_parser versions:
21.08/22.05 (v0.0.37/38) give a node ``state`` string (``"idle"``) plus a ``state_flags``
list (``["DRAIN"]``); 23.02 and later give ``state`` as one list of base state and flags
(``["IDLE", "DRAIN"]``); ``scontrol``'s text form and some plugins give ``"IDLE+DRAIN"``.
Job ``job_state`` is a string up to 23.02 and a list from 23.11 (``["PENDING"]``). Numbers
became ``{"set": .., "infinite": .., "number": ..}`` objects from 23.11. Recorded examples:
``fixtures/slurm/``. A drained node is out of service whatever the shape.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Base states and derived names that mean "not in service" (sinfo's long names included).
OUT_STATES = {"down", "drained", "draining", "fail", "failing", "future", "maint", "error"}
OUT_FLAGS = {"DRAIN", "DRAINED", "DRAINING", "FAIL", "MAINTENANCE", "MAINT", "REBOOT_ISSUED"}
BASE_STATES = {"ALLOCATED", "DOWN", "ERROR", "FUTURE", "IDLE", "MIXED", "UNKNOWN"}


def _words(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [w for w in value.replace(",", "+").split("+") if w]
    if isinstance(value, (list, tuple)):
        return [w for v in value for w in _words(v)]
    return [str(value)]


def node_state(n: Mapping[str, Any]) -> tuple[str, frozenset[str]]:
    """(base state, lower case; flags, upper case) of one ``sinfo --json`` node."""
    words = [w.upper().rstrip("*~#!%$@^-") for w in _words(n.get("state"))]
    flags = {w.upper() for w in _words(n.get("state_flags"))}
    base = next((w for w in words if w in BASE_STATES), words[0] if words else "UNKNOWN")
    flags |= {w for w in words if w != base}
    return base.lower(), frozenset(flags)


def out_of_service(n: Mapping[str, Any]) -> bool:
    base, flags = node_state(n)
    return base in OUT_STATES or bool(flags & OUT_FLAGS)


def job_state(j: Mapping[str, Any]) -> str:
    """The job's base state, upper case (``RUNNING``, ``PENDING``, ...)."""
    words = _words(j.get("job_state"))
    return words[0].upper() if words else ""


def number(value: Any) -> int:
    """An integer field: plain, or 23.11's ``{"set": true, "number": n}``."""
    if isinstance(value, Mapping):
        return int(value.get("number") or 0) if value.get("set", True) else 0
    try:
        return int(value or 0)
    except (TypeError, ValueError):
        return 0


def held(j: Mapping[str, Any]) -> bool:
    """Held (requeuehold, scontrol hold, --hold): pending with a JobHeld* reason."""
    reason = str(j.get("state_reason") or "")
    return job_state(j) == "PENDING" and (reason.startswith("JobHeld") or j.get("hold") is True)
