"""The planner on the report's own MTBF cells and repair times (accounting/plan.py), worked
out by hand.

The fleet: n1 with 8 GPUs and n2 with 2, 1,000 h each: 10,000 GPU-hours and 2,000 node-hours
(a node without rows of its own is exposed by its GPUs). 4 GPU failures: per-GPU rate 4e-4/h,
bounds from the cells (NIST chi-squared table): 2 x 10,000 / chi2(0.95; 10) = 20,000 / 18.307
and 20,000 / chi2(0.05; 8) = 20,000 / 2.733; a component without failures has
lower90 = 2T / chi2(0.95; 2) = 2T / 5.991 and no upper bound.
"""

import json
import math

import pytest

from accounting import plan, report
from accounting.interchange import read_exposure, read_incidents
from tests.accounting.builders import at, gpus, incident, job

FLEET = gpus("n1", 8, at(0), at(1000)) + gpus("n2", 2, at(0), at(1000))


def _report(incidents: list[dict], exposure: list[dict] = FLEET) -> report.Report:
    return report.build(
        read_incidents([json.dumps(o) for o in incidents], "incidents"),
        read_exposure([json.dumps(o) for o in exposure], "exposure"),
    )


def _failures(n: int, **kw: object) -> list[dict]:
    return [
        incident(f"i{k}", onset=at(k + 1), detected=at(k + 1), **kw)  # type: ignore[arg-type]
        for k in range(n)
    ]


def _one(rep: report.Report, **kw: object) -> plan.Row:
    settings = plan.Settings(models=("H100",), gpus=(8,), **kw)  # type: ignore[arg-type]
    (row,) = plan.plan(rep, settings)
    return row


def test_a_jobs_failure_rate_is_its_gpus_times_the_gpu_rates_plus_its_nodes_times_the_node_rates() -> (
    None
):
    row = _one(_report(_failures(4)))
    # estimate: 8 GPUs x 4e-4 (node cells have no failure: 0) = 3.2e-3/h = 0.0768 a day
    assert row.failures_per_day.estimate == pytest.approx(0.0768)
    # fewest: 8 x 2.733 / 20,000 (the other cells have no upper bound: 0)
    assert row.failures_per_day.low == pytest.approx(8 * 2.733 / 20_000 * 24, rel=1e-3)
    # most: 8 x (18.307 + 5.991 + 5.991) / 20,000 + 1 node x 3 x 5.991 / 4,000
    most = 8 * (18.307 + 2 * 5.991) / 20_000 + 3 * 5.991 / 4_000
    assert row.failures_per_day.high == pytest.approx(most * 24, rel=1e-3)
    assert row.job_mtbf_h.estimate == pytest.approx(312.5)
    assert row.job_mtbf_h.low == pytest.approx(1 / most, rel=1e-3)


def test_the_interval_and_ettr_come_from_the_jobs_mtbf_at_the_estimate() -> None:
    row = _one(_report(_failures(4)), checkpoint_s=300.0, restart_s=600.0)
    mtbf, cost = 312.5, 5 / 60
    x = cost / (2 * mtbf)
    daly = math.sqrt(2 * cost * mtbf) * (1 + math.sqrt(x) / 3 + x / 9) - cost
    assert row.daly_h.estimate == pytest.approx(daly)
    assert row.young_h == pytest.approx(math.sqrt(2 * cost * mtbf))
    wall = mtbf * math.exp((10 / 60) / mtbf) * math.expm1((daly + cost) / mtbf)
    assert row.ettr.estimate == pytest.approx(daly / wall)
    assert row.lost_gpu_h_per_day.estimate == pytest.approx(8 * 24 * (1 - daly / wall))
    # more failures: a shorter interval, a lower ETTR, more lost; the band holds the estimate
    assert row.daly_h.low is not None and row.daly_h.low < daly
    assert row.ettr.low is not None and row.ettr.high is not None
    assert row.ettr.low < row.ettr.estimate < row.ettr.high  # type: ignore[operator]
    assert row.uninterrupted.estimate == pytest.approx(math.exp(-0.0768))


