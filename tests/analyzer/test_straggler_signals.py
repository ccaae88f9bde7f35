"""Straggler signals that survive collective waits: the step time a job publishes per rank
(checkpoint.publish_step -> gpuwarden_job_step_seconds) and SM/tensor activity, preferred to
utilisation when present; utilisation and clocks stay the fallback."""

from __future__ import annotations

import numpy as np

from analyzer.detectors.straggler import StragglerDetector
from exporter import catalog as c

from .synth import G, healthy, keys, window


def waiting(nodes: int = 8, seed: int = 0) -> dict:
    """A busy-waiting NCCL job: every rank at ~99 % utilisation, equal clocks."""
    d = healthy(nodes=nodes, seed=seed)
    rng = np.random.default_rng(seed + 1)
    d["metrics"][c.GPU_UTILIZATION.name] = np.clip(
        0.99 + rng.normal(0, 0.004, (41, nodes, G)), 0, 1
    )
    return d


def step_times(d: dict, slow: dict[int, float], seed: int = 0) -> None:
    rng = np.random.default_rng(seed + 2)
    st = 1.5 * (1 + rng.normal(0, 0.002, (41, len(d["nodes"]), G)))
    for n, s in slow.items():
        st[:, n, :] *= 1 + s
    d["metrics"][c.JOB_STEP_SECONDS.name] = st


def test_a_rank_3_percent_slower_by_its_published_step_time_is_the_straggler():
    d = waiting()
    step_times(d, {5: 0.03})
    found = StragglerDetector().detect(window(d))
    assert keys(found) == {("node-05", "node", "straggler")}
    assert "by step time" in found[0].summary and found[0].action == "notify"  # clocks equal


def test_published_step_times_outrank_a_utilisation_difference_that_is_not_slowness():
    d = healthy()
    d["metrics"][c.GPU_UTILIZATION.name][:, 2, :] += 0.1  # a busier node, same step time
    assert keys(StragglerDetector().detect(window(d))) == {("node-02", "node", "straggler")}
    step_times(d, {})
    assert StragglerDetector().detect(window(d)) == []


def test_a_slow_pipeline_stage_by_step_time_is_workload_imbalance_never_a_drain():
    d = waiting()
    step_times(d, {2: 0.08, 3: 0.08})
    found = StragglerDetector().detect(window(d))
    assert {f.kind for f in found} == {"workload_imbalance"}
    assert all(f.action == "notify" for f in found)


def test_sm_activity_finds_the_rank_that_keeps_computing_while_its_peers_wait():
    d = waiting(seed=3)
    rng = np.random.default_rng(4)
    act = 0.70 + rng.normal(0, 0.004, (41, 8, G))
    act[:, 6, :] += 0.03  # computes 3 % longer per step; the others sit in the collective
    d["metrics"][c.GPU_SM_ACTIVE.name] = act
    found = StragglerDetector().detect(window(d))
    assert (
        keys(found) == {("node-06", "node", "straggler")} and "by SM activity" in found[0].summary
    )
    del d["metrics"][c.GPU_SM_ACTIVE.name]  # without it (and with equal clocks) nothing tells
    assert StragglerDetector().detect(window(d)) == []


def test_a_signal_only_a_few_ranks_publish_is_not_used():
    d = waiting()
    step_times(d, {1: 0.2})
    d["metrics"][c.JOB_STEP_SECONDS.name][:, 2:, :] = np.nan  # only nodes 0 and 1 publish
    assert StragglerDetector().detect(window(d)) == []


def test_activity_that_reads_zero_on_busy_gpus_is_no_signal_and_utilisation_decides():
    d = healthy()
    d["metrics"][c.GPU_UTILIZATION.name][:, 4, :] += 0.1
    d["metrics"][c.GPU_SM_ACTIVE.name] = np.zeros((41, 8, G))  # profiling not sampled
    found = StragglerDetector().detect(window(d))
    assert (
        keys(found) == {("node-04", "node", "straggler")} and "by utilisation" in found[0].summary
    )
