"""Same seed, same scenario: identical truth and identical samples, bit for bit."""

from __future__ import annotations

import numpy as np

from simulator import scenario
from simulator.fleet import Fleet
from simulator.frame import Frame

MIX = scenario.parse(
    {
        "fleet": {"nodes": 48, "nodes_per_leaf": 16},
        "random": {
            "horizon_s": 10800,
            "rates": {
                k: 400.0
                for k in (
                    "xid_79",
                    "ib_flap",
                    "reboot",
                    "nvlink_errors",
                    "straggler_gpu",
                    "ecc_sbe_storm",
                    "leaf_outage",
                    "app_xid",
                )
            },
        },
    }
)


def _run(seed: int) -> tuple[Fleet, list[Frame]]:
    fleet = scenario.build(MIX, seed=seed)
    return fleet, list(fleet.run(10800, 60))


def _same(a: Frame, b: Frame) -> bool:
    keys = a.metrics.keys() == b.metrics.keys() and a.ib_counters.keys() == b.ib_counters.keys()
    arrays = all(np.array_equal(a[k], b[k], equal_nan=True) for k in a.metrics)
    ib = all(
        np.array_equal(a.ib_counters[k], b.ib_counters[k], equal_nan=True) for k in a.ib_counters
    )
    return keys and arrays and ib and a.xids == b.xids and np.array_equal(a.resets, b.resets)


def test_same_seed_and_scenario_give_identical_truth_and_samples() -> None:
    fa, a = _run(7)
    fb, b = _run(7)
    assert len(fa.truth()) > 8
    assert fa.truth() == fb.truth()
    assert all(_same(x, y) for x, y in zip(a, b, strict=True))
    assert fa.jobs.history == fb.jobs.history


def test_another_seed_gives_another_fleet() -> None:
    fa, a = _run(7)
    fb, b = _run(8)
    assert fa.truth() != fb.truth()
    assert not _same(a[-1], b[-1])