def test_a_model_without_failures_has_no_estimated_interval_but_a_worst_case_one() -> None:
    row = _one(_report([]))
    assert row.failures_per_day.estimate == 0.0
    assert row.job_mtbf_h.estimate is None and row.job_mtbf_h.high is None  # unbounded
    assert row.daly_h.estimate is None and row.daly_h.low is not None
    assert row.uninterrupted.estimate == 1.0 and row.uninterrupted.low is not None
    assert row.uninterrupted.low < 1.0
    # checkpointing at the worst case's interval: only the checkpoints cost at the estimate
    assert row.daly_h.low is not None and row.ettr.estimate is not None
    assert row.ettr.estimate == pytest.approx(row.daly_h.low / (row.daly_h.low + 5 / 60))
    assert row.ettr.low is not None and 0.5 < row.ettr.low < row.ettr.estimate


def test_free_checkpoints_on_a_model_without_failures_lose_nothing_at_the_estimate() -> None:
    row = _one(_report([]), checkpoint_s=0.0)
    assert row.ettr.estimate == 1.0 and row.lost_gpu_h_per_day.estimate == 0.0
    assert row.ettr.low is not None and row.ettr.low < 1.0  # restarts still cost at worst


def test_the_model_is_found_under_any_name_its_sku_was_given() -> None:
    fleet = gpus("n1", 8, at(0), at(1000), "NVIDIA H100 80GB HBM3")
    rep = _report(_failures(2, gpu_model="H100-SXM5-80GB"), fleet)
    for name in ("H100 SXM5 80GB", "NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"):
        settings = plan.Settings(models=(name,), gpus=(8,))
        (row,) = plan.plan(rep, settings)
        assert row.failures_per_day.estimate == pytest.approx(8 * 2 / 8_000 * 24)


def test_software_failures_are_counted_apart_and_not_in_the_rate() -> None:
    rep = _report([*_failures(4), incident("s", component="software", gpu=None)])
    row = _one(rep)
    assert row.unitless_failures == 1
    assert row.failures_per_day.estimate == pytest.approx(0.0768)


def test_spares_come_from_the_models_outages_repair_times_onset_to_return() -> None:
    # two outages of 10 h (onset to return) on a 1-node job's own partition: a GPU fault
    # and a host fault that took the node out (gpus_out 1 without a GPU: the node)
    outs = [
        incident("g", onset=at(101), detected=at(101), mitigated=at(102), returned=at(111),
                 gpus_out=8),
        incident("h", onset=at(201), detected=at(201), mitigated=at(202), returned=at(211),
                 gpus_out=1, component="host", gpu=None),
    ]  # fmt: skip
    rep = _report(outs)
    assert plan.repair_hours(rep, plan.rates(rep, "H100").cells) == [10.0, 10.0]
    # a node fails at 8 x 1 / 10,000 (GPU) + 1 / 2,000 (host) = 1.3e-3/h; another outage
    # still holds a spare 10 min on with mean 1 x 1.3e-3 x 9.8333 h = 0.012783: one spare
    # restarts in time with P = e^-0.012783 = 0.98730, enough for 98.7 %, not for 98.8 %
    assert _one(rep, restart_probability=0.987).spares.estimate == 1.0
    row = _one(rep, restart_target_s=600.0, restart_probability=0.988)
    assert row.spares.estimate == 2.0
    assert row.repairs == 2


def test_an_outage_back_exactly_at_the_target_needs_no_spare() -> None:
    out = incident("o", onset=at(101), detected=at(101), mitigated=at(101.05),
                   returned=at(101 + 1 / 6), gpus_out=8)  # fmt: skip
    assert _one(_report([out]), restart_target_s=600.0).spares.estimate == 0.0
    assert _one(_report([out]), restart_target_s=599.0).spares.estimate == 1.0


def test_without_a_measured_outage_the_spares_are_unknown() -> None:
    row = _one(_report(_failures(4)))  # gpus_out 0: no node went out
    assert row.repairs == 0 and row.spares.estimate is None


def _hit_twice() -> report.Report:
    """Two GPU failures whose job resumed 0.5 h and 1.5 h after the interruption."""
    return _report([
        incident(f"r{k}", onset=at(10 * k), detected=at(10 * k),
                 jobs=[job("j", 8, at(10 * k), resumed=at(10 * k + wait),
                           last_checkpoint=at(10 * k - 1))])
        for k, wait in ((1, 0.5), (2, 1.5))
    ])  # fmt: skip


