"""Counter semantics shared by every source: when does a counter sample mean "new events"?

Pure numpy. A counter's first sample in a window is never read as an increase from 0 unless
we know the series was born there:

- with an **anchor** (the last value seen before the window: the Prometheus source keeps it
  between cycles and fetches it at cold start), the first sample counts from the anchor;
- without one, the first sample is a **baseline**, except when the series appears while its
  node was being scraped at the grid point before (``present[i0 - 1]``): the exporter creates
  an XID counter at its first XID, so such a series is born at 0 and its value counts;
- a drop is a **reset** (exporter restart): the new value counts, as Prometheus
  ``increase()`` does; a gap (NaN) is bridged to the next sample, never read as 0.
"""

from __future__ import annotations

import numpy as np


def counter_increases(
    values: np.ndarray, anchor: float = float("nan"), born: bool = False
) -> np.ndarray:
    """Per-sample increases of one counter row (NaN where unknown or a baseline).

    ``values``: the row on the window grid (NaN = no sample). ``anchor``: last value before
    the window (NaN = unknown). ``born``: the series provably did not exist at the point
    before its first sample (see module docstring)."""
    out = np.full(values.shape, np.nan)
    ok = np.flatnonzero(~np.isnan(values))
    if len(ok) == 0:
        return out
    v = values[ok]
    first_prev = anchor if not np.isnan(anchor) else (0.0 if born else np.nan)
    prev = np.concatenate([[first_prev], v[:-1]])
    with np.errstate(invalid="ignore"):
        inc = np.where(v < prev, v, v - prev)  # a drop is a counter reset
    out[ok] = inc
    return out


def born_inside(values: np.ndarray, present: np.ndarray | None) -> bool:
    """True when the row's first sample follows a grid point at which its node was scraped
    (so the series did not exist yet), False when unknown (first point, or a node gap)."""
    ok = np.flatnonzero(~np.isnan(values))
    if len(ok) == 0 or ok[0] == 0 or present is None:
        return False
    return bool(present[ok[0] - 1])


def node_presence(up: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
    """(T, nodes) bool: the node was scraped at that grid point (any GPU reported ``gpu_up``)."""
    if up is None or up.shape[:2] != shape:
        return np.zeros(shape, dtype=bool)
    return np.asarray(~np.isnan(up).reshape(shape[0], shape[1], -1).all(axis=2))
