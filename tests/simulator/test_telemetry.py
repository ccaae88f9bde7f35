"""``gpuwarden simulate --telemetry dcgm-exporter``: every node served as dcgm-exporter +
node_exporter would serve it."""

from __future__ import annotations

import re

import pytest

from exporter import catalog as c
from simulator.cli import SimulateSettings, file_sd
from simulator.fleet import Fleet
from simulator.simulator import Simulator
from simulator.telemetry import as_dcgm_exporter

_SERIES = re.compile(r"^(\w+)\{(.*)\} (\S+)$")


def _series(body: bytes) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in body.decode().splitlines():
        m = _SERIES.match(line)
        if m:
            labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2)))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


@pytest.fixture
def sim() -> Simulator:
    fleet = Fleet(2, seed=1)
    fleet.inject("xid", fleet.nodes[0], "gpu2", {"xid": 95}, onset=0)
    fleet.inject("gpu_fallen_off_bus", fleet.nodes[0], "gpu6", onset=0)
    return Simulator(fleet, telemetry="dcgm-exporter", clock=lambda: 5.0, wall=lambda: 5.0)


def test_a_dcgm_telemetry_node_serves_no_gpuwarden_series_and_no_node_label(sim):
    body = sim.metrics(sim.fleet.nodes[0])
    series = _series(body)
    assert series and b"gpuwarden_" not in body
    assert not any("node" in labels for _, labels, _ in series)
    dcgm = [(n, lab) for n, lab, _ in series if n.startswith("DCGM_")]
    assert {lab["Hostname"] for _, lab in dcgm} == {sim.fleet.nodes[0]}
    assert {"gpu", "UUID", "device", "modelName", "pci_bus_id"} <= set(dcgm[0][1])


def test_the_xid_is_a_last_value_gauge_and_a_lost_gpu_serves_no_readings(sim):
    series = _series(sim.metrics(sim.fleet.nodes[0]))
    xid = {lab["gpu"]: v for n, lab, v in series if n == c.DCGM_LAST_XID.name}
    assert xid["2"] == 95.0 and xid["0"] == 0.0  # last code; 0 until the first
    temp = {lab["gpu"] for n, lab, _ in series if n == c.GPU_TEMPERATURE.dcgm[0].name}
    assert "6" not in temp and "5" in temp


def test_infiniband_comes_as_node_exporters_series_with_device_and_port(sim):
    series = _series(sim.metrics(sim.fleet.nodes[1]))
    ib = [(n, lab, v) for n, lab, v in series if n.startswith(c.NODE_IB_PREFIX)]
    names = {n for n, _, _ in ib}
    assert {c.NODE_IB_STATE, c.NODE_IB_RATE, *c.NODE_IB_ERRORS.values()} <= names
    assert all(set(lab) == {"device", "port"} for _, lab, _ in ib)
    state = [v for n, _, v in ib if n == c.NODE_IB_STATE]
    assert len(state) == 8 and set(state) == {4.0}  # every port active, node_exporter's code


def test_a_gpu_of_a_job_carries_dcgm_exporters_hpc_job_label():
    body = (
        b"# HELP DCGM_FI_DEV_GPU_TEMP t\n# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        b'DCGM_FI_DEV_GPU_TEMP{gpu="0",Hostname="h"} 40\n'
        b'DCGM_FI_DEV_GPU_TEMP{gpu="1",Hostname="h"} 41\n'
        b"# HELP gpuwarden_gpu_up u\n# TYPE gpuwarden_gpu_up gauge\n"
        b'gpuwarden_gpu_up{node="h",gpu="0",uuid="u",reason=""} 1\n'
    )
    got = _series(as_dcgm_exporter(body, {"0": "4242"}))
    assert [(lab["gpu"], lab.get("hpc_job")) for _, lab, _ in got] == [("0", "4242"), ("1", None)]


def test_file_sd_names_each_node_by_instance_not_by_a_node_label(sim):
    groups = file_sd(sim, ["127.0.0.1:9400"])
    labels = [g["labels"] for g in groups]
    assert all("node" not in lab for lab in labels)  # type: ignore[operator]
    assert [lab["instance"] for lab in labels] == [f"{n}:9400" for n in sim.fleet.nodes]  # type: ignore[index]


def test_an_unknown_telemetry_stops_the_start():
    with pytest.raises(ValueError, match="telemetry"):
        SimulateSettings(telemetry="nvidia-smi")
