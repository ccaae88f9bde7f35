"""Planning from measured reliability (`gpuwarden report --plan`): what the report's MTBF
cells and repair times mean for a job of G GPUs of one model. Sits after ``report.build``:
takes its ``Report`` (the cells with their 90 % bounds, the incidents' repair times) and the
settings, and hands ``planning.py``'s arithmetic rates per hour (docs/accounting.md,
"Planning").

A job of G GPUs on ``ceil(G / gpus_per_node)`` nodes fails at ``G x`` the per-GPU rates of
the model's GPU components plus ``nodes x`` the per-node rates of its node components, each
rate ``1 / MTBF`` of the report's cell. Every figure comes at three rates: the estimate, every
cell at its MTBF's upper bound (the fewest failures) and every cell at its lower bound (the
most); a cell with no failure counts 0 at the estimate and its one-sided bound at worst.
Summing the cells' bounds is conservative: the band is wider than a 90 % interval of the sum.
``software`` and ``unknown`` failures have no unit exposure in the report (no MTBF): they are
counted and named, not in the rates.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from accounting import gpu_models, planning
from accounting.model import GPU_COMPONENTS, NODE_COMPONENTS, UNITLESS_COMPONENTS
from accounting.report import Cell, Report

MEASURED = "measured"
UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}


def duration(value: str, flag: str) -> float:
    """Seconds from ``90``, ``90s``, ``5m``, ``5min`` or ``1.5h``."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(s|m|min|h)?\s*", value)
    if m is None:
        raise ValueError(f"{flag}: {value!r} is not a duration (seconds, or with s, m or h)")
    return float(m.group(1)) * UNITS[m.group(2) or ""]


def counts(value: str, flag: str) -> tuple[int, ...]:
    """``1024`` or ``256,1024,4096``."""
    try:
        return tuple(int(v) for v in value.split(","))
    except ValueError:
        raise ValueError(f"{flag}: {value!r} is not a count or a comma-separated list") from None


@dataclass(frozen=True)
class Settings:
    """What to plan for; ``check`` says the first bad value as the flag that gave it."""

    models: tuple[str, ...]
    gpus: tuple[int, ...]
    checkpoint_s: float = 300.0
    restart_s: float | None = 600.0  # None: the mean restart the report measured
    hours: float = 24.0
    gpus_per_node: int = 8
    partition_nodes: int | None = None  # None: the job's own nodes
    restart_target_s: float = 600.0
    restart_probability: float = 0.99

    def check(self) -> None:
        if not self.models or any(not m.strip() for m in self.models):
            raise ValueError("--plan: give a GPU model (as the report's MTBF table names it)")
        if not self.gpus or any(g <= 0 for g in self.gpus):
            raise ValueError("--plan-gpus: every job size must be a GPU count > 0")
        for flag, value in (
            ("--checkpoint-cost", self.checkpoint_s),
            ("--restart-time", 0.0 if self.restart_s is None else self.restart_s),
            ("--restart-target", self.restart_target_s),
        ):
            if not math.isfinite(value) or value < 0:
                raise ValueError(f"{flag}: must be a duration >= 0, not {value:g} s")
        if not math.isfinite(self.hours) or self.hours <= 0:
            raise ValueError(f"--plan-hours: must be > 0, not {self.hours:g}")
        if self.gpus_per_node <= 0:
            raise ValueError("--gpus-per-node must be > 0")
        if self.partition_nodes is not None:
            biggest = math.ceil(max(self.gpus) / self.gpus_per_node)
            if self.partition_nodes < biggest:
                raise ValueError(
                    f"--partition-nodes: {self.partition_nodes} nodes cannot run a job of"
                    f" {max(self.gpus)} GPUs ({biggest} nodes)"
                )
        if not 0.0 < self.restart_probability < 1.0:
            raise ValueError(
                f"--restart-probability: must be between 0 and 1, not {self.restart_probability:g}"
            )


Three = tuple[float | None, float | None, float | None]  # at the estimate, fewest, most


