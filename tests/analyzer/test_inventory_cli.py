"""``gpuwarden inventory``: per node the model, limits (current and the model's default),
NVLinks, IB ports and rate, fabric, rack and leaf, from one read plus the inventory file."""

from __future__ import annotations

import json
from dataclasses import replace

import analyzer.cli
from analyzer.inventory import Inventory, NodeInventory
from analyzer.inventory_cli import main, render, rows
from gpuwarden.cli import main as umbrella

from .synth import mixed, window


def _window():
    d, sku = mixed(h100=2, a100=2)
    return replace(window(d, leaf_of={0: "leaf-01", 1: "leaf-01", 2: "leaf-02", 3: "leaf-02"}),
                   sku=sku)  # fmt: skip


def test_rows_show_each_nodes_model_limits_links_and_fabric():
    table = rows(Inventory(nodes={"node-03": NodeInventory(rack="r9")}).apply(_window()))
    h100, a100 = table[0], table[3]
    assert (h100["model"], h100["power_limit_w"], h100["default_limit_w"]) == (
        "h100-sxm",
        700.0,
        700.0,
    )
    assert (h100["nvlinks"], h100["ib_ports"], h100["ib_rate_gbps"], h100["hca"]) == (
        18,
        8,
        400.0,
        "NDR",
    )
    assert (a100["model"], a100["power_limit_w"], a100["nvlinks"]) == ("a100-sxm", 400.0, 12)
    assert (a100["ib_rate_gbps"], a100["hca"], a100["rack"], a100["leaf"]) == (
        200.0,
        "HDR",
        "r9",
        "leaf-02",
    )
    assert a100["gpus"] == 8 and a100["sm_clock_max_mhz"] == 1410.0


def test_an_unknown_model_shows_what_was_measured_and_dashes_for_the_spec():
    text = render(rows(window(mixed(h100=1, a100=0)[0])))
    header, line = text.splitlines()
    assert header.split()[:3] == ["node", "model", "gpus"]
    assert line.split()[:5] == ["node-00", "?", "8", "700", "-"]


def test_the_command_prints_json_rows_from_one_read(monkeypatch, capsys):
    class OneRead:
        async def read(self, now):
            return _window()

    monkeypatch.setattr(analyzer.cli, "build_source", lambda s: OneRead())
    assert umbrella(["inventory", "--prometheus", "http://prom:9090", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [r["model"] for r in table] == ["h100-sxm"] * 2 + ["a100-sxm"] * 2


def test_bad_settings_exit_2_with_one_line(capsys, tmp_path):
    assert main([]) == 2
    assert capsys.readouterr().err.count("\n") == 1
    bad = tmp_path / "inv.yml"
    bad.write_text("nodes: {n1: {hca: QDR}}\n")
    assert main(["--prometheus", "http://prom:9090", "--inventory", str(bad)]) == 2
    assert "hca must be one of" in capsys.readouterr().err


def test_rows_name_every_leaf_a_rail_nodes_ports_reach_and_its_nvlink_domain():
    inv = Inventory(defaults=NodeInventory(ports={"mlx5_0/1": "su1-rail0", "mlx5_1/1": "su1-rail1"},
                                           nvlink_domain="nvl72-01"))  # fmt: skip
    row = rows(inv.apply(_window()))[0]
    assert (row["leaf"], row["nvlink_domain"]) == ("su1-rail0,su1-rail1", "nvl72-01")
