"""Exposure: every physical unit's time in service, and which unit an incident hit.

GPU components (gpu, gpu_memory, nvlink) are exposed in GPU-unit-hours: the exposure rows
with a ``gpu``. Node components (nic, host, storage) in node-unit-hours: the rows without
one; a node without node rows is exposed for the union of its GPUs' rows.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from accounting.model import (
    GPU_COMPONENTS,
    NODE_COMPONENTS,
    Exposure,
    Ident,
    Incident,
)
from accounting.window import Window


@dataclass(frozen=True)
class Unit:
    unit: Ident
    node: str
    gpu: str | None
    gpu_model: str
    rows: tuple[Exposure, ...]

    def hours(self, window: Window) -> float:
        return sum(window.clip(r.start, r.end) for r in self.rows) / 3600.0

    def covers(self, t: float) -> bool:
        return any(r.start <= t and (r.end is None or t < r.end) for r in self.rows)


def _units(rows: Sequence[Exposure]) -> list[Unit]:
    grouped: dict[Ident, list[Exposure]] = defaultdict(list)
    for row in rows:
        grouped[row.unit].append(row)
    out = []
    for name, unit_rows in grouped.items():
        unit_rows.sort(key=lambda r: r.start)
        last = unit_rows[-1]
        out.append(Unit(name, last.node, last.gpu, last.gpu_model, tuple(unit_rows)))
    return out


def _union(rows: Sequence[Exposure]) -> list[tuple[float, float | None]]:
    merged: list[tuple[float, float | None]] = []
    for row in sorted(rows, key=lambda r: r.start):
        if merged:
            start, end = merged[-1]
            if end is None or row.start <= end:
                new_end = None if end is None or row.end is None else max(end, row.end)
                merged[-1] = (start, new_end)
                continue
        merged.append((row.start, row.end))
    return merged


def gpu_units(rows: Sequence[Exposure]) -> list[Unit]:
    return _units([r for r in rows if r.gpu is not None])


def node_units(rows: Sequence[Exposure]) -> list[Unit]:
    """Node rows as units, plus one unit per node that has only GPU rows (their union)."""
    units = _units([r for r in rows if r.gpu is None])
    with_rows = {u.node for u in units}
    gpu_rows: dict[str, list[Exposure]] = defaultdict(list)
    for row in rows:
        if row.gpu is not None and row.node not in with_rows:
            gpu_rows[row.node].append(row)
    for node, node_gpu_rows in gpu_rows.items():
        model = Counter(r.gpu_model for r in node_gpu_rows).most_common(1)[0][0]
        union = tuple(
            Exposure(node, node, None, model, start, end) for start, end in _union(node_gpu_rows)
        )
        units.append(Unit(node, node, None, model, union))
    return units


def units_for(component: str, gpus: Sequence[Unit], nodes: Sequence[Unit]) -> Sequence[Unit]:
    if component in GPU_COMPONENTS:
        return gpus
    if component in NODE_COMPONENTS:
        return nodes
    return ()


class Attribution:
    """Which unit an incident hit: the one in service at its node (and GPU) at onset, else
    the last one there that entered service before it. Indexed by place, so that a serial
    moved to another node is found at each place it served."""

    def __init__(self, gpus: Sequence[Unit], nodes: Sequence[Unit]) -> None:
        self._at: dict[tuple[str, str | None], list[tuple[Exposure, Unit]]] = defaultdict(list)
        for unit in (*gpus, *nodes):
            for row in unit.rows:
                self._at[(row.node, row.gpu)].append((row, unit))
        for rows in self._at.values():
            rows.sort(key=lambda pair: pair[0].start)

    def unit(self, inc: Incident) -> Unit | None:
        if inc.component in GPU_COMPONENTS:
            if inc.gpu is None:
                return None
            place = self._at.get((inc.node, inc.gpu), [])
        elif inc.component in NODE_COMPONENTS:
            place = self._at.get((inc.node, None), [])
        else:
            return None
        before = [(row, unit) for row, unit in place if row.start <= inc.onset]
        for row, unit in before:
            if row.end is None or inc.onset < row.end:
                return unit
        return before[-1][1] if before else None
