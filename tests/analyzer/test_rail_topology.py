"""Rail-optimized fabrics (port i of every node of a scalable unit on leaf i, the DGX
SuperPOD design): the inventory names a leaf per port, and switch correlation is per port."""

from __future__ import annotations

import pytest

from analyzer.detectors import default_detectors
from analyzer.detectors.infiniband import InfinibandDetector
from analyzer.engine import Engine
from analyzer.inventory import parse_inventory
from common.settings import SettingsError
from exporter import catalog as c

from .synth import PORTS, healthy, keys, window

RAILS = parse_inventory({"defaults": {"ports": {p: f"su1-rail{i}" for i, p in enumerate(PORTS)}}})


def test_a_rail_leaf_outage_is_one_incident_naming_the_leaf():
    d = healthy(nodes=8)
    d["metrics"][c.IB_PORT_STATE.name][-2:, :, 3] = 1  # port 3 of every node: rail 3's leaf
    per_node = window(d, leaf_of=dict.fromkeys(range(8), "leaf-01"))
    assert ("leaf-01", "switch=leaf-01", "switch_degraded") in keys(
        InfinibandDetector().detect(per_node)
    ), "cause: one leaf per node blames the wrong switch"
    w = RAILS.apply(window(d))
    assert keys(Engine(default_detectors()).cycle(w)) == {
        ("su1-rail3", "switch=su1-rail3", "switch_degraded")
    }


def test_a_single_port_fault_on_a_rail_fabric_is_not_folded_into_a_switch_incident():
    d = healthy(nodes=8)
    d["metrics"][c.IB_PORT_STATE.name][-2:, :, 3] = 1  # rail 3's leaf is down ...
    d["metrics"][c.IB_PORT_STATE.name][-2:, 2, 5] = 1  # ... and node-02's port 5 is broken
    found = Engine(default_detectors()).cycle(RAILS.apply(window(d)))
    assert keys(found) == {
        ("su1-rail3", "switch=su1-rail3", "switch_degraded"),
        ("node-02", "port=mlx5_5/1", "ib_port_down"),
    }


def test_the_inventory_maps_ports_to_leaves_and_rejects_a_bad_map():
    w = RAILS.apply(window(healthy(nodes=2)))
    assert w.port_leaf[(1, 7)] == "su1-rail7" and len(w.port_leaf) == 16
    with pytest.raises(SettingsError, match="ports must map"):
        parse_inventory({"nodes": {"n1": {"ports": ["mlx5_0/1"]}}})


def test_ports_cabled_as_ibnetdiscover_reports_make_a_leaf_outage_one_incident(tmp_path):
    from pathlib import Path

    from analyzer.inventory import load_inventory

    fixture = Path(__file__).parents[2] / "fixtures" / "fabric" / "ibnetdiscover-rail-su.txt"
    (tmp_path / "fabric.txt").write_text(fixture.read_text())
    (tmp_path / "inv.yaml").write_text(
        "ibnetdiscover: fabric.txt\nnodes: {gpu-node-004: {ports: {mlx5_0/1: spare-leaf}}}\n"
    )
    inv = load_inventory(tmp_path / "inv.yaml")
    assert inv.of("gpu-node-004").ports["mlx5_0/1"] == "spare-leaf"  # the file's word wins
    assert inv.of("gpu-node-004").ports["mlx5_1/1"] == "su1-leaf-rail1"
    d = healthy(nodes=4)
    d["nodes"] = tuple(f"gpu-node-{i:03d}" for i in range(1, 5))
    d["metrics"][c.IB_PORT_STATE.name][-2:, :, 2] = 1  # HCA 2 of every node: rail 2's leaf
    d["metrics"][c.IB_PORT_STATE.name][-2:, 1, 0] = 1  # and gpu-node-002's own mlx5_0
    found = Engine(default_detectors()).cycle(inv.apply(window(d)))
    assert keys(found) == {
        ("su1-leaf-rail2", "switch=su1-leaf-rail2", "switch_degraded"),
        ("gpu-node-002", "port=mlx5_0/1", "ib_port_down"),
    }


NVL72 = parse_inventory({"defaults": {"nvlink_domain": "nvl72-01"}})


def test_a_failed_nvlink_switch_tray_is_one_incident_naming_the_nvlink_domain():
    d = healthy(nodes=6)
    d["metrics"][c.NVLINK_UP.name][-2:, :, :, 4:6] = 0  # the tray behind links 4-5 of every GPU
    per_link = Engine(default_detectors()).cycle(window(d))
    assert len([f for f in per_link if f.kind == "nvlink_down"]) == 6 * 8 * 2, "cause"
    found = Engine(default_detectors()).cycle(NVL72.apply(window(d)))
    assert keys(found) == {("nvl72-01", "nvlink_domain=nvl72-01", "switch_degraded")}
    assert found[0].action == "notify"


def test_a_link_down_on_one_node_of_a_healthy_nvlink_domain_stays_that_nodes_finding():
    d = healthy(nodes=6)
    d["metrics"][c.NVLINK_UP.name][-2:, 2, 3, 7] = 0
    found = Engine(default_detectors()).cycle(NVL72.apply(window(d)))
    assert keys(found) == {("node-02", "link=gpu3/7", "nvlink_down")}
    assert found[0].action == "drain"


def test_a_simulated_rail_fleet_reports_a_rail_leaf_outage_once_and_a_port_fault_beside_it():
    from dataclasses import replace

    from analyzer.sources.frames import FrameBuffer
    from simulator import Fleet
    from simulator.topology import port_name

    fleet = Fleet(16, seed=3, nodes_per_leaf=8, rails=True)
    fleet.inject("leaf_outage", "su01-rail3", "su01-rail3", onset=600.0, duration=600.0)
    fleet.inject("ib_port_down", "gpu-node-003", "mlx5_5/1", onset=600.0, duration=600.0)
    buf = FrameBuffer(fleet.nodes, ports=[port_name(p) for p in range(8)], sku=fleet.models)
    engine, found = Engine(default_detectors()), []
    for frame in fleet.run(900, 15.0):
        buf.push(frame, fleet.jobs_at(frame.t))
        if frame.t >= 660 and frame.t % 60 == 0:
            found = engine.cycle(replace(buf.window(), port_leaf=fleet.port_leaf()))
    assert keys(found) == {
        ("su01-rail3", "switch=su01-rail3", "switch_degraded"),
        ("gpu-node-003", "port=mlx5_5/1", "ib_port_down"),
    }
    assert {t["node"] for t in fleet.truth()} == {"su01-rail3", "gpu-node-003"}
