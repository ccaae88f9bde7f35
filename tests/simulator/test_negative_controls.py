"""Negative controls move the signals without looking like one broken node."""

from __future__ import annotations

import numpy as np

from exporter import catalog as c
from tests.simulator.helpers import ECC, IB_TX, SM, UP, UTIL, at, busy_fleet, peers, run

ONSET = 600.0


def test_uneven_pipeline_stage_makes_a_whole_stage_busier_at_full_clocks() -> None:
    fleet = busy_fleet(16, seed=11)
    n = int(np.argmax(np.bincount(fleet.jobs.job_of[fleet.jobs.job_of >= 0])))  # largest job
    node = int(np.flatnonzero(fleet.jobs.job_of == n)[0])
    fleet.inject(
        "pipeline_imbalance", fleet.nodes[node], "", {"extra": 0.3, "stages": 2}, onset=ONSET
    )
    frame = run(fleet, 1200)[-1]
    job = np.sort(np.append(peers(fleet, node), node))
    stage, rest = np.array_split(job, 2)
    assert node in stage and stage.size >= 2
    assert frame[UTIL][stage].mean() > frame[UTIL][rest].mean() + 0.05
    assert np.all(frame[SM][job] == 1980e6)  # nobody's clocks are down
    assert np.ptp(frame[UTIL][stage].mean(axis=1)) < 0.05  # the stage moves as one


def test_checkpoint_pause_idles_the_whole_job_together_then_it_resumes() -> None:
    fleet = busy_fleet()
    fleet.inject("checkpoint_pause", "gpu-node-001", "", {"pause_s": 120}, onset=ONSET)
    frames = run(fleet, 1200)
    job = np.append(peers(fleet, 0), 0)
    assert np.all(at(frames, ONSET + 15)[UTIL][job] == 0)
    assert np.all(frames[-1][UTIL][job] > 0.3)
    assert np.all(frames[-1][UP] == 1)


def test_job_stop_leaves_the_nodes_idle_and_healthy() -> None:
    fleet = busy_fleet()
    fleet.inject("job_stop", "gpu-node-001", "", onset=ONSET)
    frames = run(fleet, 800)
    job = np.flatnonzero(at(frames, ONSET - 15)[UTIL].mean(axis=1) > 0)
    assert fleet.jobs.job_of[0] == -1
    assert np.all(frames[-1][UTIL][0] == 0) and np.all(frames[-1][UP] == 1)
    assert job.size == 8


def test_reboot_leaves_a_gap_then_counters_restart_from_zero() -> None:
    fleet = busy_fleet()
    fleet.inject("reboot", "gpu-node-002", "", {"down_s": 300}, onset=ONSET)
    frames = run(fleet, 1500)
    before, during, back = at(frames, ONSET - 15), at(frames, ONSET + 15), at(frames, ONSET + 300)
    assert np.all(np.isnan(during[UTIL][1])) and np.all(np.isnan(during[IB_TX][1]))
    assert not np.isnan(during[UTIL][0]).any()
    assert back.resets[1] and not back.resets[0] and sum(f.resets.sum() for f in frames) == 1
    assert np.all(back[IB_TX][1] < before[IB_TX][1])
    assert np.all(back[ECC][1, :, 0, 0] == 0)  # volatile restarts ...
    assert np.all(back[ECC][1, :, 0, 1] == before[ECC][1, :, 0, 1])  # ... lifetime stays
    assert np.all(back[UP][1] == 1)


def test_reboot_clears_a_lost_gpu_but_not_a_failed_row_remap() -> None:
    fleet = busy_fleet()
    fleet.inject("xid", "gpu-node-002", "gpu1", {"xid": 79}, onset=300)
    fleet.inject("row_remap_failure", "gpu-node-002", "gpu4", onset=300)
    fleet.inject("reboot", "gpu-node-002", "", {"down_s": 120}, onset=ONSET)
    last = run(fleet, 900)[-1]
    assert last[UP][1, 1] == 1
    assert last[c.GPU_ROW_REMAP_FAILED.name][1, 4] == 1
    truth = {t["kind"]: t for t in fleet.truth()}
    assert truth["xid"]["end"] == ONSET and truth["row_remap_failure"]["end"] is None


def test_a_driver_reload_zeroes_the_gpu_counters_without_a_gap_and_leaves_the_hcas() -> None:
    fleet = busy_fleet()
    fleet.inject("driver_reload", "gpu-node-002", "", onset=ONSET)
    frames = run(fleet, 900)
    before, after = at(frames, ONSET - 15), at(frames, ONSET + 15)
    assert not any(np.isnan(f[UTIL][1]).any() for f in frames)  # no gap: the node stays up
    assert np.all(after[ECC][1, :, 0, 0] == 0)  # volatile restarts ...
    assert np.all(after[ECC][1, :, 0, 1] == before[ECC][1, :, 0, 1])  # ... lifetime stays
    assert np.all(after[IB_TX][1] >= before[IB_TX][1])  # the HCAs did not reset