@dataclass(frozen=True)
class Band:
    """A figure at the estimate and at the two ends of the cells' bounds, ``low`` <=
    ``high``; None where that end is unbounded (an MTBF with no failure) or unknown."""

    estimate: float | None
    low: float | None
    high: float | None

    @staticmethod
    def of(values: Three, rising: bool) -> Band:
        """``values`` at the estimate, the fewest and the most failures; ``rising`` when
        the figure grows with the failure rate."""
        estimate, fewest, most = values
        return Band(estimate, fewest, most) if rising else Band(estimate, most, fewest)


@dataclass(frozen=True)
class Rates:
    """Failures per unit-hour: per GPU (GPU components) and per node (node components), at
    the estimate, the fewest (upper MTBF bounds) and the most (lower bounds)."""

    per_gpu: tuple[float, float, float]
    per_node: tuple[float, float, float]
    cells: tuple[Cell, ...]
    unitless_failures: int  # software and unknown: not in the rates


@dataclass(frozen=True)
class Row:
    model: str
    gpus: int
    nodes: int
    partition_nodes: int
    failures_per_day: Band
    job_mtbf_h: Band
    young_h: float | None  # Young's, at the estimate, for comparison
    daly_h: Band  # at the estimate, and at the two ends of the rate
    ettr: Band  # checkpointing at the estimate's Daly interval (see _row)
    uninterrupted: Band  # P(``hours`` without a failure)
    lost_gpu_h_per_day: Band
    spares: Band  # None without a measured repair time
    repairs: int  # outages whose repair times the spares come from
    unitless_failures: int
    restart_h: float  # the restart time used: given, or the mean measured
    restarts_measured: int | None  # how many it is the mean of; None when given


def rates(report: Report, model: str) -> Rates:
    """The model's rates from its cells (the model named as the report names it, or as any
    name its SKU was given)."""
    wanted = {model.strip(), gpu_models.sku(model)}
    cells = tuple(c for c in report.cells if c.gpu_model in wanted or wanted & set(c.names))
    measured = [c for c in cells if c.exposure_hours and c.component not in UNITLESS_COMPONENTS]
    if not measured:
        known = sorted({c.gpu_model for c in report.cells if c.exposure_hours})
        raise ValueError(
            f"--plan: no MTBF cell with exposure for {model!r}"
            f" (the report's models: {', '.join(known) or 'none'})"
        )
    unitless = sum(c.failures for c in cells if c.component in UNITLESS_COMPONENTS)
    return Rates(
        _sum(c for c in measured if c.component in GPU_COMPONENTS),
        _sum(c for c in measured if c.component in NODE_COMPONENTS),
        tuple(measured),
        unitless,
    )


def _sum(cells: Iterable[Cell]) -> tuple[float, float, float]:
    estimate = low = high = 0.0
    for c in cells:
        estimate += 1.0 / c.mtbf_hours if c.mtbf_hours else 0.0
        low += 1.0 / c.upper90 if c.upper90 else 0.0
        high += 1.0 / c.lower90 if c.lower90 else 0.0  # set wherever there is exposure
    return estimate, low, high


def repair_hours(report: Report, cells: Sequence[Cell]) -> list[float]:
    """Onset to return of the model's incidents that took capacity out (``gpus_out`` > 0):
    how long a failed node is no node to restart on. Not yet returned: to the report's
    end (a lower bound, as the report's TTR)."""
    models = {c.gpu_model for c in cells}
    return [
        c.ttr_s / 3600.0
        for c in report.costs
        if c.incident.gpu_model in models and c.incident.gpus_out > 0
    ]


def restart_hours(report: Report, cells: Sequence[Cell]) -> list[float]:
    """Interruption to resumption of every job the model's incidents hit that resumed."""
    models = {c.gpu_model for c in cells}
    return [
        (hit.resumed - hit.interrupted) / 3600.0
        for c in report.costs
        if c.incident.gpu_model in models
        for hit in c.incident.jobs
        if hit.resumed is not None
    ]


def plan(report: Report, settings: Settings) -> list[Row]:
    out = []
    for model in settings.models:
        r = rates(report, model)
        repairs = repair_hours(report, r.cells)
        restart = _restart(report, model, r, settings)
        out += [_row(model, g, r, repairs, restart, settings) for g in settings.gpus]
    return out


def _restart(report: Report, model: str, r: Rates, s: Settings) -> tuple[float, int | None]:
    if s.restart_s is not None:
        return s.restart_s / 3600.0, None
    measured = restart_hours(report, r.cells)
    if not measured:
        raise ValueError(f"--restart-time measured: no job hit on {model!r} was resumed")
    return sum(measured) / len(measured), len(measured)


