"""The planner's predictions against what really happens: Monte-Carlo runs of the simulated
fleet-year (simulator/reliability_year.py, the README's setup: 32 H100 + 32 A100 nodes, one
lemon, jobs of 4 nodes checkpointing hourly at no cost) and Llama 3's published count.

The planner reads the report of the README's year (seed 2026); 200 other years give the
simulation's 90 % band (5th to 95th percentile) of what an H100 job lives through. Software
failures have no unit exposure in the report and are not in the planner's rates, so the
simulated jobs count only the interruptions of hardware failures here. The simulated jobs
restart on spare nodes detect (10-600 s) + requeue (300-2,400 s) after the failure: 1,655 s
on average; the planner measures it from the report (``--restart-time measured``).
"""

import statistics
from collections import defaultdict
from datetime import datetime
from typing import Any

import pytest

from accounting import ettr as ettr_mod
from accounting import plan, planning, report, stats
from accounting.interchange import exposure_from, incident_from
from accounting.report import Cell, Report
from simulator import reliability_year as ry

SETUP = ry.Setup(lemons=1)
MODEL = "H100"
JOB_GPUS = SETUP.nodes_per_job * ry.GPUS_PER_NODE
JOBS = dict(SETUP.fleet)[MODEL] // SETUP.nodes_per_job  # the H100 nodes come first
RESTART_S = 305.0 + 1350.0  # mean detection + mean requeue delay of the simulated year
INTERVAL_H = SETUP.checkpoint_s / 3600.0
TARGET_S = 600.0
YEARS = 200
LLAMA3_DAYS, LLAMA3_GPUS = 54, 16_384
LLAMA3_HARDWARE = 419 - (54 + 7 + 2)  # 356: Table 5 less its software causes (no unit exposure)


def _report(year: ry.Year) -> Report:
    return report.build(
        [incident_from(o) for o in year.incidents],
        [exposure_from(o) for o in year.exposure],
        since=year.since,
        until=year.until,
    )


def _band(values: list[float]) -> tuple[float, float]:
    ordered = sorted(values)
    return ordered[int(0.05 * len(ordered))], ordered[int(0.95 * len(ordered)) - 1]


