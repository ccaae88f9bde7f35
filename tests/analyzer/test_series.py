"""Pure helpers over window arrays: counters, medians, gates."""

import numpy as np

from analyzer.detectors.series import first_true_time, increases, k_of_n, nanmedian, robust_z


def test_counter_reset_counts_the_new_value_not_negative_traffic():
    c = np.array([10.0, 12.0, 3.0, 5.0])
    assert increases(c).tolist() == [2.0, 3.0, 2.0]


def test_gap_in_a_counter_is_bridged_to_the_next_sample():
    c = np.array([1.0, np.nan, 4.0])
    inc = increases(c)
    assert np.isnan(inc[0]) and inc[1] == 3.0


def test_nanmedian_matches_numpy_and_handles_all_nan_rows():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(5, 9))
    x[rng.random(x.shape) < 0.3] = np.nan
    x[2] = np.nan
    got = nanmedian(x, axis=1)
    with np.errstate(all="ignore"):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            want = np.nanmedian(x, axis=1, keepdims=True)
    assert np.allclose(got, want, equal_nan=True)


def test_robust_z_is_floored_so_identical_peers_do_not_divide_by_zero():
    z = robust_z(np.array([5.0, 5.0, 5.0, 6.0]), axis=0, floor=0.5)
    assert z.tolist() == [0.0, 0.0, 0.0, 2.0]


def test_k_of_n_and_trailing_run_start():
    flags = np.array([[False], [True], [False], [True], [True]])
    assert k_of_n(flags, 2, 3).tolist() == [True]
    assert first_true_time(flags, np.arange(5.0) * 10).tolist() == [30.0]


def test_total_increase_skipping_unmoved_series_equals_the_per_step_sum_of_every_series():
    from analyzer.detectors.series import total_increase

    rng = np.random.default_rng(7)
    for _ in range(50):
        c = np.cumsum(rng.poisson(0.05, (12, 6, 5)), axis=0).astype(float)
        c[rng.random(c.shape) < 0.15] = np.nan  # gaps
        c[:, 0, 0] = np.nan  # never known
        c[5:, 1, 1] = 0.0  # a reset to zero
        c[:, 2, 2] = 42.0  # flat
        for sl in (None, slice(0, 6), slice(6, 12), slice(3, 4)):
            part = c if sl is None else c[slice(max((sl.start or 0) - 1, 0), sl.stop)]
            dense = np.nansum(increases(part), axis=0) if part.shape[0] > 1 else np.zeros((6, 5))
            np.testing.assert_array_equal(total_increase(c, sl), dense)
