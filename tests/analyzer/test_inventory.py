"""The inventory: the model of each node comes from gpu_info (every source), the operator's
inventory file overrides and completes it, and a bad file stops the start with a reason."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.cli import main
from analyzer.engine import Engine
from analyzer.inventory import Inventory, NodeInventory, load_inventory, parse_inventory
from analyzer.sources.build import RawSeries, build_window
from common.settings import SettingsError
from exporter import catalog as c

from .synth import healthy, window


def _info(node: str, gpu: int, name: str, T: int) -> RawSeries:
    labels = {"node": node, "gpu": str(gpu), "uuid": f"{node}-{gpu}", "name": name}
    return RawSeries(c.GPU_INFO.name, labels, np.arange(T), np.ones(T))


def test_the_embedded_scrape_fills_each_nodes_model_from_gpu_info():
    grid = np.arange(4) * 15.0
    series = [_info("a", g, "NVIDIA A100-SXM4-80GB", 4) for g in range(8)]
    series += [_info("b", g, "NVIDIA H100 80GB HBM3", 4) for g in range(8)]
    series += [_info("c", 0, "Tesla V100-SXM2-32GB", 4)]
    w = build_window(series, grid, 15.0)
    assert w.nodes == ("a", "b", "c")
    assert w.sku == ("a100-sxm", "h100-sxm", "tesla v100-sxm2-32gb")
    assert c.GPU_INFO.name not in w.metrics  # identity, not a time series to judge


def test_a_node_reporting_two_models_is_grouped_with_the_one_most_of_its_gpus_have():
    grid = np.arange(2) * 15.0
    series = [_info("a", g, "NVIDIA H100 80GB HBM3", 2) for g in range(7)]
    series.append(_info("a", 7, "NVIDIA H200", 2))
    assert build_window(series, grid, 15.0).sku == ("h100-sxm",)


def test_the_inventory_file_overrides_model_and_adds_fabric_rack_leaf_and_caps(tmp_path):
    f = tmp_path / "inv.yml"
    f.write_text(
        "defaults: {hca: ndr}\n"
        "nodes:\n"
        "  node-01: {model: NVIDIA A100-SXM4-80GB, hca: HDR, rack: r2, leaf: leaf-09,"
        " power_limit_w: 300}\n"
    )
    inv = load_inventory(f)
    w = inv.apply(window(healthy(3)))
    assert w.sku == ("", "a100-sxm", "")
    assert w.hca == ("NDR", "HDR", "NDR")
    assert w.rack_of == {1: "r2"} and w.leaf_of == {1: "leaf-09"}
    assert w.power_cap_w == {1: 300.0}


def test_the_engine_applies_the_inventory_before_the_detectors_see_the_window():
    seen = []

    class Spy:
        name = "spy"

        def detect(self, w):
            seen.append(w.sku)
            return []

    inv = Inventory(nodes={"node-00": NodeInventory(model="l40s")})
    Engine([Spy()], inventory=inv).cycle(window(healthy(2)))
    assert seen == [("l40s", "")]


@pytest.mark.parametrize(
    ("doc", "why"),
    [
        ([1, 2], "expected a mapping"),
        ({"racks": {}}, "expected a mapping"),
        ({"nodes": [1]}, "'nodes' must map"),
        ({"nodes": {"n1": "a100"}}, "node n1: expected a mapping"),
        ({"nodes": {"n1": {"gpu": "a100"}}}, "unknown field"),
        ({"nodes": {"n1": {"hca": "QDR-ish"}}}, "hca must be one of"),
        ({"nodes": {"n1": {"power_limit_w": -5}}}, "positive number"),
        ({"defaults": {"power_limit_w": "lots"}}, "defaults: power_limit_w"),
    ],
)
def test_a_bad_inventory_names_the_bad_entry(doc, why):
    with pytest.raises(SettingsError, match=why):
        parse_inventory(doc)


def test_an_unreadable_or_non_yaml_inventory_stops_the_analyzer_with_one_line(tmp_path, capsys):
    bad = tmp_path / "inv.yml"
    bad.write_text("nodes: [unclosed\n")
    for path, why in ((bad, "not YAML"), (tmp_path / "absent.yml", "No such file")):
        rc = main(["--prometheus", "http://127.0.0.1:9", "--once", "--inventory", str(path)])
        err = capsys.readouterr().err
        assert rc == 2 and why in err and err.count("\n") == 1
