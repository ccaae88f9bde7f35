"""The simulated RoCE fleet: what its frames say is what the exporter's own collectors read from
its node view, faults move the counters they should, truth hides what has not begun."""

from __future__ import annotations

import numpy as np
import pytest

from exporter import catalog as c
from exporter.collectors.infiniband import InfinibandCollector
from exporter.collectors.roce_pfc import RocePfcCollector
from exporter.sources.ethtool import FakeEthtool
from exporter.sources.sysfs import DictSysfs
from simulator.roce import PAUSE, RoceFleet


def _run(fleet: RoceFleet, until: float) -> None:
    while fleet.t < until:
        fleet.step_frame()


def test_the_exporters_collectors_read_from_a_node_what_its_frame_says() -> None:
    fleet = RoceFleet(16, seed=3)
    fleet.inject("pfc_storm", 30.0, 600.0, node=5, port=2)
    _run(fleet, 300.0)
    frame = fleet.step_frame()
    files, stats = fleet.node_view(5)
    sysfs = DictSysfs(files)
    ib = {(s.metric, s.label_values[1:]): s.value
          for s in InfinibandCollector(sysfs, "n").collect()}  # fmt: skip
    assert ib[(c.IB_HW_COUNTER, ("mlx5_2", "1", "np_cnp_sent"))] == int(
        frame.ib_counters["np_cnp_sent"][5, 2]
    )
    assert ib[(c.IB_PORT_INFO, ("mlx5_2", "1", "Ethernet"))] == 1
    pfc = {(s.metric, s.label_values[1:]): s.value
           for s in RocePfcCollector(sysfs, FakeEthtool(stats), "n").collect()}  # fmt: skip
    got = pfc[(c.ROCE_PFC_PAUSE_SECONDS, ("mlx5_2", "1", "ens2f0np0", "tx", "3"))]
    assert got == pytest.approx(frame.ib_counters[PAUSE[0]][5, 2], abs=1e-6)
    assert pfc[(c.ROCE_PFC_STORM_EVENTS, ("mlx5_2", "1", "ens2f0np0", "error"))] >= 1


def test_a_pfc_storm_pauses_its_port_almost_all_the_time_and_no_other() -> None:
    fleet = RoceFleet(16, seed=1)
    fleet.inject("pfc_storm", 0.0, 600.0, node=7, port=4)
    _run(fleet, 300.0)
    share = fleet.counters[PAUSE[0]] / fleet.t
    assert share[7, 4] > 0.85
    share[7, 4] = 0
    assert share.max() < 0.1


def test_a_bad_cable_raises_loss_on_its_port_only_and_a_leaf_fault_on_its_leaf_only() -> None:
    fleet = RoceFleet(16, seed=2)
    fleet.inject("bad_cable", 0.0, 600.0, node=3, port=1)
    fleet.inject("leaf_congestion", 0.0, 600.0, unit=1, port=6)
    _run(fleet, 600.0)
    oos = fleet.counters["out_of_sequence"] / fleet.t
    assert oos[3, 1] > 20 and np.median(oos) < 0.5
    ecn = fleet.counters["np_ecn_marked_roce_packets"]
    on_leaf = ecn[8:16, 6]
    assert on_leaf.min() > 5 * np.median(np.delete(ecn, 6, axis=1))


def test_truth_hides_faults_not_yet_begun_and_names_where_a_finding_should_point() -> None:
    fleet = RoceFleet(16)
    fleet.inject("bad_cable", 60.0, 600.0, node=3, port=1)
    fleet.inject("leaf_congestion", 900.0, 600.0, unit=1, port=6)
    _run(fleet, 120.0)
    [t] = fleet.truth()
    assert (t["kind"], t["node"], t["subject"], t["finding"]) == (
        "bad_cable",
        "roce-node-003",
        "port=mlx5_1/1",
        "roce_retransmits",
    )
    _run(fleet, 960.0)
    leaf = fleet.truth()[1]
    assert leaf["subject"] == "switch=su1-rail6" and len(leaf["nodes"]) == 8


def test_an_unknown_fault_or_a_partial_unit_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown RoCE fault kind"):
        RoceFleet(16).inject("cosmic_ray", 0.0, 1.0)
    with pytest.raises(ValueError, match="multiple of su_size"):
        RoceFleet(12)
