"""``gpuwarden simulate --telemetry dcgm-exporter``: every node served as dcgm-exporter +
node_exporter would serve it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter import catalog_dcgm as cd
from gpuwarden.lab.dcgm_openmetrics import DcgmScrapeRecorder
from simulator.cli import SimulateSettings, file_sd
from simulator.fleet import Fleet
from simulator.model import SKUS
from simulator.simulator import Simulator
from simulator.telemetry import DCGM, DCGM_DEFAULTS, as_dcgm_exporter, dcgm_fields, is_dcgm
from simulator.topology import gpu_uuid

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


def test_infiniband_port_data_comes_as_node_exporters_byte_counters(sim):
    """The dcgm dashboards' port-traffic panels read them (node_exporter's port_data_*_bytes)."""
    series = _series(sim.metrics(sim.fleet.nodes[1]))
    for name in c.NODE_IB_DATA.values():
        ports = {(lab["device"], lab["port"]) for n, lab, _ in series if n == name}
        assert len(ports) == 8, name
    assert (
        f"# TYPE {c.NODE_IB_DATA['port_xmit_data']} counter"
        in sim.metrics(sim.fleet.nodes[1]).decode()
    )


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


# ------------------------------------------------ dcgm-exporter:defaults: the CSV unedited
CSV = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm-exporter" / "4.5.3-4.8.2"
_ROW = re.compile(r"^(DCGM_\w+)\s*,\s*(\w+)\s*,")
# enabled there, yet absent on these GPUs as on real ones: no vGPU licensing on bare metal
NOT_ON_THIS_GPU = {c.GPU_VGPU_LICENSE.dcgm[0].name}


def _enabled() -> dict[str, str]:
    """default-counters.csv's lines not commented out: field -> type."""
    rows = [_ROW.match(ln) for ln in (CSV / "default-counters.csv").read_text().splitlines()]
    return {m[1]: m[2] for m in rows if m}


def _families(telemetry: str) -> set[str]:
    """The dcgm families one node serves on its second scrape (profiling needs two samples)."""
    now = [5.0]
    s = Simulator(Fleet(2, seed=1), telemetry=telemetry, clock=lambda: now[0], wall=lambda: now[0])
    s.metrics(s.fleet.nodes[0])
    now[0] = 20.0
    return {n for n, _, _ in _series(s.metrics(s.fleet.nodes[0])) if n.startswith("DCGM_")}


def test_the_default_field_list_is_the_vendored_default_counters_csv_line_by_line():
    assert list(cd.DEFAULT_COUNTERS) == list(_enabled())


def test_the_defaults_profile_serves_exactly_the_csvs_enabled_fields():
    fields = {f for f, kind in _enabled().items() if kind != "label"}
    assert _families(DCGM_DEFAULTS) == fields - NOT_ON_THIS_GPU
    now = [5.0]
    s = Simulator(Fleet(2, seed=1), telemetry=DCGM_DEFAULTS, clock=lambda: now[0],
                  wall=lambda: now[0])  # fmt: skip
    dcgm = [lab for n, lab, _ in _series(s.metrics(s.fleet.nodes[0])) if n.startswith("DCGM_")]
    label = next(f for f, kind in _enabled().items() if kind == "label")
    assert all(label in lab for lab in dcgm)  # the label-typed line: a label on every series


def test_the_commonly_enabled_profile_adds_what_the_defaults_leave_out():
    common, defaults = _families(DCGM), _families(DCGM_DEFAULTS)
    added = {m.dcgm[0].name for m in (c.GPU_POWER_LIMIT, c.GPU_ROW_REMAP_PENDING,
                                      c.GPU_PCIE_GENERATION, c.GPU_PCIE_WIDTH)}  # fmt: skip
    added |= {f.name for f in c.GPU_ECC_ERRORS.dcgm} | {f.name for f in c.NVLINK_ERRORS.dcgm}
    assert defaults < common and added <= common - defaults
    assert not added & set(_enabled())


def test_the_evaluation_recorder_of_the_defaults_profile_writes_only_the_csvs_fields(tmp_path):
    fleet = Fleet(2, seed=1)
    rec = DcgmScrapeRecorder(fleet.nodes, gpu_uuid, [SKUS[k].name for k in fleet.sku_of], 0.0,
                             tmp_path, fields=dcgm_fields(DCGM_DEFAULTS))  # fmt: skip
    for t in (0.0, 15.0):
        rec.push(fleet.step(t), fleet.jobs_at(t))
    text = rec.write(tmp_path / "dcgm.om").read_text()
    rec.close()
    written = {ln.split("{")[0] for ln in text.splitlines() if ln.startswith("DCGM_")}
    assert written and written <= set(_enabled())
    assert c.GPU_POWER_LIMIT.dcgm[0].name not in written and c.GPU_SM_CLOCK.dcgm[0].name in written
    assert dcgm_fields(DCGM) is None and is_dcgm(DCGM_DEFAULTS) and not is_dcgm("gpuwarden")
