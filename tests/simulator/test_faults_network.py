"""NVLink and InfiniBand faults show up in link state, error counters and traffic."""

from __future__ import annotations

import numpy as np

from simulator.fleet import Fleet
from simulator.frame import Frame
from tests.simulator.helpers import (
    IB_PHYS,
    IB_RATE,
    IB_RX,
    IB_STATE,
    IB_TX,
    NVL_ERR,
    NVL_TX,
    NVL_UP,
    at,
    busy_fleet,
    run,
    xids,
)

NODE, N, ONSET = "gpu-node-003", 2, 600.0


def inject(
    kind: str, target: str, until: float = 1200, nodes: int = 8, **params: object
) -> tuple[Fleet, list[Frame]]:
    fleet = busy_fleet(nodes)
    fleet.inject(kind, NODE, target, params, onset=ONSET)
    return fleet, run(fleet, until)


def _grown(frames: list[Frame], name: str, t0: float, t1: float) -> np.ndarray:
    return at(frames, t1)[name] - at(frames, t0)[name]


def test_nvlink_error_ramp_grows_on_one_link_only_and_faster_over_time() -> None:
    _, frames = inject("nvlink_errors", "gpu3/7", until=4200, initial_rate=0.1, doubling_s=900)
    early = _grown(frames, NVL_ERR, ONSET, ONSET + 900)[N, 3, 7, 0]
    late = _grown(frames, NVL_ERR, 3300, 4200)[N, 3, 7, 0]
    assert late > 4 * early > 0
    others = _grown(frames, NVL_ERR, ONSET, 4200)[N].copy()
    others[3, 7] = 0
    assert others.sum() <= 2
    assert frames[-1][NVL_ERR][N, 3, 7, 2] > 0  # replays alongside
    assert frames[-1][NVL_UP][N, 3, 7] == 1


def test_nvlink_error_ramp_can_end_in_the_link_going_down_with_xid_74() -> None:
    _, frames = inject("nvlink_errors", "gpu3/7", until=2400, down_after_s=1200)
    assert xids(frames) == [(N, 3, 74)]
    assert at(frames, 1785)[NVL_UP][N, 3, 7] == 1 and frames[-1][NVL_UP][N, 3, 7] == 0


def test_nvlink_down_logs_xid_74_naming_the_link_and_stops_its_traffic() -> None:
    fleet = busy_fleet()
    fleet.inject("nvlink_down", NODE, "gpu3/7", onset=ONSET)
    fleet.inject("job_stop", "gpu-node-001", "", onset=900)  # unrelated, keeps the job alone
    frames = run(fleet, 900)
    assert xids(frames) == [(N, 3, 74)]
    assert [e.text for f in frames for e in f.events] == ["nvlink:7"]
    assert frames[-1][NVL_UP][N, 3, 7] == 0
    assert _grown(frames, NVL_TX, ONSET + 15, 900)[N, 3, 7] == 0


def test_ib_symbol_error_ramp_far_exceeds_healthy_ports_and_can_fail_the_port() -> None:
    _, frames = inject(
        "ib_symbol_errors", "mlx5_2/1", until=4200, peak_rate=50.0, ramp_s=1800, fail_after_s=3000
    )
    a, b = at(frames, 2400).ib_counters, at(frames, 3585).ib_counters
    grown = b["symbol_error"][N] - a["symbol_error"][N]
    assert grown[2] / 1185 > 30 and np.delete(grown, 2).max() < 50
    assert at(frames, 3585)[IB_STATE][N, 2] == 4 and frames[-1][IB_STATE][N, 2] == 1
    assert frames[-1].ib_counters["link_downed"][N, 2] == 1


def test_ib_link_flap_counts_one_link_down_per_cycle_and_alternates_state() -> None:
    _, frames = inject("ib_flap", "mlx5_5/1", until=2400, period_s=300, down_s=30)
    downed = frames[-1].ib_counters["link_downed"][N, 5]
    assert downed == 7  # 600, 900, ..., 2400
    states = [f[IB_STATE][N, 5] for f in frames if f.t >= ONSET]
    assert 1 in states and 4 in states
    assert at(frames, ONSET + 15)[IB_STATE][N, 5] == 1
    assert at(frames, ONSET + 60)[IB_STATE][N, 5] == 4


def test_ib_port_down_stops_its_data_counters_and_reports_state_down() -> None:
    _, frames = inject("ib_port_down", "mlx5_2/1", nodes=16)
    last = frames[-1]
    assert last[IB_STATE][N, 2] == 1 and last[IB_PHYS][N, 2] == 2
    assert last.ib_counters["link_downed"][N, 2] == 1
    for name in (IB_TX, IB_RX):
        assert _grown(frames, name, ONSET, 1200)[N, 2] == 0
    assert np.all(np.delete(last[IB_STATE][N], 2) == 4)


def test_ib_rate_downgrade_halves_the_rate_and_the_traffic() -> None:
    _, frames = inject("ib_rate_downgrade", "mlx5_4/1", rate_gbps=200)
    last = frames[-1]
    assert last[IB_RATE][N, 4] == 25e9 and last[IB_RATE][N, 3] == 50e9
    grown = _grown(frames, IB_TX, 900, 1200)[N]
    assert 0.4 < grown[4] / grown[3] < 0.6


def test_leaf_outage_downs_every_port_of_every_node_under_the_leaf_at_once() -> None:
    fleet = busy_fleet(16, nodes_per_leaf=8)
    fleet.inject("leaf_outage", "", "leaf-02", onset=ONSET, duration=300)
    frames = run(fleet, 1200)
    during = at(frames, ONSET + 15)
    assert np.all(during[IB_STATE][8:] == 1) and np.all(during[IB_STATE][:8] == 4)
    assert np.all(frames[-1].ib_counters["link_downed"][8:] == 1)
    assert np.all(frames[-1][IB_STATE] == 4)  # back after 5 minutes
    (truth,) = fleet.truth()
    assert truth["node"] == "leaf-02" and len(truth["nodes"]) == 8
