"""Out-of-service intervals from the journal, and exposure with them taken out.

A node is out of service from an incident's mitigation to its return. Prometheus presence
does not show that (a drained node still reports its GPUs), and the remediation service has
no Prometheus at all: there the fleet's exposure is its known nodes' GPUs, less the outages.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from accounting.model import Exposure, Incident


def _out_of_service(incidents: Sequence[Incident]) -> dict[str, list[tuple[float, float]]]:
    """Per node, the journal's [mitigated, returned) intervals (returned None: for ever)."""
    out: dict[str, list[tuple[float, float]]] = {}
    for inc in incidents:
        if inc.mitigated is not None and inc.gpus_out > 0:
            end = float("inf") if inc.returned is None else inc.returned
            out.setdefault(inc.node, []).append((inc.mitigated, end))
    return {node: sorted(spans) for node, spans in out.items()}


def in_service(rows: Sequence[Exposure], incidents: Sequence[Incident]) -> list[Exposure]:
    """Presence rows less the journal's out-of-service intervals: a drained node still
    reports its GPUs to Prometheus, but it is not in service."""
    holes = _out_of_service(incidents)
    out = []
    for row in rows:
        node_holes = holes.get(row.node)
        if not node_holes:
            out.append(row)
            continue
        end = float("inf") if row.end is None else row.end
        for start, stop in _minus((row.start, end), node_holes):
            out.append(
                dataclasses.replace(row, start=start, end=None if stop == float("inf") else stop)
            )
    return out


def fleet_exposure(
    nodes: Sequence[str],
    incidents: Sequence[Incident],
    since: float,
    until: float,
    gpus_per_node: int = 8,
    models: Mapping[str, str] | None = None,
    gpus: Mapping[str, int] | None = None,
) -> list[Exposure]:
    """Exposure when Prometheus is not at hand: each known node's GPUs (``gpus``, else
    ``gpus_per_node``) in service over [since, until] minus the journal's out-of-service
    intervals (mitigated -> returned)."""
    out_of_service = _out_of_service(incidents)
    rows = []
    for node in sorted(set(nodes)):
        model = (models or {}).get(node, "unknown")
        count = (gpus or {}).get(node, gpus_per_node)
        for start, end in _minus((since, until), out_of_service.get(node, [])):
            open_end = None if end >= until else end
            rows += [
                Exposure(f"{node}/{g}", node, str(g), model, start, open_end) for g in range(count)
            ]
    return rows


def _minus(
    span: tuple[float, float], holes: Sequence[tuple[float, float]]
) -> list[tuple[float, float]]:
    pieces, cursor = [], span[0]
    for start, end in holes:
        if start > cursor:
            pieces.append((cursor, min(start, span[1])))
        cursor = max(cursor, end)
    if cursor < span[1]:
        pieces.append((cursor, span[1]))
    return [(s, e) for s, e in pieces if e > s]
