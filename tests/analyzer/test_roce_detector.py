"""The RoCE detector on hand-made windows: a PFC storm, a bad cable, a hot spot, a congested
leaf told apart from one bad port, and a fabric congested all at once left alone."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detectors import default_detectors
from analyzer.detectors.roce import CONGESTION_FLOORS, RETRANSMIT_FLOORS, RoceDetector
from analyzer.window import Window
from exporter import catalog

T, STEP = 41, 15.0
NODES = tuple(f"n{i:02d}" for i in range(12))
PORTS = tuple(f"mlx5_{p}/1" for p in range(4))
N, P = len(NODES), len(PORTS)


def _leaf(n: int, p: int) -> str:
    return f"su{n // 4}-rail{p}"  # rail-optimized: port p of the 4 nodes of a unit on one leaf


def _window(rates: dict[str, np.ndarray], *, leaves: bool = True) -> Window:
    """Counters growing at ``rates`` (per (node, port), per second) over 10 minutes."""
    t = np.arange(T) * STEP
    counters = {
        k: np.cumsum(np.broadcast_to(r * STEP, (T, N, P)), axis=0) for k, r in rates.items()
    }
    state = np.full((T, N, P), 4.0)
    return Window(
        t=t, nodes=NODES, metrics={catalog.IB_PORT_STATE.name: state}, ib_counters=counters,
        ports=PORTS, step=STEP,
        port_leaf={(n, p): _leaf(n, p) for n in range(N) for p in range(P)} if leaves else {},
    )  # fmt: skip


def _base(busy: float = 1.0) -> dict[str, np.ndarray]:
    """A healthy fabric in a collective: some ECN marking, CNPs, a little PFC, no loss."""
    rng = np.random.default_rng(7)
    jitter = rng.uniform(0.8, 1.2, (N, P))
    return {
        "np_ecn_marked_roce_packets": 800.0 * busy * jitter,
        "np_cnp_sent": 400.0 * busy * jitter,
        "rp_cnp_handled": 400.0 * busy * jitter[::-1],
        "out_of_sequence": np.zeros((N, P)),
        "tx_prio3_pause_seconds": 0.02 * busy * jitter,
    }


def _kinds(found: list) -> list[tuple[str, str, str]]:
    return sorted((f.kind, f.node, f.subject) for f in found)


def test_a_healthy_busy_fabric_has_no_findings() -> None:
    assert RoceDetector().detect(_window(_base())) == []


def test_a_fabric_congested_all_at_once_is_left_alone() -> None:
    """The all-to-all phase: every port 10x busier (and paused 20% of the time) together."""
    assert RoceDetector().detect(_window(_base(busy=10.0))) == []


def test_a_port_holding_its_peer_paused_most_of_the_time_is_a_pfc_storm_to_drain() -> None:
    rates = _base()
    rates["tx_prio3_pause_seconds"][5, 2] = 0.93
    [f] = RoceDetector().detect(_window(rates))
    assert (f.kind, f.node, f.subject, f.action) == ("roce_pfc_storm", "n05", "port=mlx5_2/1",
                                                    "drain")  # fmt: skip
    assert f.evidence["pause_share"] == pytest.approx(0.93)
    assert f.evidence["priority"] == 3


def test_a_storm_prevention_error_from_the_nic_is_a_storm_whatever_the_share() -> None:
    rates = _base()
    rates["tx_pause_storm_error_events"] = np.zeros((N, P))
    rates["tx_pause_storm_error_events"][1, 0] = 0.01
    [f] = RoceDetector().detect(_window(rates))
    assert f.kind == "roce_pfc_storm" and f.node == "n01"


def test_one_port_losing_packets_is_a_bad_cable_not_a_leaf() -> None:
    rates = _base()
    rates["out_of_sequence"][6, 1] = 40.0
    rates["np_ecn_marked_roce_packets"][6, 1] *= 1.5  # loss brings retransmits, a little ECN
    [f] = RoceDetector().detect(_window(rates))
    assert (f.kind, f.node, f.subject, f.action) == ("roce_retransmits", "n06", "port=mlx5_1/1",
                                                    "cordon")  # fmt: skip
    assert f.evidence["out_of_sequence_per_s"] == pytest.approx(40.0)


def test_one_port_congested_far_above_its_leaf_is_a_hot_spot_to_look_at() -> None:
    rates = _base()
    rates["np_ecn_marked_roce_packets"][9, 3] *= 12
    rates["np_cnp_sent"][9, 3] *= 12
    [f] = RoceDetector().detect(_window(rates))
    assert (f.kind, f.node, f.action) == ("roce_congestion", "n09", "notify")


def test_most_ports_of_one_leaf_congested_is_one_switch_finding_not_port_findings() -> None:
    rates = _base()
    for n in range(4, 8):  # leaf su1-rail2: its uplinks oversubscribed
        rates["np_ecn_marked_roce_packets"][n, 2] *= 15
        rates["np_cnp_sent"][n, 2] *= 15
        rates["out_of_sequence"][n, 2] = 3.0
    found = RoceDetector().detect(_window(rates))
    assert _kinds(found) == [("roce_fabric_congestion", "su1-rail2", "switch=su1-rail2")]
    assert found[0].action == "notify" and found[0].evidence["nodes"] == 4


def test_a_bad_cable_on_a_congested_leaf_elsewhere_is_still_told_apart() -> None:
    rates = _base()
    for n in range(4, 8):
        rates["np_ecn_marked_roce_packets"][n, 2] *= 15
    rates["out_of_sequence"][0, 0] = 25.0
    got = _kinds(RoceDetector().detect(_window(rates)))
    assert got == [("roce_fabric_congestion", "su1-rail2", "switch=su1-rail2"),
                   ("roce_retransmits", "n00", "port=mlx5_0/1")]  # fmt: skip


def test_without_topology_ports_are_judged_against_their_rail() -> None:
    rates = _base()
    rates["out_of_sequence"][3, 3] = 10.0
    [f] = RoceDetector().detect(_window(rates, leaves=False))
    assert (f.kind, f.node, f.subject) == ("roce_retransmits", "n03", "port=mlx5_3/1")


def test_rates_below_the_floors_are_never_judged_whatever_the_ratio() -> None:
    rates = {k: np.zeros((N, P)) for k in (*CONGESTION_FLOORS, *RETRANSMIT_FLOORS)}
    rates["out_of_sequence"][2, 2] = RETRANSMIT_FLOORS["out_of_sequence"] / 2
    rates["np_cnp_sent"][2, 1] = CONGESTION_FLOORS["np_cnp_sent"] / 2
    assert RoceDetector().detect(_window(rates)) == []


def test_the_detector_reads_the_catalogues_roce_counters() -> None:
    assert set(CONGESTION_FLOORS) == set(catalog.ROCE_CONGESTION_COUNTERS)
    assert set(RETRANSMIT_FLOORS) == set(catalog.ROCE_RETRANSMIT_COUNTERS)
    assert "local_ack_timeout_err" in catalog.IB_ERROR_COUNTERS  # judged by the IB detector


def test_the_default_detector_set_includes_roce_and_takes_its_settings() -> None:
    [roce] = [d for d in default_detectors({"roce": {"storm_share": 0.3}}) if d.name == "roce"]
    assert isinstance(roce, RoceDetector) and roce.storm_share == 0.3
    with pytest.raises(TypeError):
        default_detectors({"roce": {"no_such_setting": 1}})


def test_a_units_all_to_all_lighting_every_rail_of_that_unit_is_its_traffic_not_a_switch() -> None:
    rates = _base()
    for n in range(8, 12):  # unit su2: every rail's leaf busy at once, over the same nodes
        for k in ("np_ecn_marked_roce_packets", "np_cnp_sent", "rp_cnp_handled"):
            rates[k][n, :] *= 10
    assert RoceDetector().detect(_window(rates)) == []
