"""The peer detector tells a job's uneven work from hardware with the straggler detector's
clock test (analyzer/detectors/workload.py): less power at the same (collective-wait)
utilisation is a light pipeline stage unless that rank's clocks are behind its peers'."""

from __future__ import annotations

import numpy as np

from analyzer.detectors import workload
from analyzer.detectors.peer import PeerDetector
from exporter import catalog as c

from .synth import healthy, window


def _waiting_job(power_drop: float, clock_factor: float = 1.0) -> dict:
    """One 8-node job waiting in NCCL at ~99 % utilisation; node 3 draws ``power_drop`` W less
    (and runs at ``clock_factor`` of the others' clock) over the last 8 samples."""
    d = healthy(seed=11)
    m, rng = d["metrics"], np.random.default_rng(12)
    m[c.GPU_UTILIZATION.name] = np.clip(
        0.99 + rng.normal(0, 0.003, m[c.GPU_UTILIZATION.name].shape), 0, 1
    )
    m[c.GPU_POWER.name] = 600 + rng.normal(0, 3, m[c.GPU_POWER.name].shape)
    m[c.GPU_TEMPERATURE.name] = np.round(27 + 0.075 * m[c.GPU_POWER.name])
    m[c.GPU_POWER.name][-8:, 3, :] -= power_drop
    m[c.GPU_SM_CLOCK.name][-8:, 3, :] *= clock_factor
    return d


def test_a_rank_drawing_less_power_at_the_same_utilisation_with_equal_clocks_is_workload():
    found = PeerDetector().detect(window(_waiting_job(150.0)))
    assert [f for f in found if f.kind == "faulty_machine"] == []


def test_the_same_power_deficit_with_clocks_behind_its_peers_is_hardware():
    found = PeerDetector().detect(window(_waiting_job(150.0, clock_factor=0.98)))
    assert {(f.node, f.kind) for f in found} == {("node-03", "faulty_machine")}
    assert "power starved" in found[0].summary


def test_the_shared_clock_test_flags_only_the_gpu_whose_clock_is_behind():
    cm = np.full((4, 8), 1980e6)
    cm[2, 5] *= 0.98
    behind = workload.clocks_behind(workload.clock_z(cm))
    assert behind.sum() == 1 and behind[2, 5]
    assert not workload.clocks_behind(workload.clock_z(np.full((4, 8), 1980e6))).any()