def _lived(year: ry.Year) -> dict[str, float]:
    """What the H100 jobs lived through from hardware failures, per job."""
    hits: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for line in year.incidents:
        if line["gpu_model"] == MODEL and line["component"] != "software":
            for hit in line["jobs"]:
                hits[hit["job_id"]].append(hit)
    days = (year.until - year.since) / 86400.0
    lost_h = sum(
        h["gpus"] * ((h["resumed"] or year.until) - h["last_checkpoint"]) / 3600.0
        for job in hits.values()
        for h in job
    )
    hit_days = sum(
        len({int((h["interrupted"] - year.since) // 86400) for h in job}) for job in hits.values()
    )
    return {
        "interruptions_per_year": sum(map(len, hits.values())) / JOBS * 365.0 / days,
        "p_day_uninterrupted": 1.0 - hit_days / (JOBS * int(days)),
        "ettr": 1.0 - lost_h / (JOBS * JOB_GPUS * days * 24.0),
        "gpu_hours_lost_per_day": lost_h / JOBS / days,
    }


def _restarted_in_time(year: ry.Year, spares: int) -> float:
    """The share of the H100 partition's outages whose job found a node within the target
    with ``spares`` spares: its own node back in time, or a spare that no earlier outage
    still holds then."""
    outs = [
        (datetime.fromisoformat(o["onset"]).timestamp(), o["returned"] or year.until)
        for o in year.incidents
        if o["gpu_model"] == MODEL and o["gpus_out"] > 0
    ]
    ok = 0
    for onset, back in outs:
        held = sum(1 for o, b in outs if o < onset and b > onset + TARGET_S)
        ok += held <= (spares if back - onset <= TARGET_S else spares - 1)
    return ok / len(outs)


@pytest.fixture(scope="module")
def years() -> list[ry.Year]:
    return [ry.simulate(seed, SETUP) for seed in range(YEARS)]


@pytest.fixture(scope="module")
def readme_year() -> Report:
    return _report(ry.simulate(2026, SETUP))


def _job_mtbf(rep: Report) -> float:
    settings = plan.Settings((MODEL,), (JOB_GPUS,), checkpoint_s=0.0, restart_s=RESTART_S)
    (row,) = plan.plan(rep, settings)
    assert row.job_mtbf_h.estimate is not None
    return row.job_mtbf_h.estimate


def _measured_restart_h(rep: Report) -> float:
    """The restart time the planner measures (``--restart-time measured``)."""
    settings = plan.Settings((MODEL,), (JOB_GPUS,), checkpoint_s=0.0, restart_s=None)
    (row,) = plan.plan(rep, settings)
    return row.restart_h


def test_the_planned_interruptions_a_job_year_lie_in_the_simulations_90_percent_band(
    years: list[ry.Year], readme_year: Report
) -> None:
    predicted = 8760.0 / _job_mtbf(readme_year)
    low, high = _band([_lived(y)["interruptions_per_year"] for y in years])
    assert low <= predicted <= high, (low, predicted, high)


def test_the_planned_chance_of_a_day_uninterrupted_lies_in_the_simulations_band(
    years: list[ry.Year], readme_year: Report
) -> None:
    predicted = planning.uninterrupted(1.0 / _job_mtbf(readme_year), 24.0)
    low, high = _band([_lived(y)["p_day_uninterrupted"] for y in years])
    assert low <= predicted <= high, (low, predicted, high)


def test_the_planned_ettr_and_gpu_hours_lost_lie_in_the_simulations_band(
    years: list[ry.Year], readme_year: Report
) -> None:
    restart_h = _measured_restart_h(readme_year)
    assert restart_h == pytest.approx(RESTART_S / 3600.0, rel=0.15)  # the simulated mean
    ettr = planning.ettr(INTERVAL_H, 0.0, restart_h, _job_mtbf(readme_year))
    lived = [_lived(y) for y in years]
    low, high = _band([v["ettr"] for v in lived])
    assert low <= ettr <= high, (low, ettr, high)
    lost = planning.gpu_hours_lost_per_day(JOB_GPUS, ettr)
    low, high = _band([v["gpu_hours_lost_per_day"] for v in lived])
    assert low <= lost <= high, (low, lost, high)


@pytest.mark.parametrize("spares", [1, 2])
def test_the_planned_chance_of_a_restart_in_time_lies_in_the_simulations_band(
    years: list[ry.Year], readme_year: Report, spares: int
) -> None:
    rates = plan.rates(readme_year, MODEL)
    node_rate = ry.GPUS_PER_NODE * rates.per_gpu[0] + rates.per_node[0]
    partition = dict(SETUP.fleet)[MODEL]
    repairs = plan.repair_hours(readme_year, rates.cells)
    predicted = planning.restart_probability(
        spares, node_rate, partition, repairs, TARGET_S / 3600.0
    )
    low, high = _band([_restarted_in_time(y, spares) for y in years])
    assert low <= predicted <= high, (low, predicted, high)


def test_the_planners_band_holds_the_simulated_median_in_at_least_90_percent_of_years(
    years: list[ry.Year],
) -> None:
    median = statistics.median(_lived(y)["interruptions_per_year"] for y in years)
    held = 0
    for year in years[:50]:
        settings = plan.Settings((MODEL,), (JOB_GPUS,))
        (row,) = plan.plan(_report(year), settings)
        low, high = row.failures_per_day.low, row.failures_per_day.high
        assert low is not None and high is not None
        held += low * 365 <= median <= high * 365
    assert held / 50 >= 0.90


def _llama3_cell() -> Report:
    """Llama 3's 419 interruptions in 54 days on 16,384 H100 as one per-GPU cell, its
    bounds as the report computes them."""
    hours = LLAMA3_GPUS * LLAMA3_DAYS * 24.0
    lower, upper = stats.mtbf_interval(419, hours)
    cell = Cell(MODEL, "gpu", 419, hours, hours / 419, lower, upper)
    return Report(None, (cell,), (), (), ettr_mod.Ettr(None, None, ()))


def test_llamas_per_gpu_rate_plans_419_interruptions_for_its_own_job_size() -> None:
    # 419 / (16,384 x 54 x 24) = 1.973e-5 per GPU-hour: MTBF 50,677 GPU-hours
    settings = plan.Settings((MODEL,), (2_048, LLAMA3_GPUS))
    small, big = plan.plan(_llama3_cell(), settings)
    assert big.failures_per_day.estimate is not None
    expected = big.failures_per_day.estimate * LLAMA3_DAYS
    assert expected == pytest.approx(419.0)
    assert small.failures_per_day.estimate * LLAMA3_DAYS == pytest.approx(419 / 8)  # type: ignore[operator]
    assert big.job_mtbf_h.estimate == pytest.approx(54 * 24 / 419)  # 3.09 h
    # the count the planner expects, with Poisson's 90 % band: 419 +- 1.645 sqrt(419)
    assert planning.count_band(expected) == (386, 453)


def test_a_simulated_year_of_256_h100_predicts_llamas_hardware_count_inside_its_band(
    years: list[ry.Year],
) -> None:
    """The report of one simulated year of 32 H100 nodes (rates from Llama 3's table, an
    NVLink share assumed) plans the 16,384-GPU, 54-day job; its stated band (the cells'
    bounds, widened by Poisson's 90 % band of the count) holds the 356 hardware
    interruptions Llama 3 published, in at least 90 % of years."""
    settings = plan.Settings((MODEL,), (LLAMA3_GPUS,))
    held = 0
    for year in years[:50]:
        (row,) = plan.plan(_report(year), settings)
        low, high = row.failures_per_day.low, row.failures_per_day.high
        assert low is not None and high is not None
        band = (
            planning.count_band(low * LLAMA3_DAYS)[0],
            planning.count_band(high * LLAMA3_DAYS)[1],
        )
        held += band[0] <= LLAMA3_HARDWARE <= band[1]
    assert held / 50 >= 0.90
    # the README's year: 5.635 a day [2.892, 11.148]
    (row,) = plan.plan(_report(ry.simulate(2026, SETUP)), settings)
    assert row.failures_per_day.low is not None and row.failures_per_day.high is not None
    assert row.failures_per_day.low * LLAMA3_DAYS < LLAMA3_HARDWARE
    assert row.failures_per_day.high * LLAMA3_DAYS > LLAMA3_HARDWARE


def main() -> None:
    """Print the figures docs/accounting.md quotes (``python -m
    tests.accounting.test_plan_validation``)."""
    years = [ry.simulate(seed, SETUP) for seed in range(YEARS)]
    rep = _report(ry.simulate(2026, SETUP))
    mtbf = _job_mtbf(rep)
    restart_h = _measured_restart_h(rep)
    print(f"restart measured {restart_h * 3600:.0f} s (simulated mean {RESTART_S:.0f} s)")
    ettr = planning.ettr(INTERVAL_H, 0.0, restart_h, mtbf)
    lived = [_lived(y) for y in years]
    predicted = {
        "interruptions_per_year": 8760.0 / mtbf,
        "p_day_uninterrupted": planning.uninterrupted(1.0 / mtbf, 24.0),
        "ettr": ettr,
        "gpu_hours_lost_per_day": planning.gpu_hours_lost_per_day(JOB_GPUS, ettr),
    }
    for key, value in predicted.items():
        low, high = _band([v[key] for v in lived])
        median = statistics.median(v[key] for v in lived)
        print(f"{key:<24} {value:.5f}  band {low:.5f} .. {high:.5f} (median {median:.5f})")
    rates = plan.rates(rep, MODEL)
    node_rate = ry.GPUS_PER_NODE * rates.per_gpu[0] + rates.per_node[0]
    repairs = plan.repair_hours(rep, rates.cells)
    for spares in (1, 2):
        p = planning.restart_probability(spares, node_rate, 32, repairs, TARGET_S / 3600.0)
        low, high = _band([_restarted_in_time(y, spares) for y in years])
        print(f"restart in time, {spares} spare(s) {p:.4f}  band {low:.4f} .. {high:.4f}")


if __name__ == "__main__":
    main()
