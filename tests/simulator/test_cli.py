"""`gpuwarden simulate`: bad settings stop the start with one line; file_sd names every node."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from pathlib import Path

import pytest

from simulator.cli import SimulateSettings, main, make_simulator, serve


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--nodes", "0"], "--nodes: 0 is outside"),
        (["--nodes", "many"], "is not an integer"),
        (["--listen", "nowhere"], "is not HOST:PORT"),
        (["--time-scale", "-2"], "--time-scale"),
        (["--scenario", "/nonexistent/s.yaml"], "/nonexistent/s.yaml"),
    ],
)
def test_bad_settings_stop_the_start_with_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_bad_scenario_stops_the_start_naming_the_fault(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("faults: [{kind: xid, node: gpu-node-077, target: gpu0}]\n")
    assert main(["--scenario", str(p), "--nodes", "4"]) == 2
    assert "unknown node 'gpu-node-077'" in capsys.readouterr().err


def test_flags_win_over_the_scenario_fleet_section(tmp_path: Path) -> None:
    p = tmp_path / "s.yaml"
    p.write_text("fleet: {nodes: 6, seed: 9, sku: h200}\n")
    sim = make_simulator(SimulateSettings(scenario=str(p), nodes=3))
    assert len(sim.fleet.nodes) == 3 and sim.fleet.seed == 9 and sim.fleet.topo.sku == "h200"


async def test_file_sd_lists_every_node_with_its_metrics_path_and_node_label(
    tmp_path: Path,
) -> None:
    sd = tmp_path / "targets.json"
    settings = SimulateSettings(nodes=5, listen="127.0.0.1:0", file_sd=str(sd))
    stop = asyncio.Event()
    task = asyncio.create_task(serve(make_simulator(settings), settings, stop))
    for _ in range(100):
        if sd.exists():
            break
        await asyncio.sleep(0.05)
    groups = json.loads(sd.read_text())
    assert [g["labels"]["node"] for g in groups] == [f"gpu-node-00{i}" for i in range(1, 6)]
    assert groups[2]["labels"]["__metrics_path__"] == "/nodes/gpu-node-003/metrics"
    (address,) = {t for g in groups for t in g["targets"]}
    url = f"http://{address}/nodes/gpu-node-003/metrics"
    body = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=10).read())
    assert b'node="gpu-node-003"' in body
    stop.set()
    await task
