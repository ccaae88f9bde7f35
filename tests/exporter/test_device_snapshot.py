"""The exporter on a real GPU: what it served from real NVML (an H200, driver 580) agrees with
the metric catalogue and with what the GPU itself reported (fixtures/device/README.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from exporter import catalog as c
from tests.exporter.test_dcgm_compat import _csv_rows

SNAP = Path(__file__).resolve().parents[2] / "fixtures" / "device" / "h200-r580"
SERIES = re.compile(r"^([A-Za-z_:][\w:]*)(?:\{(.*)\})? (\S+)$")
LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _series(name: str) -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in (SNAP / name).read_text().splitlines():
        if line and not line.startswith("#"):
            m = SERIES.match(line)
            assert m, f"unparseable exposition line: {line!r}"
            out.append((m[1], dict(LABEL.findall(m[2] or "")), float(m[3])))
    return out


def _types(name: str) -> dict[str, str]:
    return {
        parts[2]: parts[3]
        for line in (SNAP / name).read_text().splitlines()
        if line.startswith("# TYPE") and len(parts := line.split()) == 4
    }


PROBE = json.loads((SNAP / "nvml_probe.json").read_text())
GPU = PROBE["gpus"][0]


def test_every_native_series_from_real_nvml_is_a_catalogue_metric_with_its_exact_labels() -> None:
    types = _types("metrics-native.prom")
    seen = set()
    for name, labels, _ in _series("metrics-native.prom"):
        m = c.by_name(name)
        # the exposition omits a label whose value is empty (gpuwarden_gpu_up's reason while up)
        assert set(labels) <= set(m.labels), (name, sorted(labels), m.labels)
        assert labels["node"] == "h200-device", name
        assert types[name] == m.type, name
        seen.add(name)
    assert len(seen) >= 45  # a whole H200 node, not a stub


def test_the_real_gpus_identity_and_readings_are_what_nvml_itself_reported() -> None:
    by = {(n, tuple(sorted(lab.items()))): v for n, lab, v in _series("metrics-native.prom")}
    info = [lab for n, lab, _ in _series("metrics-native.prom") if n == c.GPU_INFO.name]
    assert info == [info[0]] and info[0]["uuid"] == GPU["uuid"]
    assert info[0]["name"] == GPU["name"] == "NVIDIA H200"
    assert info[0]["driver_version"] == PROBE["driver"]

    def one(metric: c.MetricDef) -> float:
        vals = [v for (n, _), v in by.items() if n == metric.name]
        assert len(vals) == 1, metric.name
        return vals[0]

    assert one(c.GPU_MEMORY_TOTAL) == pytest.approx(GPU["memory"]["total"], rel=0.01)
    assert one(c.GPU_POWER_LIMIT) == GPU["power_limit_mw"] / 1000
    assert one(c.GPU_SM_CLOCK_MAX) == GPU["max_clock_sm"] * 1e6
    assert one(c.GPU_PCIE_GENERATION) == GPU["pcie_gen"]
    assert one(c.by_name(c.PREFIX + "gpu_pcie_link_width_max")) == GPU["pcie_width_max"]
    assert one(c.GPU_UP) == 1


def test_profiling_series_come_from_gpm_on_a_real_hopper_under_load() -> None:
    vals = {n: v for n, _, v in _series("metrics-native.prom")}
    assert GPU["gpm_supported"] == 1
    assert 0.5 < vals[c.by_name(c.PREFIX + "gpu_sm_active_ratio").name] <= 1.0
    assert 0.5 < vals[c.by_name(c.PREFIX + "gpu_tensor_pipe_active_ratio").name] <= 1.0


def test_what_the_real_gpu_cannot_serve_is_said_not_silently_dropped() -> None:
    unavailable = {
        (lab["metric"], lab["reason"])
        for n, lab, _ in _series("metrics-native.prom")
        if n == c.by_name(c.PREFIX + "exporter_field_unavailable").name
    }
    # no NVLink fabric is exposed to the VM (nvidia-smi -q: Fabric State N/A)
    assert (c.by_name(c.PREFIX + "gpu_fabric_info").name, "fabric_unsupported") in unavailable
    assert "Fabric" in (SNAP / "nvidia-smi-q.txt").read_text()


def test_the_dcgm_drop_in_on_real_nvml_serves_every_default_field_the_gpu_has() -> None:
    served = {n for n, _, _ in _series("metrics-dcgm.prom")}
    enabled = {row[0] for row in _csv_rows() if row[3]}
    missing = enabled - served
    # dcgm-exporter renders the driver version as a label, not a series; this GPU has no
    # NVLink peers in the VM (nvidia-smi nvlink -s printed nothing) and is not a vGPU.
    smi = (SNAP / "nvidia-smi-extra.txt").read_text()
    assert smi.split("$ nvidia-smi nvlink -s")[1].split("$")[0].strip() == ""
    assert missing == {
        c.DCGM_DRIVER_LABEL,
        c.NVLINK_TRANSMIT.dcgm[0].name,
        *(f.name for f in c.by_name(c.PREFIX + "gpu_vgpu_license_status").dcgm),
    }
    for _, labels, _ in _series("metrics-dcgm.prom"):
        if "UUID" in labels:
            assert labels[c.DCGM_DRIVER_LABEL] == PROBE["driver"]
            assert labels["modelName"] == "NVIDIA H200"
