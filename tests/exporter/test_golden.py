"""Golden scrapes: the whole exporter output for recorded fault scenarios.

Each scenario builds one node from the fakes (FakeNvml, the recorded sysfs tree, a kernel
log), runs real collection cycles and compares the rendered /metrics with
``fixtures/golden/<scenario>.prom``. ``UPDATE_GOLDEN=1`` rewrites them. Every golden must pass
``promtool check metrics`` without a lint warning.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pynvml
import pytest

from exporter import catalog
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.sysfs import DictSysfs
from simulator.nvml_fake import FakeGpuState, FakeNvml
from tests.realcomp import promtool

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "fixtures" / "golden"
PORT1 = "class/infiniband/mlx5_0/ports/1"
UNC_VOL = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
UNC_AGG = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_AGGREGATE_ECC)


class Node:
    """One node's fake sources; a scenario mutates them between cycles."""

    def __init__(self) -> None:
        self.gpus = [FakeGpuState.h100(i, seed="golden") for i in range(8)]
        for g in self.gpus:
            g.util_gpu_pct, g.sm_clock_mhz, g.power_mw = 97, 1980, 650_000
        self.sysfs = DictSysfs(_fixture_tree())
        self.kmsg = ListKernelLog()
        self.step = 0
        cols = collectors_for("golden-node", FakeNvml(self.gpus), self.sysfs, self.kmsg)
        ticks = iter(range(10**6))
        self.loop = CollectionLoop(
            cols,
            "golden-node",
            source="golden",
            interval=5,
            wall=lambda: 1.7e9,
            monotonic=lambda: 0.0,
            timer=lambda: next(ticks) * 0.001,
            dcgm=False,
        )

    def xid_line(self, gpu: int, xid: int, text: str) -> str:
        bus = self.gpus[gpu].pci_bus_id.split(":")[1].lower()
        return f"[ 1843.308145] NVRM: Xid (PCI:0000:{bus}:00): {xid}, pid=4242, name=python, {text}"

    def symbol_errors(self, value: int) -> None:
        self.sysfs.set(f"{PORT1}/counters/symbol_error", f"{value}\n")


def _fixture_tree() -> dict[str, str]:
    base = ROOT / "fixtures" / "sys"
    return {str(p.relative_to(base)): p.read_text() for p in base.rglob("*") if p.is_file()}


def healthy(n: Node) -> None:
    """Nothing happens: the baseline every fault scenario differs from."""


def xid79_one_gpu(n: Node) -> None:
    if n.step == 1:
        n.kmsg.append(n.xid_line(3, 79, "GPU has fallen off the bus."))
        n.gpus[3].lost = True


def ecc_dbe(n: Node) -> None:
    if n.step == 0:
        return
    g = n.gpus[2]
    g.ecc[UNC_VOL] = g.ecc[UNC_AGG] = 1
    g.remapped_rows = (0, 1, 1, 0)
    if n.step == 1:
        n.kmsg.append(n.xid_line(2, 48, "An uncorrectable double bit error (DBE) was detected."))


def nvlink_crc_storm(n: Node) -> None:
    g = n.gpus[5]
    g.nvlink_errors[(7, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)] = (
        g.nvlink_errors.get((7, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT), 0) + 12_000
    )
    g.nvlink_errors[(7, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 340


def ib_port_down(n: Node) -> None:
    if n.step == 0:
        return
    n.sysfs.set(f"{PORT1}/state", "1: DOWN\n")
    n.sysfs.set(f"{PORT1}/phys_state", "3: Disabled\n")


def ib_symbol_error_ramp(n: Node) -> None:
    n.symbol_errors(n.step**3 * 1000)


SCENARIOS: dict[str, Callable[[Node], None]] = {
    f.__name__: f
    for f in (healthy, xid79_one_gpu, ecc_dbe, nvlink_crc_storm, ib_port_down, ib_symbol_error_ramp)
}


def _scrape(name: str) -> bytes:
    node = Node()
    body = b""
    for step in range(3):  # three cycles: counters move, monotonic state is exercised
        node.step = step
        SCENARIOS[name](node)
        body = node.loop.run_once().body
    return body


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_scrape_matches_the_golden_file(name: str) -> None:
    body = _scrape(name)
    path = GOLDEN / f"{name}.prom"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_bytes(body)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert body.decode() == path.read_text()


@pytest.mark.real
@pytest.mark.parametrize("name", list(SCENARIOS))
def test_golden_scrape_passes_promtool_check_metrics_without_warnings(name: str) -> None:
    r = promtool("check", "metrics", stdin=(GOLDEN / f"{name}.prom").read_bytes())
    assert r.returncode == 0 and not r.stderr.strip(), r.stderr.decode()


def _value(body: str, metric: catalog.MetricDef, **labels: str) -> float:
    for line in body.splitlines():
        if line.startswith(metric.name + "{") and all(
            f'{k}="{v}"' in line for k, v in labels.items()
        ):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{metric.name} {labels} not in scrape")


def test_the_fallen_off_gpu_is_reported_down_with_its_xid_and_the_others_stay_up() -> None:
    body = (GOLDEN / "xid79_one_gpu.prom").read_text()
    assert _value(body, catalog.GPU_UP, gpu="3", reason="gpu_lost") == 0
    assert _value(body, catalog.GPU_XID_ERRORS, gpu="3", xid="79") == 1
    assert all(_value(body, catalog.GPU_UP, gpu=str(g)) == 1 for g in (0, 1, 2, 4, 5, 6, 7))
    assert _value(body, catalog.GPU_INFO, gpu="3") == 1


def test_the_symbol_error_ramp_is_exported_as_a_growing_counter() -> None:
    body = (GOLDEN / "ib_symbol_error_ramp.prom").read_text()
    v = _value(body, catalog.IB_COUNTER, device="mlx5_0", port="1", counter="symbol_error")
    assert v == 8000


def test_dcgm_compat_scrape_of_a_healthy_node_carries_dcgm_names_and_labels() -> None:
    node = Node()
    cols = collectors_for("golden-node", FakeNvml(node.gpus), node.sysfs, node.kmsg)
    body = CollectionLoop(cols, "golden-node", source="golden", interval=5, dcgm=True)
    body = body.run_once().body.decode()
    temp = catalog.GPU_TEMPERATURE.dcgm[0].name
    lines = [ln for ln in body.splitlines() if ln.startswith(temp + "{")]
    assert len(lines) == 8
    assert 'modelName="NVIDIA H100 80GB HBM3"' in lines[0] and 'Hostname="golden-node"' in lines[0]
    assert f"{catalog.DCGM_LAST_XID.name}{{" in body