def _row(
    model: str,
    gpus: int,
    r: Rates,
    repairs: list[float],
    restart_used: tuple[float, int | None],
    s: Settings,
) -> Row:
    nodes = math.ceil(gpus / s.gpus_per_node)
    partition = s.partition_nodes if s.partition_nodes is not None else nodes
    job = tuple(gpus * g + nodes * n for g, n in zip(r.per_gpu, r.per_node, strict=True))
    node = tuple(s.gpus_per_node * g + n for g, n in zip(r.per_gpu, r.per_node, strict=True))
    mtbf = tuple(1.0 / rate if rate > 0 else math.inf for rate in job)
    cost, restart = s.checkpoint_s / 3600.0, restart_used[0]
    daly = tuple(planning.daly_interval(cost, m) for m in mtbf)
    # the interval an operator would set: the estimate's optimum, or where the estimate
    # saw no failure (no optimum), the one for the most failures the bounds allow
    interval = daly[0] if math.isfinite(daly[0]) else daly[2]
    ettr = tuple(planning.ettr(interval, cost, restart, m) for m in mtbf)
    spares = tuple(
        planning.spares(n, partition, repairs, s.restart_target_s / 3600.0, s.restart_probability)
        for n in node
    )
    return Row(
        model=model,
        gpus=gpus,
        nodes=nodes,
        partition_nodes=partition,
        failures_per_day=Band.of(_three(lambda i: job[i] * planning.HOURS_PER_DAY), True),
        job_mtbf_h=Band.of(_three(lambda i: _finite(mtbf[i])), False),
        young_h=_finite(planning.young_interval(cost, mtbf[0])),
        daly_h=Band.of(_three(lambda i: _finite(daly[i])), False),
        ettr=Band.of(_three(lambda i: ettr[i]), False),
        uninterrupted=Band.of(_three(lambda i: planning.uninterrupted(job[i], s.hours)), False),
        lost_gpu_h_per_day=Band.of(
            _three(lambda i: planning.gpu_hours_lost_per_day(gpus, ettr[i])), True
        ),
        spares=Band.of(_three(lambda i: _float(spares[i])), True),
        repairs=len(repairs),
        unitless_failures=r.unitless_failures,
        restart_h=restart,
        restarts_measured=restart_used[1],
    )


def _three(f: Callable[[int], float | None]) -> Three:
    return f(0), f(1), f(2)


def _finite(v: float) -> float | None:
    """An infinite MTBF or interval (no failure at that end) is None: JSON has no inf."""
    return None if math.isinf(v) else v


def _float(v: int | None) -> float | None:
    return None if v is None else float(v)


def to_json(rows: Sequence[Row], settings: Settings) -> dict[str, object]:
    """The ``plan`` key of the report's JSON (docs/accounting.md, "Planning")."""
    return {
        "settings": {
            "checkpoint_s": settings.checkpoint_s,
            "restart_s": settings.restart_s,
            "hours": settings.hours,
            "gpus_per_node": settings.gpus_per_node,
            "restart_target_s": settings.restart_target_s,
            "restart_probability": settings.restart_probability,
        },
        "jobs": [
            {
                "gpu_model": r.model,
                "gpus": r.gpus,
                "nodes": r.nodes,
                "partition_nodes": r.partition_nodes,
                "failures_per_day": _band(r.failures_per_day),
                "job_mtbf_hours": _band(r.job_mtbf_h),
                "young_interval_hours": r.young_h,
                "daly_interval_hours": _band(r.daly_h),
                "ettr": _band(r.ettr),
                "p_uninterrupted": _band(r.uninterrupted),
                "gpu_hours_lost_per_day": _band(r.lost_gpu_h_per_day),
                "spare_nodes": _band(r.spares),
                "repairs_measured": r.repairs,
                "failures_not_in_rates": r.unitless_failures,
                "restart_hours": r.restart_h,
                "restarts_measured": r.restarts_measured,
            }
            for r in rows
        ],
    }


def _band(b: Band) -> dict[str, float | None]:
    return {"estimate": b.estimate, "low": b.low, "high": b.high}
