"""Shared pure helpers over window arrays: reset-aware counter increases, k-of-n gates.

Used by every detector module; numpy only, no state, no I/O.
"""

from __future__ import annotations

import warnings

import numpy as np


def increases(counter: np.ndarray) -> np.ndarray:
    """Per-step increases of a raw counter along axis 0; a drop is a reset (the new value
    counts as the increase, as Prometheus ``increase()`` does); a gap (NaN) bridges to the
    next sample. Shape ``(T-1, ...)``; NaN where nothing is known."""
    if counter.shape[0] < 2:
        return np.full((0, *counter.shape[1:]), np.nan)
    filled = ffill(counter)
    prev, cur = filled[:-1], counter[1:]
    d = cur - prev
    with np.errstate(invalid="ignore"):
        d = np.where(d < 0, cur, d)
    return d


def ffill(a: np.ndarray) -> np.ndarray:
    """Forward-fill NaNs along axis 0 (vectorised)."""
    if a.shape[0] == 0:
        return a
    mask = np.isnan(a)
    if not mask.any():
        return a
    idx = np.where(~mask, np.arange(a.shape[0]).reshape((-1,) + (1,) * (a.ndim - 1)), 0)
    np.maximum.accumulate(idx, axis=0, out=idx)
    out = np.take_along_axis(a, idx, axis=0)
    return out


def total_increase(counter: np.ndarray, sl: slice | None = None) -> np.ndarray:
    """Sum of increases over the window (or a tail slice of it); 0 where nothing is known.

    Most series of the large families (NVLink errors: 576 a node) never move in a window:
    their increase is 0 without the per-step pass, so only the series whose lowest and
    highest known values differ (a reset lowers one) are taken through :func:`increases`."""
    c = counter if sl is None else counter[_widen(sl)]
    if c.shape[0] < 2:
        return np.zeros(counter.shape[1:])
    flat = c.reshape(c.shape[0], -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns: nothing known
        moved = np.flatnonzero(np.nanmax(flat, axis=0) > np.nanmin(flat, axis=0))
    out = np.zeros(flat.shape[1])
    if len(moved):
        out[moved] = np.nansum(increases(flat[:, moved]), axis=0)
    return out.reshape(counter.shape[1:])


def _widen(sl: slice) -> slice:
    start = sl.start or 0
    return slice(max(start - 1, 0), sl.stop)


def k_of_n(flags: np.ndarray, k: int, n: int) -> np.ndarray:
    """True where at least ``k`` of the last ``n`` samples (axis 0) are True."""
    tail = flags[-n:]
    return np.asarray(np.sum(tail, axis=0) >= k)


def k_of_n_known(flags: np.ndarray, known: np.ndarray, k: int, n: int) -> np.ndarray:
    """True where at least ``k`` of the last ``n`` *known* samples (axis 0) are True: a gap
    counts neither as healthy nor as faulty, it is skipped (looking further back)."""
    rank = np.cumsum(known[::-1], axis=0)[::-1]  # 1 = the newest known sample
    recent = known & (rank <= n)
    return np.asarray(np.sum(flags & recent, axis=0) >= k)


def sustained(flags: np.ndarray, n: int) -> np.ndarray:
    """True where the last ``n`` samples are all True (NaN-derived False breaks the run)."""
    if flags.shape[0] < n:
        return np.zeros(flags.shape[1:], dtype=bool)
    return np.asarray(np.all(flags[-n:], axis=0))


def first_true_time(flags: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Time of the start of the trailing run of True along axis 0 (NaN where the last is False)."""
    T = flags.shape[0]
    if T == 0:
        return np.full(flags.shape[1:], np.nan)
    rev = flags[::-1]
    # length of the trailing run
    run = np.where(rev.all(axis=0), T, np.argmin(rev, axis=0))
    idx = np.clip(T - run, 0, T - 1)
    out = t[idx].astype(float)
    return np.where(run > 0, out, np.nan)


def nanmedian(x: np.ndarray, axis: int) -> np.ndarray:
    """NaN-ignoring median along ``axis`` with keepdims (NaN where a row is all NaN).

    numpy's ``nanmedian`` goes through masked arrays and was most of a cycle's time; a sort
    (NaNs sort last) and two gathers is an order of magnitude faster.
    """
    a = np.sort(np.moveaxis(x, axis, -1), axis=-1)
    n = (~np.isnan(a)).sum(axis=-1, keepdims=True)
    lo = np.clip((n - 1) // 2, 0, None)
    hi = np.clip(n // 2, 0, None)
    if a.shape[-1] == 0:
        return np.full((*a.shape[:-1], 1), np.nan)
    m = 0.5 * (np.take_along_axis(a, lo, -1) + np.take_along_axis(a, hi, -1))
    m = np.where(n > 0, m, np.nan)
    return np.moveaxis(m, -1, axis)


def robust_z(x: np.ndarray, axis: int, floor: float) -> np.ndarray:
    """(x - median) / (1.4826 * MAD), with the scale floored at ``floor`` (NaN-aware)."""
    with np.errstate(all="ignore"):
        med = nanmedian(x, axis=axis)
        mad = nanmedian(np.abs(x - med), axis=axis) * 1.4826
    scale = np.maximum(np.nan_to_num(mad, nan=floor), floor)
    return np.asarray((x - med) / scale)


def last_valid(a: np.ndarray) -> np.ndarray:
    """The last non-NaN value along axis 0 (NaN where there is none)."""
    if a.shape[0] == 0:
        return np.full(a.shape[1:], np.nan)
    return np.asarray(ffill(a)[-1])


def window_rate(counter: np.ndarray, t: np.ndarray, sl: slice) -> np.ndarray:
    """Average per-second increase over the samples in ``sl`` (reset-aware, gaps bridged)."""
    idx = np.arange(len(t))[sl]
    if len(idx) < 2:
        return np.zeros(counter.shape[1:])
    span = float(t[idx[-1]] - t[max(idx[0] - 1, 0)]) or 1.0
    return np.asarray(total_increase(counter, sl) / span)
