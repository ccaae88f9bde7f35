"""The model is small enough for the sizes the issue names (its speed is measured in
``benchmarks/bench_fleet.py``, not asserted here)."""

from __future__ import annotations

import numpy as np

from exporter import catalog as c
from simulator.fleet import Fleet


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
