"""The planner's arithmetic (accounting/planning.py) against values worked out by hand and
the figures Daly's paper quotes.

Daly (FGCS 22, 2006) gives the optimum compute time between checkpoints as 117, 57 and
9.1 min for a job MTBF of 24 h, 6 h and 15 min at a 5-minute checkpoint. Poisson(1)
cumulative: e^-1 x (1, 2, 2.5, 2.6667, 2.7083, 2.7167) = 0.3679, 0.7358, 0.9197, 0.9810,
0.9963, 0.9994 for k = 0..5.
"""

import math

import pytest

from accounting import planning

MIN = 1 / 60  # an hour's minute


@pytest.mark.parametrize(("mtbf_h", "minutes"), [(24.0, 117), (6.0, 57), (0.25, 9.1)])
def test_dalys_interval_is_the_one_his_paper_quotes_for_a_five_minute_checkpoint(
    mtbf_h: float, minutes: float
) -> None:
    got = planning.daly_interval(5 * MIN, mtbf_h) * 60
    assert got == pytest.approx(minutes, abs=0.5 if minutes > 10 else 0.05)


def test_youngs_interval_is_the_root_of_twice_cost_times_mtbf() -> None:
    # 2 x (5 min = 1/12 h) x 24 h = 4 h^2: two hours
    assert planning.young_interval(5 * MIN, 24.0) == pytest.approx(2.0)


@pytest.mark.parametrize("cost_h", [2.0, 2.5, 3.0])
def test_dalys_interval_is_the_mtbf_when_a_checkpoint_costs_twice_the_mtbf_or_more(
    cost_h: float,
) -> None:
    assert planning.daly_interval(cost_h, 1.0) == 1.0


def test_dalys_interval_is_where_his_complete_models_ettr_peaks() -> None:
    cost, restart, mtbf = 5 * MIN, 10 * MIN, 6.0
    best = planning.daly_interval(cost, mtbf)
    at_best = planning.ettr(best, cost, restart, mtbf)
    for factor in (0.8, 0.95, 1.05, 1.25):
        assert planning.ettr(best * factor, cost, restart, mtbf) < at_best
    # Young's first-order answer (60 min) is 3 min off and costs a little ETTR
    assert planning.ettr(planning.young_interval(cost, mtbf), cost, restart, mtbf) < at_best


def test_ettr_is_interval_over_mtbf_times_e_to_restart_over_mtbf_times_the_expm1() -> None:
    # t = M = 1 h, C = 0, R = M ln 2: 1 / (1 x 2 x (e - 1)) = 0.290988
    assert planning.ettr(1.0, 0.0, math.log(2.0), 1.0) == pytest.approx(0.290988, rel=1e-5)


def test_ettr_of_an_interval_as_long_as_the_checkpoint_is_the_complete_models() -> None:
    # t = C = 0.5 h, R = 0, M = 1 h: 0.5 / (e - 1) = 0.290988
    assert planning.ettr(0.5, 0.5, 0.0, 1.0) == pytest.approx(0.5 / (math.e - 1.0))


def test_ettr_without_failures_is_the_time_not_spent_writing_checkpoints() -> None:
    assert planning.ettr(1.0, 0.25, 1.0, math.inf) == pytest.approx(0.8)
    assert planning.ettr(math.inf, 0.25, 1.0, math.inf) == 1.0
    assert planning.ettr(0.0, 0.0, 1.0, math.inf) == 1.0  # free checkpoints, no failure


def test_ettr_of_free_continuous_checkpoints_loses_only_the_restarts() -> None:
    assert planning.ettr(0.0, 0.0, 1.0, 4.0) == pytest.approx(math.exp(-0.25))


def test_never_checkpointing_a_job_that_fails_gives_no_useful_work() -> None:
    assert planning.ettr(math.inf, 0.1, 0.1, 10.0) == 0.0


def test_one_failure_a_day_leaves_a_day_uninterrupted_with_probability_one_over_e() -> None:
    assert planning.uninterrupted(1 / 24, 24.0) == pytest.approx(math.exp(-1))


def test_gpu_hours_lost_a_day_are_gpus_times_24_times_one_minus_ettr() -> None:
    assert planning.gpu_hours_lost_per_day(1024, 0.95) == pytest.approx(1228.8)


def test_the_90_percent_band_of_419_expected_is_about_1_645_sigma_either_side() -> None:
    # 419 +- 1.645 x sqrt(419) = 385.3 .. 452.7
    assert planning.count_band(419) == (386, 453)


def test_spares_cover_the_outages_still_running_when_every_repair_outlasts_the_target() -> None:
    # 100 nodes x 0.001/h x E[(10 h - 0)+] = 1 outage running on average; a restart needs
    # P(Poisson(1) <= S - 1) >= p: 0.9810 at S = 4 meets 95 %, 0.9963 at S = 5 meets 99 %
    assert planning.spares(0.001, 100, [10.0] * 4, 0.0, 0.95) == 4
    assert planning.spares(0.001, 100, [10.0] * 4, 0.0, 0.99) == 5


def test_a_node_back_within_the_target_restarts_its_job_without_a_spare() -> None:
    assert planning.spares(0.01, 100, [0.1, 0.15], 10 * MIN, 0.99) == 0


def test_half_the_repairs_inside_the_target_need_a_spare_only_for_the_other_half() -> None:
    # quick = 0.5, E[(D - t)+] = 0.5 x 10 h = 5 h, busy = 100 x 0.002 x 5 = 1:
    # P(S) = 0.5 F(S) + 0.5 F(S - 1); S = 4: 0.5 (0.9963 + 0.9810) = 0.9887 < 0.99,
    # S = 5: 0.5 (0.9994 + 0.9963) = 0.9979
    repairs = [0.05, 10.0 + 10 * MIN]
    assert planning.restart_probability(4, 0.002, 100, repairs, 10 * MIN) == pytest.approx(
        0.98868, abs=1e-4
    )
    assert planning.spares(0.002, 100, repairs, 10 * MIN, 0.99) == 5


def test_a_repair_exactly_as_long_as_the_target_is_back_in_time() -> None:
    assert planning.spares(0.01, 100, [1.0], 1.0, 0.99) == 0


def test_a_restart_probability_met_exactly_is_enough() -> None:
    # no failure rate: nothing else holds a spare; half the repairs are back in time, so
    # without a spare P = 0.5 exactly
    assert planning.restart_probability(0, 0.0, 10, [0.0, 5.0], 1.0) == 0.5
    assert planning.spares(0.0, 10, [0.0, 5.0], 1.0, 0.5) == 0
    assert planning.spares(0.0, 10, [0.0, 5.0], 1.0, 0.51) == 1


def test_spares_are_unknown_without_a_measured_repair_time() -> None:
    assert planning.spares(0.01, 100, [], 10 * MIN, 0.99) is None
