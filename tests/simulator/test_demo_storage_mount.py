"""The demo fleet serves its checkpoint mount, so the fleet dashboard's "Checkpoint storage"
row has data in the demo (``gpuwarden simulate --storage-mounts``, set by the demo)."""

from __future__ import annotations

import inspect
from pathlib import Path
from types import SimpleNamespace

from common.settings import load
from exporter import catalog as c
from gpuwarden import demo
from gpuwarden.stack import Stack, StackOptions
from simulator.cli import SimulateSettings, build_parser, make_simulator
from tests.simulator.test_server import samples


def test_simulate_storage_mounts_makes_every_node_probe_that_mount() -> None:
    ns = build_parser().parse_args(["--nodes", "2", "--storage-mounts", "/mnt/ckpt"])
    flags = {k: v for k, v in vars(ns).items() if k not in ("config", "log_level")}
    sim = make_simulator(load(SimulateSettings, flags, config_file=None))
    for node in ("gpu-node-001", "gpu-node-002"):
        m = sim.metrics(node).decode()
        assert samples(m, c.STORAGE_PROBE_UP.name, node=node, mount="/mnt/ckpt") == [1.0]


def test_the_stack_passes_its_storage_mounts_to_the_simulator(tmp_path: Path) -> None:
    stack = Stack(StackOptions(workdir=tmp_path, storage_mounts=(demo.DEMO_MOUNT,)))
    started: list[list[str]] = []
    stack.sup = SimpleNamespace(start=lambda name, argv, **kw: started.append(argv))  # type: ignore[assignment]
    stack._start_simulator(tmp_path)
    [argv] = started
    assert argv[argv.index("--storage-mounts") + 1] == "/mnt/ckpt"
    assert "storage_mounts=(DEMO_MOUNT,)" in inspect.getsource(demo._run_stack)
