"""The reliability report as data: MTBF per (GPU model, component) with its 90 % interval,
lemons, per-incident cost, totals and ETTR (docs/accounting.md). ``to_json`` gives the
contract's keys; ``text`` and ``html`` present the same ``Report``.
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accounting import ettr as ettr_mod
from accounting import gpu_models, stats
from accounting.costs import IncidentCost, incident_costs
from accounting.model import (
    COMPONENTS,
    UNITLESS_COMPONENTS,
    Exposure,
    Ident,
    Incident,
    JobRun,
)
from accounting.units import Attribution, Unit, gpu_units, node_units, units_for
from accounting.window import Window, resolve

FEW_FAILURES = 5  # below this a cell's interval is wide and the text report says so


@dataclass(frozen=True)
class Cell:
    gpu_model: str
    component: str
    failures: int
    exposure_hours: float | None
    mtbf_hours: float | None
    lower90: float | None
    upper90: float | None
    names: tuple[str, ...] = ()  # the model names given for this SKU (gpu_models.py)

    @property
    def few(self) -> bool:
        return self.failures < FEW_FAILURES


@dataclass(frozen=True)
class Lemon:
    unit: Ident
    node: str
    gpu: str | None
    gpu_model: str
    component: str
    failures: int
    exposure_hours: float
    expected: float  # failures expected at the model's rate for this exposure
    threshold: int  # the Poisson 99th percentile it exceeds


@dataclass(frozen=True)
class Report:
    window: Window | None
    cells: tuple[Cell, ...]
    lemons: tuple[Lemon, ...]
    costs: tuple[IncidentCost, ...]
    ettr: ettr_mod.Ettr

    @property
    def unknown_recompute(self) -> list[Ident]:
        return [c.incident.id for c in self.costs if c.recompute_h is None]


def build(
    incidents: Sequence[Incident],
    exposure: Sequence[Exposure],
    since: float | None = None,
    until: float | None = None,
    runs: Sequence[JobRun] = (),
) -> Report:
    window = resolve(incidents, exposure, since, until, runs)
    if window is None:
        return Report(None, (), (), (), ettr_mod.Ettr(None, None, ()))
    # one cell per SKU, whatever each source calls it; the names given shown beside it
    incidents, exposure, names = gpu_models.normalised(incidents, exposure)
    costs = incident_costs(incidents, window, runs)
    gpus, nodes = gpu_units(exposure), node_units(exposure)
    in_window = [c.incident for c in costs]
    cells = [
        dataclasses.replace(c, names=names.get(c.gpu_model, ()))
        for c in _cells(in_window, gpus, nodes, window)
    ]
    lemons = _lemons(in_window, cells, gpus, nodes, window)
    return Report(
        window, tuple(cells), tuple(lemons), tuple(costs), ettr_mod.compute(incidents, runs, window)
    )


def _cells(
    incidents: Sequence[Incident], gpus: Sequence[Unit], nodes: Sequence[Unit], window: Window
) -> list[Cell]:
    failures = Counter((inc.gpu_model, inc.component) for inc in incidents)
    exposure: dict[tuple[str, str], float] = defaultdict(float)
    hours = {id(u): u.hours(window) for u in (*gpus, *nodes)}
    for component in COMPONENTS:
        for unit in units_for(component, gpus, nodes):
            exposure[(unit.gpu_model, component)] += hours[id(unit)]
    keys = {k for k, hours in exposure.items() if hours > 0} | set(failures)
    order = {c: i for i, c in enumerate(COMPONENTS)}
    return [
        _cell(model, comp, failures.get((model, comp), 0), exposure.get((model, comp), 0.0))
        for model, comp in sorted(keys, key=lambda k: (k[0], order[k[1]]))
    ]


def _cell(model: str, component: str, failures: int, hours: float) -> Cell:
    if component in UNITLESS_COMPONENTS:
        return Cell(model, component, failures, None, None, None, None)
    if hours <= 0:
        return Cell(model, component, failures, hours, None, None, None)
    lower, upper = stats.mtbf_interval(failures, hours)
    mtbf = hours / failures if failures else None
    return Cell(model, component, failures, hours, mtbf, lower, upper)


def _lemons(
    incidents: Sequence[Incident],
    cells: Sequence[Cell],
    gpus: Sequence[Unit],
    nodes: Sequence[Unit],
    window: Window,
) -> list[Lemon]:
    attribution = Attribution(gpus, nodes)
    counts: Counter[tuple[Ident, str]] = Counter()
    for inc in incidents:
        unit = attribution.unit(inc)
        if unit is not None:
            counts[(unit.unit, inc.component)] += 1
    rate = {
        (c.gpu_model, c.component): c.failures / c.exposure_hours
        for c in cells
        if c.exposure_hours and c.failures
    }
    out = []
    for component in COMPONENTS:
        for unit in units_for(component, gpus, nodes):
            failures = counts.get((unit.unit, component), 0)
            if not failures:
                continue
            hours = unit.hours(window)
            expected = rate.get((unit.gpu_model, component), 0.0) * hours
            threshold = stats.poisson_upper(expected)
            if failures > threshold:
                out.append(
                    Lemon(
                        unit.unit,
                        unit.node,
                        unit.gpu,
                        unit.gpu_model,
                        component,
                        failures,
                        hours,
                        expected,
                        threshold,
                    )
                )
    out.sort(key=lambda lem: (-lem.failures, str(lem.unit), lem.component))
    return out


def _hours_dict(cost: IncidentCost) -> dict[str, Any]:
    """recompute null when a job's checkpoint is unknown; total the hours known lost."""
    return {
        "restart": cost.restart_h,
        "recompute": cost.recompute_h,
        "capacity": cost.capacity_h,
        "total": cost.total_h,
    }


