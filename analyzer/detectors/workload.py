"""What workload explains: the one test the straggler and peer detectors share to tell a job's
uneven work from broken hardware.

A synchronous job's ranks do different amounts of work (pipeline stages, uneven shards), so
their utilisation, power and temperature differ by design, and NCCL's collective waits keep a
waiting rank at ~100 % utilisation at less power. None of that moves the SM clock: a busy GPU
runs at its boost clock whatever its share of the step, unless something holds it down (a
fail-slow part, a throttle). So among a job's busy GPUs of one configuration, a mean SM clock
below the others' is the hardware's doing, and a deviation without one is workload. Pure
numpy over per-GPU means; no state.
"""

from __future__ import annotations

import warnings

import numpy as np

from analyzer.detectors.series import nanmedian, robust_z

CLOCK_Z = 3.0  # robust z below which a GPU's clock is behind its peers'
CLOCK_FLOOR = 0.005  # the robust scale is at least this share of the median clock


def mean_clock(c: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """Each GPU's mean SM clock over the samples (axis 0), NaN where ``busy`` is False."""
    with warnings.catch_warnings():  # an all-NaN column: a GPU without samples
        warnings.simplefilter("ignore", RuntimeWarning)
        cm = np.nanmean(c, axis=0)
    return np.where(busy, cm, np.nan)


def clock_z(cm: np.ndarray, axis: int | None = None) -> np.ndarray:
    """Robust z of each GPU's mean clock against the others' (NaN = not compared), over all of
    ``cm`` or along ``axis`` (one group per row); the scale is floored at half a percent of
    the median (healthy clocks are often exactly equal)."""
    if axis is None:
        return clock_z(cm.reshape(1, -1), axis=1).reshape(cm.shape)
    with np.errstate(all="ignore"):
        med = nanmedian(cm, axis=axis)
    floor = np.maximum(CLOCK_FLOOR * np.abs(np.nan_to_num(med)), 1e-9)
    return robust_z(cm, axis=axis, floor=floor)


def clocks_behind(z: np.ndarray, threshold: float = CLOCK_Z) -> np.ndarray:
    """Hardware evidence: True where a clock z (from :func:`clock_z`) is below ``-threshold``
    (an unknown z proves nothing: False)."""
    return np.asarray(np.nan_to_num(z, nan=0.0) < -threshold)


def explained_by_workload(deviates: np.ndarray, behind: np.ndarray) -> np.ndarray:
    """Of the deviating GPUs, those whose clocks keep up with their peers': the job's work is
    uneven there (a stage, a shard), not the part."""
    return np.asarray(deviates & ~behind)
