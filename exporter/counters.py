"""Monotonic counters over hardware counters that reset (driver reload, reboot, port reset).

Sysfs and NVML counters can go down. Exported raw, Prometheus would see a reset, and
analyzers that difference raw values would see negative traffic. :class:`Monotonic` absorbs
a drop: the value after a reset counts as growth since the reset, so the exported series only
grows and ``rate()`` stays correct.
"""

from __future__ import annotations

from collections.abc import Hashable


class Monotonic:
    """Keeps one monotonic total per key. Pure state, no I/O."""

    def __init__(self) -> None:
        self._last: dict[Hashable, float] = {}
        self._offset: dict[Hashable, float] = {}
        self.resets = 0

    def update(self, key: Hashable, raw: float) -> float:
        """Feed a raw reading; return the monotonic total to export."""
        last = self._last.get(key)
        offset = self._offset.get(key, 0.0)
        if last is not None and raw < last:
            offset += last  # everything counted before the reset stays counted
            self._offset[key] = offset
            self.resets += 1
        self._last[key] = raw
        return raw + offset
