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

import re
from collections.abc import Mapping, Sequence
from typing import Any

# One GPU entry of a ``gres_detail`` string: ``gpu:2(IDX:1-2)``, ``gpu:h100:1(IDX:3)``
GRES_GPU = re.compile(r"(?:^|,)gpu(?::[^:(,]+)?:\d+\(IDX:([^)]*)\)")
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


def _indices(idx: str) -> frozenset[str] | None:
    """``0-1,3`` -> {0, 1, 3}; None for anything else (``N/A``)."""
    out: set[str] = set()
    for part in idx.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or not (hi or lo).isdigit() or int(lo) > int(hi or lo):
            return None
        out.update(str(i) for i in range(int(lo), int(hi or lo) + 1))
    return frozenset(out)


def gpu_indices(j: Mapping[str, Any], node: str, nodes: Sequence[str]) -> frozenset[str] | None:
    """The GPU indices (GRES ``IDX``) a job holds on ``node``, from ``squeue --json``'s
    ``gres_detail`` (one string per node of the job, in its node list's order: 21.08 to
    24.11); None where it cannot be told (no such field, no GPU entry, an unknown index)."""
    detail = j.get("gres_detail")
    if not isinstance(detail, list) or node not in nodes or len(detail) != len(nodes):
        return None
    found = [_indices(m.group(1)) for m in GRES_GPU.finditer(str(detail[list(nodes).index(node)]))]
    if not found or any(f is None for f in found):
        return None
    return frozenset().union(*[f for f in found if f is not None])
