"""Each GPU fault shows up in every signal it touches on real hardware."""

from __future__ import annotations

import numpy as np

from exporter import catalog as c
from simulator.fleet import Fleet
from simulator.frame import Frame
from tests.simulator.helpers import (
    ECC,
    IB_TX,
    POWER,
    SM,
    TEMP,
    UP,
    UTIL,
    at,
    busy_fleet,
    peers,
    run,
    xids,
)

NODE, N = "gpu-node-003", 2
ONSET = 600.0


def inject(
    kind: str, target: str = "gpu2", until: float = 1200, **params: object
) -> tuple[Fleet, list[Frame]]:
    fleet = busy_fleet()
    fleet.inject(kind, NODE, target, params, onset=ONSET)
    return fleet, run(fleet, until)


def test_xid_79_logs_the_xid_loses_the_gpu_and_keeps_its_series_with_up_zero() -> None:
    fleet, frames = inject("xid", xid=79)
    before, after = at(frames, ONSET - 15), at(frames, ONSET)
    assert xids(frames) == [(N, 2, 79)]
    assert before[UP][N, 2] == 1 and after[UP][N, 2] == 0
    assert np.isnan(after[TEMP][N, 2]) and np.isnan(after[c.NVLINK_UP.name][N, 2]).all()
    assert np.all(after[UP][N, [0, 1, 3, 4, 5, 6, 7]] == 1)
    assert np.all(frames[-1][UTIL][N, [0, 1, 3]] == 0)  # the job on the node died
    assert fleet.jobs.job_of[N] == -1
    assert frames[-1][UP][N, 2] == 0  # stays lost


def test_xid_48_counts_an_uncorrected_error_and_leaves_a_remap_pending() -> None:
    _, frames = inject("xid", xid=48)
    last = frames[-1]
    assert xids(frames) == [(N, 2, 48), (N, 2, 63)]
    assert last[ECC][N, 2, 1, 0] == 1 and last[ECC][N, 2, 1, 1] == 1
    assert last[c.GPU_ROW_REMAP_PENDING.name][N, 2] == 1
    assert last[c.GPU_REMAPPED_ROWS.name][N, 2, 1] == 1
    assert last[c.GPU_RECOVERY_ACTION.name][N, 2] == 1
    assert last[UP][N, 2] == 1


def test_xid_64_marks_the_row_remap_failed() -> None:
    _, frames = inject("xid", xid=64)
    assert xids(frames) == [(N, 2, 64)]
    assert frames[-1][c.GPU_ROW_REMAP_FAILED.name][N, 2] == 1
    assert frames[-1][c.GPU_RECOVERY_ACTION.name][N, 2] == 4


def test_xid_95_counts_an_uncontained_error_and_asks_for_a_reset() -> None:
    _, frames = inject("xid", xid=95)
    assert xids(frames) == [(N, 2, 95)]
    assert frames[-1][ECC][N, 2, 1, 0] == 1
    assert frames[-1][c.GPU_RECOVERY_ACTION.name][N, 2] == 1


def test_xid_119_hangs_the_gpu_and_asks_for_a_reboot() -> None:
    _, frames = inject("xid", xid=119)
    last = frames[-1]
    assert xids(frames) == [(N, 2, 119)]
    assert last[UP][N, 2] == 1 and last[UTIL][N, 2] == 0
    assert last[c.GPU_RECOVERY_ACTION.name][N, 2] == 2


def test_application_xid_pauses_the_job_but_leaves_no_hardware_mark() -> None:
    fleet, frames = inject("app_xid", xid=13, restart_s=120)
    assert xids(frames) == [(N, 2, 13)]
    job = np.append(peers(fleet, N), N)
    assert np.all(at(frames, ONSET + 15)[UTIL][job] == 0)  # the whole job restarts ...
    assert np.all(frames[-1][UTIL][job] > 0.3)  # ... and runs again
    assert np.all(frames[-1][UP] == 1) and np.all(frames[-1][c.GPU_RECOVERY_ACTION.name] == 0)
    (truth,) = fleet.truth()
    assert truth["negative_control"] and not truth["hardware"]


def test_gpu_fallen_off_the_bus_logs_only_the_bus_message_and_reports_up_zero() -> None:
    _, frames = inject("gpu_fallen_off_bus")
    assert [e.text for f in frames for e in f.events] == ["fallen_off_bus"]
    assert frames[-1][UP][N, 2] == 0


def test_gpu_fallen_off_the_bus_silently_leaves_no_log_at_all() -> None:
    _, frames = inject("gpu_fallen_off_bus", message=False)
    assert xids(frames) == [] and frames[-1][UP][N, 2] == 0


