"""The model is fast and small enough for the sizes the issue names."""

from __future__ import annotations

import time

import numpy as np

from exporter import catalog as c
from exporter.fleet.fleet import Fleet


def test_a_fleet_of_1024_nodes_steps_in_one_process_with_small_arrays() -> None:
    fleet = Fleet(1024, seed=1)
    frame = fleet.step(15)
    frame = fleet.step(30)
    assert frame[c.GPU_UTILIZATION.name].shape == (1024, 8)
    assert frame[c.NVLINK_ERRORS.name].shape == (1024, 8, 18, 4)
    assert frame.ib_counters["symbol_error"].shape == (1024, 8)
    state = sum(a.nbytes for a in vars(fleet.state).values() if isinstance(a, np.ndarray))
    frame_bytes = sum(a.nbytes for a in (*frame.metrics.values(), *frame.ib_counters.values()))
    assert state < 64 * 2**20 and frame_bytes < 64 * 2**20


def test_256_nodes_for_a_day_at_15_s_would_take_minutes_not_hours() -> None:
    fleet = Fleet(256, seed=1)
    fleet.step(15)
    steps = 60
    t0 = time.perf_counter()
    for i in range(steps):
        fleet.step(30 + 15 * i)
    per_step = (time.perf_counter() - t0) / steps
    projected_day = per_step * 86400 / 15
    assert projected_day < 300, f"{projected_day:.0f} s for 256 nodes x 24 h"