def test_a_measured_restart_is_the_mean_interruption_to_resumption_of_the_models_jobs() -> None:
    rep = _hit_twice()
    assert plan.restart_hours(rep, plan.rates(rep, "H100").cells) == [0.5, 1.5]
    measured = _one(rep, restart_s=None)
    assert (measured.restart_h, measured.restarts_measured) == (1.0, 2)
    given = _one(rep, restart_s=3600.0)
    assert given.restarts_measured is None
    assert measured.ettr == given.ettr  # the same ETTR as giving the hour


def test_a_measured_restart_without_a_resumed_job_is_refused() -> None:
    with pytest.raises(ValueError, match=r"^--restart-time measured: no job hit on 'H100'"):
        _one(_report(_failures(2)), restart_s=None)


def test_a_model_the_report_has_no_cell_for_is_named_with_the_models_it_has() -> None:
    with pytest.raises(ValueError, match=r"--plan: no MTBF cell with exposure for 'B200'.*H100"):
        plan.plan(_report(_failures(1)), plan.Settings(models=("B200",), gpus=(8,)))


@pytest.mark.parametrize(
    ("change", "flag"),
    [
        ({"gpus": (0,)}, "--plan-gpus"),
        ({"gpus": ()}, "--plan-gpus"),
        ({"models": ("",)}, "--plan"),
        ({"checkpoint_s": -1.0}, "--checkpoint-cost"),
        ({"restart_s": math.nan}, "--restart-time"),
        ({"restart_target_s": -5.0}, "--restart-target"),
        ({"hours": 0.0}, "--plan-hours"),
        ({"gpus_per_node": 0}, "--gpus-per-node"),
        ({"partition_nodes": 0}, "--partition-nodes"),
        ({"gpus": (8, 64), "partition_nodes": 7}, "--partition-nodes: 7 nodes cannot run"),
        ({"restart_probability": 1.0}, "--restart-probability"),
        ({"restart_probability": 0.0}, "--restart-probability"),
    ],
)
def test_a_bad_setting_is_refused_naming_its_flag(change: dict, flag: str) -> None:
    settings = plan.Settings(**{"models": ("H100",), "gpus": (8,), **change})
    with pytest.raises(ValueError, match=f"^{flag}"):
        settings.check()


def test_good_settings_pass_the_check() -> None:
    plan.Settings(models=("H100",), gpus=(8, 1024), checkpoint_s=0.0).check()
    # the smallest of each: one GPU, one per node, half an hour, a partition just the job's
    plan.Settings(
        models=("H100",), gpus=(1, 64), hours=0.5, gpus_per_node=1, partition_nodes=64
    ).check()


def test_the_defaults_are_the_documented_ones() -> None:
    s = plan.Settings(models=("H100",), gpus=(8,))
    assert (s.checkpoint_s, s.restart_s, s.hours, s.gpus_per_node) == (300.0, 600.0, 24.0, 8)
    assert (s.partition_nodes, s.restart_target_s, s.restart_probability) == (None, 600.0, 0.99)


@pytest.mark.parametrize(
    ("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("5m", 300.0), ("5min", 300.0),
                          ("1.5h", 5400.0), ("0", 0.0)]
)  # fmt: skip
def test_durations_read_seconds_minutes_and_hours(text: str, seconds: float) -> None:
    assert plan.duration(text, "--restart-time") == seconds


@pytest.mark.parametrize("text", ["-5m", "5 days", "", "m"])
def test_a_duration_that_is_not_one_names_its_flag(text: str) -> None:
    with pytest.raises(ValueError, match=r"^--checkpoint-cost: .* is not a duration"):
        plan.duration(text, "--checkpoint-cost")


def test_job_sizes_are_a_comma_separated_list_of_counts() -> None:
    assert plan.counts("256,1024", "--plan-gpus") == (256, 1024)
    with pytest.raises(ValueError, match=r"^--plan-gpus: '1k' is not a count"):
        plan.counts("1k", "--plan-gpus")
