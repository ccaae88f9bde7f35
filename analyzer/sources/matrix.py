"""One query's history in memory: rows of series on the window's time grid, kept between cycles.

Pure numpy state owned by :class:`~analyzer.sources.prometheus.PrometheusSource`. Each cycle
the grid :meth:`slides <SeriesMatrix.slide>` to the new end (columns that leave the window
fold into each row's ``anchor``, the last value seen before the window, which is what counter
semantics need), then the fetched points are :meth:`merged <SeriesMatrix.merge>` in. Rows are
keyed by the query's kept label values; a row's positions in the window arrays are decoded
once, when the row first appears.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Key = tuple[str, ...]


class SeriesMatrix:
    def __init__(self, T: int) -> None:
        self.T = T
        self.keys: list[Key] = []
        self.index: dict[Key, int] = {}
        self.vals = np.full((0, T), np.nan)
        self.anchor = np.full(0, np.nan)
        self.end: float | None = None  # grid time of the last column fetched successfully
        self.version = 0  # bumped whenever rows come or go (caches of label columns key on it)
        self.cache: dict[str, np.ndarray] = {}
        self.cache_version = -1

    def __len__(self) -> int:
        return len(self.keys)

    def slide(self, k: int) -> None:
        """Move the grid ``k`` steps forward: leaving columns become anchors."""
        if k <= 0 or not len(self.keys):
            return
        k = min(k, self.T)
        gone = self.vals[:, :k]
        last = _last_valid(gone)
        self.anchor = np.where(np.isnan(last), self.anchor, last)
        self.vals = np.concatenate([self.vals[:, k:], np.full((len(self.keys), k), np.nan)], 1)

    def clear(self, first_col: int) -> None:
        """Forget columns ``first_col..`` (they are about to be fetched again)."""
        self.vals[:, max(first_col, 0) :] = np.nan

    def rows(self, keys: Sequence[Key]) -> np.ndarray:
        """Row index of each key; keys not held yet get new (all-NaN) rows."""
        index = self.index
        get = index.get
        rows = [get(k, -1) for k in keys]  # one lookup per key: the common case, all held
        if -1 in rows:
            new = [k for k in dict.fromkeys(keys) if k not in index]
            self.version += 1
            base = len(self.keys)
            index.update((k, base + i) for i, k in enumerate(new))
            self.keys += new
            self.vals = np.concatenate([self.vals, np.full((len(new), self.T), np.nan)])
            self.anchor = np.concatenate([self.anchor, np.full(len(new), np.nan)])
            rows = [index[k] for k in keys]
        return np.array(rows, dtype=np.int64)

    def prune(self) -> None:
        """Drop rows with no value left in the window (a node gone for a whole window)."""
        empty = np.isnan(self.vals).all(axis=1)
        if empty.any():
            self.keep_only({k for k, e in zip(self.keys, empty, strict=True) if not e})

    def subset(self, rows: np.ndarray) -> SeriesMatrix:
        """A copy holding only the rows where ``rows`` (bool) is True."""
        out = SeriesMatrix(self.T)
        out.keys = [k for k, ok in zip(self.keys, rows, strict=True) if ok]
        out.index = {k: i for i, k in enumerate(out.keys)}
        out.vals, out.anchor, out.end = self.vals[rows], self.anchor[rows], self.end
        return out

    def keep_only(self, keys: set[Key]) -> None:
        """Drop every row whose key is not in ``keys``."""
        keep = [i for i, k in enumerate(self.keys) if k in keys]
        if len(keep) == len(self.keys):
            return
        self.version += 1
        self.keys = [self.keys[i] for i in keep]
        self.index = {k: i for i, k in enumerate(self.keys)}
        self.vals, self.anchor = self.vals[keep], self.anchor[keep]


def _last_valid(a: np.ndarray) -> np.ndarray:
    """Last non-NaN value of each row (NaN when none)."""
    if a.shape[1] == 0:
        return np.full(a.shape[0], np.nan)
    ok = ~np.isnan(a)
    last = a.shape[1] - 1 - np.argmax(ok[:, ::-1], axis=1)
    out = a[np.arange(a.shape[0]), last]
    return np.where(ok.any(axis=1), out, np.nan)
