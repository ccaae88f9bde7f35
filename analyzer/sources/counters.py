"""Counter semantics shared by every source: when does a counter sample mean "new events"?

Pure numpy. A counter's first sample in a window is never read as an increase from 0 unless
we know the series was born there:

- with an **anchor** (the last value seen before the window: the Prometheus source keeps it
  between cycles and fetches it at cold start), the first sample counts from the anchor;
- without one, the first sample is a **baseline**, except when the series appears after its
  node was scraped without it at some grid point of the window (:func:`scraped_before`):
  the exporter creates an XID counter at its first XID, so such a series is born at 0 and its
  value counts. Any earlier scrape will do, not only the one just before: a missed scrape
  (or a node's short gap) right before the first XID must not turn it into a baseline;
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


def scraped_before(present: np.ndarray | None, first: int) -> bool:
    """The node (its ``present`` column) was scraped at some grid point before ``first``: a
    series whose first sample is at ``first`` did not exist then, so it was born since."""
    return present is not None and first > 0 and bool(np.asarray(present[:first]).any())


def born_inside(values: np.ndarray, present: np.ndarray | None) -> bool:
    """True when the row's first sample follows a grid point at which its node was scraped
    without it (so the series did not exist yet), False when unknown (its first sample is
    the window's first point, or the node was never scraped before it)."""
    ok = np.flatnonzero(~np.isnan(values))
    if len(ok) == 0:
        return False
    return scraped_before(present, int(ok[0]))


def counter_events(
    values: np.ndarray, anchor: float, present: np.ndarray | None
) -> list[tuple[int, int]]:
    """(grid index, count) of each increase of one event counter row (XIDs, AFIDs): counted
    from ``anchor`` when known, else from 0 when the series was born inside the window."""
    born = bool(np.isnan(anchor)) and born_inside(values, present)
    inc = counter_increases(values, anchor, born)
    return [(int(i), int(inc[i] + 0.5)) for i in np.flatnonzero(np.nan_to_num(inc, nan=0.0) > 0)]


def node_presence(up: np.ndarray | None, shape: tuple[int, int]) -> np.ndarray:
    """(T, nodes) bool: the node was scraped at that grid point (any GPU reported ``gpu_up``)."""
    if up is None or up.shape[:2] != shape:
        return np.zeros(shape, dtype=bool)
    return np.asarray(~np.isnan(up).reshape(shape[0], shape[1], -1).all(axis=2))
