"""The fabric as clusters are built (common.fabric): ibnetdiscover output, node labels and the
per-port leaf spelling that the analyzer and remediation share."""

from __future__ import annotations

from pathlib import Path

import pytest

from common import fabric
from common.settings import SettingsError

FIXTURE = Path(__file__).parent.parent / "fixtures" / "fabric" / "ibnetdiscover-rail-su.txt"


def test_ibnetdiscover_output_names_the_leaf_of_every_hca_port_of_a_rail_optimized_unit():
    d = fabric.load_ibnetdiscover(FIXTURE)
    assert len(d.port_leaf) == 16  # 4 nodes x 4 compute HCAs
    for n in range(1, 5):
        for rail in range(4):
            assert d.port_leaf[(f"gpu-node-{n:03d}", f"mlx5_{rail}/1")] == f"su1-leaf-rail{rail}"
    assert set(d.port_speed.values()) == {"NDR"}


def test_leaves_that_uplink_to_the_same_spines_are_one_spine_group_named_after_its_first_spine():
    d = fabric.load_ibnetdiscover(FIXTURE)
    assert d.spine_group == {
        "su1-leaf-rail0": "sg1-spine-01",
        "su1-leaf-rail1": "sg1-spine-01",
        "su1-leaf-rail2": "sg2-spine-01",
        "su1-leaf-rail3": "sg2-spine-01",
    }


def test_a_rail_node_is_in_one_leaf_per_port_and_a_top_of_rack_node_in_one_leaf():
    doms = fabric.load_ibnetdiscover(FIXTURE).domains()["gpu-node-002"]
    assert doms["leaf.mlx5_3.1"] == "su1-leaf-rail3" and "leaf" not in doms
    assert fabric.names(doms, "leaf") == {f"su1-leaf-rail{r}" for r in range(4)}
    assert fabric.names(doms, "spine_group") == {"sg1-spine-01", "sg2-spine-01"}
    tor = fabric.Discovered(port_leaf={("n1", "mlx5_0/1"): "tor-1", ("n1", "mlx5_1/1"): "tor-1"})
    assert tor.domains()["n1"]["leaf"] == "tor-1"


def test_node_labels_carry_domains_per_port_and_gfds_nvlink_clique_as_the_nvlink_domain():
    labels = {
        "topology.gpuwarden.io/rack": "r07",
        "topology.gpuwarden.io/leaf.mlx5_0.1": "su2-rail0",
        "nvidia.com/gpu.clique": "7f3c1a2e-0000-4000-8000-000000000001.1",
        "kubernetes.io/hostname": "gb200-001",
    }
    assert fabric.from_labels(labels) == {
        "rack": "r07",
        "leaf.mlx5_0.1": "su2-rail0",
        "nvlink_domain": "7f3c1a2e-0000-4000-8000-000000000001.1",
    }


def test_text_that_is_not_ibnetdiscover_output_is_refused_with_the_line():
    with pytest.raises(SettingsError, match="no Switch blocks"):
        fabric.parse_ibnetdiscover("# nothing here\n")
    bad = FIXTURE.read_text().replace('[2]\t"H-', "[2]\tgarbage H-", 1)
    with pytest.raises(SettingsError, match=r"line \d+: not a port line"):
        fabric.parse_ibnetdiscover(bad)
    nameless = FIXTURE.read_text().replace('"gpu-node-001 mlx5_0"', '"HCA-1"')
    with pytest.raises(SettingsError, match="hostname> <device"):
        fabric.parse_ibnetdiscover(nameless)


def test_the_simulated_fleets_fabric_reads_back_as_the_leaves_and_spines_it_was_built_with():
    from simulator.topology import Topology, ibnetdiscover

    topo = Topology(10, nodes_per_leaf=4)
    found = fabric.parse_ibnetdiscover(ibnetdiscover(topo, spines=2))
    doms = found.domains()
    assert [doms[n]["leaf"] for n in topo.nodes] == list(topo.leaf_of)  # top-of-rack: one leaf
    assert set(found.spine_group.values()) == {"spine-01"}  # a fat tree: one spine group
    assert len(found.port_leaf) == 10 * 8

    rails = Topology(16, nodes_per_leaf=8, rails=True)
    doms = fabric.parse_ibnetdiscover(ibnetdiscover(rails)).domains()
    assert doms["gpu-node-010"]["leaf.mlx5_3.1"] == "su02-rail3" == rails.port_leaf(9, 3)
    assert "leaf" not in doms["gpu-node-010"]  # a leaf per port, none for the whole node


def test_a_mixed_simulated_fleet_writes_each_nodes_hca_rate_hdr_for_a100_ndr_for_h100():
    from simulator.cli import hca_speed
    from simulator.fleet import Fleet
    from simulator.topology import ibnetdiscover

    fleet = Fleet(4, nodes_per_leaf=2, skus=["h100", "h100", "a100", "a100"])
    found = fabric.parse_ibnetdiscover(ibnetdiscover(fleet.topo, speed=hca_speed(fleet)))
    speeds = {node: speed for (node, _), speed in found.port_speed.items()}
    assert speeds == {"gpu-node-001": "NDR", "gpu-node-002": "NDR",
                      "gpu-node-003": "HDR", "gpu-node-004": "HDR"}  # fmt: skip
