"""Stragglers the way they look in a real NCCL job: healthy ranks wait inside collective
kernels at ~100 % utilisation, so utilisation cannot tell the slow rank; its SM clock (and
power, temperature) can. Simulated end to end through the frame buffer."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detectors.straggler import StragglerDetector
from analyzer.sources.frames import FrameBuffer
from exporter import catalog as c
from simulator import Fleet
from simulator.topology import port_name


def _run(seed: int, slowdown: float | None, signals: tuple[str, ...] = ()):
    fleet = Fleet(16, seed, idle_fraction=0.0, small_job_share=0.0, mean_job_s=1e12,
                  busy_wait=True, signals=signals)  # fmt: skip
    fleet.step(15.0)
    job_of = fleet.jobs.job_of
    largest = np.flatnonzero(job_of == np.bincount(job_of[job_of >= 0]).argmax())
    node = int(largest[seed % len(largest)])  # a rank of the largest job
    if slowdown is not None:
        fleet.inject("straggler", fleet.nodes[node], "", {"slowdown": slowdown}, onset=300)
    buf = FrameBuffer(fleet.nodes, ports=[port_name(p) for p in range(8)], sku=fleet.models)
    det, found = StragglerDetector(), []
    for frame in fleet.run(1200, 15.0):
        buf.push(frame, fleet.jobs_at(frame.t))
        if frame.t >= 600 and frame.t % 60 == 0:
            found = det.detect(buf.window())
    return buf.window(), found, fleet.nodes[node]


def test_with_collective_waits_every_rank_looks_busy_so_utilisation_alone_cannot_tell():
    w, _, _ = _run(1, 0.03)
    util = w.get(c.GPU_UTILIZATION)
    assert util is not None
    per_node = np.nanmean(util[-12:], axis=(0, 2))
    assert per_node.min() > 0.97 and np.ptp(per_node) < 0.01


@pytest.mark.parametrize("seed", [1, 2, 3, 4, 5])
def test_a_3_percent_slow_rank_is_found_from_its_clocks_and_drained_when_persistent(seed):
    _, found, slow = _run(seed, 0.03)
    assert [(f.node, f.kind) for f in found] == [(slow, "straggler")]
    assert found[0].action == "drain" and found[0].evidence["clock_deficit"] == 1.0


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_healthy_busy_waiting_job_has_no_straggler(seed):
    assert _run(seed, None)[1] == []


@pytest.mark.parametrize(
    "signals, by", [(("steps",), "by step time"), (("activity",), "by SM activity")]
)
def test_published_step_times_or_profiling_activity_find_the_3_percent_slow_rank(signals, by):
    _, found, slow = _run(2, 0.03, signals)
    assert [(f.node, f.kind) for f in found] == [(slow, "straggler")] and by in found[0].summary
    assert _run(2, None, signals)[1] == []
