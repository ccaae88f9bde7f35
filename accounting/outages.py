"""Out-of-service intervals from the journal, exposure with them taken out, and the capacity
each incident is charged, every GPU-hour out of service once.

A unit is out of service from an incident's mitigation to its return. Prometheus presence
does not show that (a drained node still reports its GPUs), and the remediation service has
no Prometheus at all: there the fleet's exposure is its known nodes' GPUs, less the outages.

What is out: an incident with ``gpus_out`` 1 that names its GPU (a DRA isolation of that
device) takes that GPU out and nothing else; the node stays in service with its other GPUs.
Any other incident with ``gpus_out`` > 0 (a drain, a cordon, a reboot, a GPU reset that
cordons the node) takes the whole node out, its GPUs and the node itself.

Capacity: the incidents of a node are walked in order of mitigation; each is charged the
GPU-hours of its interval that no earlier incident of the node already took out (a second
XID while the node is drained adds nothing; a GPU isolated before a drain is not charged
again to the drain). Charges are computed over every incident given, then clipped to the
report's window, so an incident's charge never depends on where the window cuts.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Mapping, Sequence

from accounting.model import Exposure, Ident, Incident
from accounting.spans import FOREVER, Span, merged, minus, overlap

# (node, gpu): gpu None is the whole node (every GPU and the node's own exposure)
Place = tuple[str, str | None]
# one piece of a charge: [start, end) times this many GPUs (negative: already charged)
Charge = tuple[float, float, int]


def one_gpu(inc: Incident) -> bool:
    """The incident took one named GPU out, the node staying in service."""
    return inc.gpus_out == 1 and inc.gpu is not None


def _span(inc: Incident) -> Span | None:
    if inc.mitigated is None or inc.gpus_out <= 0:
        return None
    return (inc.mitigated, FOREVER if inc.returned is None else inc.returned)


def out_of_service(incidents: Sequence[Incident]) -> dict[Place, list[Span]]:
    """Per place, the journal's [mitigated, returned) intervals (returned None: for ever)."""
    out: dict[Place, list[Span]] = defaultdict(list)
    for inc in incidents:
        span = _span(inc)
        if span is not None:
            out[(inc.node, inc.gpu if one_gpu(inc) else None)].append(span)
    return {place: merged(spans) for place, spans in out.items()}


def _holes(holes: Mapping[Place, list[Span]], node: str, gpu: str | None) -> list[Span]:
    whole = holes.get((node, None), [])
    return whole if gpu is None else [*whole, *holes.get((node, gpu), [])]


def in_service(rows: Sequence[Exposure], incidents: Sequence[Incident]) -> list[Exposure]:
    """Presence rows less the journal's out-of-service intervals: a drained node still
    reports its GPUs to Prometheus, but it is not in service."""
    holes = out_of_service(incidents)
    out = []
    for row in rows:
        row_holes = _holes(holes, row.node, row.gpu)
        if not row_holes:
            out.append(row)
            continue
        end = FOREVER if row.end is None else row.end
        for start, stop in minus((row.start, end), row_holes):
            out.append(dataclasses.replace(row, start=start, end=None if stop == FOREVER else stop))
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
    holes = out_of_service(incidents)
    rows = []
    for node in sorted(set(nodes)):
        model = (models or {}).get(node, "unknown")
        for g in range((gpus or {}).get(node, gpus_per_node)):
            for start, end in minus((since, until), _holes(holes, node, str(g))):
                open_end = None if end >= until else end
                rows.append(Exposure(f"{node}/{g}", node, str(g), model, start, open_end))
    return rows


def charges(incidents: Sequence[Incident]) -> dict[Ident, list[Charge]]:
    """Per incident, the GPU-time it is charged as capacity lost (module docstring)."""
    by_node: dict[str, list[tuple[Span, Incident]]] = defaultdict(list)
    for inc in incidents:
        span = _span(inc)
        if span is not None:
            by_node[inc.node].append((span, inc))
    out: dict[Ident, list[Charge]] = {}
    for outages in by_node.values():
        node_out: list[Span] = []  # whole-node outages so far
        gpu_out: dict[str, list[Span]] = defaultdict(list)  # one-GPU outages so far
        for span, inc in sorted(outages, key=lambda pair: (pair[0][0], str(pair[1].id))):
            if one_gpu(inc):
                gpu = str(inc.gpu)
                pieces = minus(span, [*node_out, *gpu_out[gpu]])
                out[inc.id] = [(s, e, 1) for s, e in pieces]
                gpu_out[gpu] = merged([*gpu_out[gpu], span])
                continue
            free = minus(span, node_out)
            charged = [(s, e, inc.gpus_out) for s, e in free]
            for spans in gpu_out.values():  # a GPU already out alone: charged already
                charged += [(s, e, -1) for piece in free for s, e in overlap(piece, spans)]
            out[inc.id] = charged
            node_out = merged([*node_out, span])
    return out
