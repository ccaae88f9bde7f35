"""The NVL72 tray model (simulator/nvl72.py) builds on the NVML fake, never the other way
round: the GB200 GPU shape lives beside the other models' in simulator/nvml_fake.py, and a
fleet node of the GB200 SKU gets the same GPUs as a rack's tray."""

from __future__ import annotations

from dataclasses import asdict

import grimp

from simulator import nvl72
from simulator.nvml_fake import FACTORIES


def test_the_nvml_fake_imports_nothing_from_the_nvl72_tray_model() -> None:
    graph = grimp.build_graph("simulator")
    assert "simulator.nvl72" not in graph.find_modules_directly_imported_by("simulator.nvml_fake")
    assert not graph.find_shortest_chain("simulator.nvml_fake", "simulator.nvl72")


def test_a_gb200_fleet_node_gets_the_gpus_of_a_rack_tray_with_its_domain_left_to_the_view() -> None:
    for index in range(nvl72.GPUS_PER_TRAY):
        fleet = FACTORIES[nvl72.SKU](index, "gpu-node-001")
        tray = nvl72.gb200(index, "gpu-node-001", cluster="", clique=0)
        assert asdict(fleet) == asdict(tray)
    gpu = nvl72.gb200(2, "gb200-r01-t01", "c0ffee", 7)
    assert (gpu.name, gpu.pci_bus_id, len(gpu.nvlink_state)) == (
        "NVIDIA GB200",
        "00000018:01:00.0",
        18,
    )
    assert gpu.fabric is not None and (gpu.fabric.cluster_uuid, gpu.fabric.clique_id) == (
        "c0ffee",
        7,
    )
    assert gpu.uuid == nvl72.gb200(2, "gb200-r01-t01", "other", 1).uuid  # by node and slot
