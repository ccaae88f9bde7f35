"""A healthy fleet looks like a training cluster: rhythm, proportional traffic, rare errors."""

from __future__ import annotations

import numpy as np
import pytest

from exporter import catalog as c
from simulator.fleet import Fleet
from tests.simulator.helpers import (
    ECC,
    IB_STATE,
    IB_TX,
    NVL_ERR,
    NVL_TX,
    POWER,
    SM,
    TEMP,
    UP,
    UTIL,
    busy_fleet,
    run,
)


def test_training_gpus_are_busy_and_idle_nodes_are_idle() -> None:
    fleet = Fleet(32, seed=5, idle_fraction=0.25, mean_job_s=1e12)
    frame = run(fleet, 600)[-1]
    busy = fleet.jobs.job_of >= 0
    assert (~busy).sum() >= 4
    assert np.nanmean(frame[UTIL][busy & fleet.jobs_multi()]) > 0.5
    assert np.nanmax(frame[UTIL][~busy]) == 0.0
    assert np.nanmean(frame[POWER][~busy]) < 100 < np.nanmean(frame[POWER][busy])
    assert np.all(frame[UP] == 1.0)


def test_power_and_temperature_follow_utilisation() -> None:
    frame = run(Fleet(32, seed=2, idle_fraction=0.2), 1800)[-1]
    util, power, temp = (frame[m].ravel() for m in (UTIL, POWER, TEMP))
    assert np.corrcoef(util, power)[0, 1] > 0.9
    assert np.corrcoef(power, temp)[0, 1] > 0.9


def test_peers_of_one_job_share_the_step_rhythm() -> None:
    fleet = busy_fleet(8, seed=4)
    frames = run(fleet, 3600, every=5)
    job_nodes = np.flatnonzero(fleet.jobs.job_of == fleet.jobs.job_of[0])
    series = np.array([f[UTIL][job_nodes, 0] for f in frames])  # (time, nodes)
    assert series.std(axis=0).min() > 0.02  # it moves ...
    corr = np.corrcoef(series.T)
    assert corr[np.triu_indices(job_nodes.size, 1)].min() > 0.5  # ... together


def test_traffic_grows_with_communication_and_not_on_idle_nodes() -> None:
    fleet = Fleet(16, seed=7, idle_fraction=0.25, small_job_share=0.0, mean_job_s=1e12)
    a, b = run(fleet, 600)[-2:]
    nvl = (b[NVL_TX] - a[NVL_TX]).sum(axis=(1, 2))
    ib = (b[IB_TX] - a[IB_TX]).sum(axis=1)
    idle = fleet.jobs.job_of < 0
    assert np.all(nvl[idle] == 0) and np.all(ib[idle] == 0)
    assert np.all(nvl[~idle] > 1e9) and np.all(ib[~idle] > 1e9)
    assert np.all(b[IB_STATE] == 4)


def test_healthy_hardware_still_counts_a_few_errors() -> None:
    frames = run(Fleet(64, seed=1), 6 * 3600, every=60)
    first, last = frames[0], frames[-1]
    corrected = last[ECC][..., 0, 0] - first[ECC][..., 0, 0]
    symbols = last.ib_counters["symbol_error"] - first.ib_counters["symbol_error"]
    crc = last[NVL_ERR][..., 0] - first[NVL_ERR][..., 0]
    assert 0 < corrected.sum() < 0.2 * corrected.size  # rare, but not zero
    assert symbols.sum() > 0 and np.median(symbols) < 60  # a few an hour, far below 10/s
    assert 0 < crc.sum() < 0.2 * crc.size  # about one per link every three days
    assert np.all(last[ECC][..., 1, :] == 0)  # no uncorrected errors on healthy GPUs


def test_jobs_churn_over_a_day() -> None:
    fleet = Fleet(32, seed=9, mean_job_s=3 * 3600)
    run(fleet, 86400, every=300)
    assert len(fleet.jobs.history) > 10
    started = {jid for jid, *_ in fleet.jobs.history} | set(fleet.jobs.running)
    assert len(started) > 20
    assert fleet.jobs_at(43200)  # a day later the fleet still works


def test_sm_clock_is_at_maximum_while_training() -> None:
    fleet = busy_fleet()
    frame = run(fleet, 300)[-1]
    assert np.all(frame[SM] == 1980e6)
    assert np.all(frame[c.GPU_SM_CLOCK_MAX.name] == 1980e6)


def test_time_only_moves_forward() -> None:
    fleet = busy_fleet()
    fleet.step(60)
    with pytest.raises(ValueError, match="forward"):
        fleet.step(30)