def to_json(report: Report) -> dict[str, Any]:
    """The contract's keys (docs/accounting.md, "Report JSON")."""
    window = report.window
    total: dict[str, float] = defaultdict(float)
    by_component: dict[str, float] = {}
    for cost in report.costs:
        parts = {
            "restart": cost.restart_h,
            "recompute": cost.recompute_known_h,
            "capacity": cost.capacity_h,
            "total": cost.total_h,
        }
        component = cost.incident.component
        by_component[component] = by_component.get(component, 0.0) + cost.total_h
        for key, value in parts.items():
            total[key] += value
    return {
        "window": {
            "since": None if window is None else window.since,
            "until": None if window is None else window.until,
        },
        "mtbf": [
            {
                "gpu_model": c.gpu_model,
                "gpu_model_names": list(c.names),
                "component": c.component,
                "failures": c.failures,
                "exposure_hours": c.exposure_hours,
                "mtbf_hours": c.mtbf_hours,
                "lower90": c.lower90,
                "upper90": c.upper90,
            }
            for c in report.cells
        ],
        "lemons": [
            {
                "unit": lem.unit,
                "node": lem.node,
                "gpu": lem.gpu,
                "gpu_model": lem.gpu_model,
                "component": lem.component,
                "failures": lem.failures,
                "exposure_hours": lem.exposure_hours,
            }
            for lem in report.lemons
        ],
        "incidents": [
            {
                "id": c.incident.id,
                "ttd_s": c.ttd_s,
                "ttm_s": c.ttm_s,
                "ttr_s": c.ttr_s,
                "gpu_hours_lost": _hours_dict(c),
            }
            for c in report.costs
        ],
        "totals": {
            "gpu_hours_lost": {
                k: total.get(k, 0.0) for k in ("restart", "recompute", "capacity", "total")
            },
            "by_component": by_component,
            "unknown_recompute": report.unknown_recompute,
        },
        "ettr": ettr_mod.to_json(report.ettr),
    }