def test_sbe_storm_counts_many_corrected_errors_then_escalates_to_a_double_bit_error() -> None:
    _, frames = inject("ecc_sbe_storm", until=3000, rate=1.0, escalate_after_s=1800)
    before, last = at(frames, ONSET), frames[-1]
    corrected = last[ECC][N, :, 0, 0] - before[ECC][N, :, 0, 0]
    assert corrected[2] > 1000 and np.delete(corrected, 2).max() <= 2
    assert at(frames, ONSET + 1785)[ECC][N, 2, 1, 0] == 0
    assert last[ECC][N, 2, 1, 0] == 1 and (N, 2, 48) in xids(frames)
    assert last[c.GPU_ROW_REMAP_PENDING.name][N, 2] == 1


def test_row_remap_pending_sets_pending_and_logs_xid_63() -> None:
    _, frames = inject("row_remap_pending")
    assert xids(frames) == [(N, 2, 63)]
    assert frames[-1][c.GPU_ROW_REMAP_PENDING.name][N, 2] == 1
    assert at(frames, ONSET - 15)[c.GPU_ROW_REMAP_PENDING.name][N, 2] == 0


def test_row_remap_failure_sets_failed() -> None:
    _, frames = inject("row_remap_failure")
    assert frames[-1][c.GPU_ROW_REMAP_FAILED.name][N, 2] == 1 and xids(frames) == [(N, 2, 64)]


def test_pcie_downgrade_lowers_generation_and_width_below_their_maximum() -> None:
    _, frames = inject("pcie_downgrade", generation=3, width=8)
    last = frames[-1]
    assert last[c.GPU_PCIE_GENERATION.name][N, 2] == 3
    assert last[c.GPU_PCIE_WIDTH.name][N, 2] == 8
    assert last[c.GPU_PCIE_GENERATION_MAX.name][N, 2] == 5
    assert last[c.GPU_PCIE_WIDTH_MAX.name][N, 2] == 16
    assert last[c.GPU_PCIE_GENERATION.name][N, 3] == 5


def _reason(frame: Frame, name: str) -> np.ndarray:
    return frame[c.GPU_THROTTLE.name][..., list(c.THROTTLE_REASONS).index(name)]


def test_thermal_throttling_heats_the_gpu_lowers_clocks_and_sets_thermal_reasons() -> None:
    _, frames = inject("thermal_throttle", until=1500, temp_add=25, clock_factor=0.75)
    last = frames[-1]
    assert last[TEMP][N, 2] > last[TEMP][N, 3] + 15
    assert last[SM][N, 2] == round(1980 * 0.75) * 1e6
    assert _reason(last, "hw_thermal_slowdown")[N, 2] == 1
    assert _reason(last, "hw_thermal_slowdown")[N, 3] == 0


def test_power_throttling_caps_power_and_sets_the_power_reason() -> None:
    _, frames = inject("power_throttle", cap_w=350.0, clock_factor=0.8)
    last = frames[-1]
    assert last[POWER][N, 2] <= 350 and last[c.GPU_POWER_LIMIT.name][N, 2] == 350
    assert _reason(last, "sw_power_cap")[N, 2] == 1 and last[SM][N, 2] < 1980e6


def test_straggler_gpu_runs_slower_and_cooler_while_its_peers_idle_more() -> None:
    fleet, frames = inject("straggler", slowdown=0.2)
    before, after = at(frames, ONSET - 15), frames[-1]
    others = peers(fleet, N)
    assert after[SM][N, 2] == round(1980 * 0.8) * 1e6
    assert after[POWER][N, 2] < np.median(after[POWER][others]) - 20
    assert after[UTIL][N, 2] > np.max(after[UTIL][others]) + 0.05  # it works while they wait
    assert np.mean(after[UTIL][others]) < np.mean(before[UTIL][others]) - 0.05


def test_straggler_node_slows_every_gpu_of_the_node() -> None:
    _, frames = inject("straggler", target="node", slowdown=0.1)
    assert np.all(frames[-1][SM][N] == round(1980 * 0.9) * 1e6)


def test_straggler_lowers_the_network_throughput_of_its_whole_job() -> None:
    fleet, frames = inject("straggler", until=1800, slowdown=0.25)
    job = np.append(peers(fleet, N), N)
    before = at(frames, ONSET - 15)[IB_TX][job] - at(frames, ONSET - 300)[IB_TX][job]
    after = frames[-1][IB_TX][job] - at(frames, 1800 - 285)[IB_TX][job]
    assert after.sum() < 0.85 * before.sum()
