"""``gpuwarden demo --fleet mixed-amd``: two H100 racks beside two MI300X racks, a story with an
AMD and an NVIDIA fault, decided under one policy (the run itself: docs/analyzer.md)."""

from __future__ import annotations

import pytest

from gpuwarden.demo import DETECTED_BY, MIXED_AMD, load_story, main
from simulator.cli import racks
from simulator.faults import KINDS


def test_the_mixed_amd_story_has_an_amd_and_an_nvidia_fault_each_on_a_node_of_its_vendor():
    story = load_story(None, "mixed-amd")
    skus = racks(MIXED_AMD["skus"], MIXED_AMD["nodes_per_leaf"])
    assert skus is not None and len(skus) == 32
    on = {s.kind: skus[int(s.node.removeprefix("gpu-node-")) - 1] for s in story}
    assert {KINDS[k].vendor for k in on} == {"amd", ""}
    assert all((KINDS[k].vendor == "amd") == (sku == "mi300x") for k, sku in on.items())
    assert all(k in DETECTED_BY for k in on)  # the tally knows what finds each


@pytest.mark.parametrize("argv", [["--nodes", "16"], ["--telemetry", "dcgm-exporter"]])
def test_the_mixed_amd_fleet_is_its_32_nodes_on_dme_telemetry(argv, capsys):  # type: ignore[no-untyped-def]
    assert main(["--fleet", "mixed-amd", *argv]) == 2
    assert "mixed-amd is 32 nodes" in capsys.readouterr().err
