"""Failing NVML costs only what failed: a field, a GPU; never the scrape or the other GPUs."""

from __future__ import annotations

import pynvml
import pytest

from exporter import catalog as c
from exporter.catalog import MetricDef, Sample
from exporter.collectors.gpu import GpuCollector, NvmlUnavailableError
from simulator.nvml_fake import hgx_node, nvml_error

UNKNOWN = pynvml.NVML_ERROR_UNKNOWN


def of(samples: list[Sample], metric: MetricDef, gpu: str) -> list[Sample]:
    return [s for s in samples if s.metric is metric and s.labels["gpu"] == gpu]


def up(samples: list[Sample], gpu: str) -> tuple[float, str]:
    [s] = of(samples, c.GPU_UP, gpu)
    return s.value, s.labels["reason"]


def per_gpu(samples: list[Sample]) -> dict[str, int]:
    out: dict[str, int] = {}
    for s in samples:
        out[s.labels["gpu"]] = out.get(s.labels["gpu"], 0) + 1
    return out


def test_unsupported_field_is_skipped_for_that_gpu_only_and_not_counted() -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[1].unsupported |= {"power", "ecc", "memory_temperature"}
    col = GpuCollector(nvml, "n1")
    s = col.collect()
    assert of(s, c.GPU_POWER, "1") == [] and len(of(s, c.GPU_POWER, "0")) == 1
    assert of(s, c.GPU_ECC_ERRORS, "1") == [] and len(of(s, c.GPU_ECC_ERRORS, "0")) == 4
    assert of(s, c.GPU_MEMORY_TEMPERATURE, "1") == []
    assert len(of(s, c.GPU_MEMORY_TEMPERATURE, "0")) == 1
    assert up(s, "1") == (1.0, "")
    assert col.read_errors.counts == {}


def test_one_field_raising_skips_its_series_counts_it_and_keeps_the_rest() -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[0].failing["power"] = nvml_error(UNKNOWN)
    nvml.gpus[0].failing["recovery_action"] = nvml_error(UNKNOWN)  # a field-value entry
    col = GpuCollector(nvml, "n1")
    s = col.collect()
    assert of(s, c.GPU_POWER, "0") == [] and of(s, c.GPU_RECOVERY_ACTION, "0") == []
    assert len(of(s, c.GPU_POWER_LIMIT, "0")) == 1 and len(of(s, c.GPU_POWER, "1")) == 1
    assert up(s, "0") == (1.0, "")
    assert per_gpu(s)["0"] == per_gpu(s)["1"] - 2
    assert col.read_errors.counts == {"power": 1, "recovery_action": 1}
    col.collect()
    assert col.read_errors.counts == {"power": 2, "recovery_action": 2}  # asked again


def test_failing_field_comes_back_when_nvml_answers_again() -> None:
    nvml = hgx_node(gpus=1)
    nvml.gpus[0].failing["temperature"] = nvml_error(UNKNOWN)
    col = GpuCollector(nvml, "n1")
    assert of(col.collect(), c.GPU_TEMPERATURE, "0") == []
    nvml.gpus[0].failing.clear()
    assert [s.value for s in of(col.collect(), c.GPU_TEMPERATURE, "0")] == [34]


def test_lost_gpu_reports_up_zero_with_reason_and_identity_others_unaffected() -> None:
    nvml = hgx_node(gpus=3)
    col = GpuCollector(nvml, "n1")
    col.collect()  # profiling (GPM) series need a pair of samples: steady from cycle two
    before = per_gpu(col.collect())
    nvml.gpus[1].lost = True
    s = col.collect()
    assert up(s, "1") == (0.0, "gpu_lost")
    [info] = of(s, c.GPU_INFO, "1")
    assert info.labels["uuid"] == nvml.gpus[1].uuid
    assert info.labels["pci_bus_id"] == "00000000:2A:00.0"
    assert per_gpu(s) == {"0": before["0"], "1": 2, "2": before["2"]}
    assert "0000:2a:00" in col.identities()  # XIDs for it can still be named
    assert col.read_errors.counts == {}


def test_gpu_lost_in_the_middle_of_a_cycle_drops_its_partial_readings() -> None:
    nvml = hgx_node(gpus=1)
    nvml.gpus[0].failing["nvlink_state"] = nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
    s = GpuCollector(nvml, "n1").collect()
    assert up(s, "0") == (0.0, "gpu_lost")
    assert {x.metric for x in s} == {c.GPU_UP, c.GPU_INFO}


def test_gpu_that_vanishes_from_enumeration_keeps_reporting_lost() -> None:
    nvml = hgx_node(gpus=2)
    col = GpuCollector(nvml, "n1")
    col.collect()
    del nvml.gpus[1]
    assert up(col.collect(), "1") == (0.0, "gpu_lost")


def test_repeated_identity_failures_mark_the_gpu_nvml_error_after_the_threshold() -> None:
    nvml = hgx_node(gpus=2)
    col = GpuCollector(nvml, "n1", fail_threshold=3)
    col.collect()
    nvml.gpus[0].failing["uuid"] = nvml_error(UNKNOWN)
    seen = [up(col.collect(), "0") for _ in range(3)]
    assert seen == [(1.0, ""), (1.0, ""), (0.0, "nvml_error")]  # debounced, then down
    s = col.collect()
    assert up(s, "0") == (0.0, "nvml_error") and up(s, "1") == (1.0, "")
    assert col.read_errors.counts["identity"] == 4
    nvml.gpus[0].failing.clear()
    s = col.collect()
    assert up(s, "0") == (1.0, "")  # recovered
    assert len(of(s, c.GPU_TEMPERATURE, "0")) == 1


def test_lost_gpu_that_comes_back_after_a_reset_reports_up_again() -> None:
    nvml = hgx_node(gpus=1)
    col = GpuCollector(nvml, "n1")
    nvml.gpus[0].lost = True
    assert up(col.collect(), "0") == (0.0, "gpu_lost")
    nvml.gpus[0].lost = False
    s = col.collect()
    assert up(s, "0") == (1.0, "") and len(of(s, c.GPU_POWER, "0")) == 1


def test_missing_driver_raises_clearly_each_cycle_then_recovers() -> None:
    lib = nvml_error(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    nvml = hgx_node(gpus=2, init_error=lib)
    col = GpuCollector(nvml, "n1")
    for _ in range(2):
        with pytest.raises(NvmlUnavailableError, match="NVML Shared Library Not Found"):
            col.collect()
    assert nvml.init_calls == 2  # retried every cycle
    nvml.init_error = None
    s = col.collect()
    assert [up(s, g) for g in ("0", "1")] == [(1.0, ""), (1.0, "")]


def test_driver_unloaded_while_running_raises_then_reinitialises() -> None:
    nvml = hgx_node(gpus=1)
    col = GpuCollector(nvml, "n1")
    col.collect()
    nvml.initialized = False  # what an unloaded driver looks like: NVML Uninitialized
    nvml.init_error = nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NvmlUnavailableError, match="Uninitialized"):
        col.collect()
    with pytest.raises(NvmlUnavailableError, match="Driver Not Loaded"):
        col.collect()
    nvml.init_error = None
    assert up(col.collect(), "0") == (1.0, "")


def test_counters_never_decrease_across_a_driver_reload() -> None:
    nvml = hgx_node(gpus=1)
    gpu = nvml.gpus[0]
    col = GpuCollector(nvml, "n1")
    corr_vol = (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
    gpu.ecc[corr_vol], gpu.pcie_replay, gpu.energy_mj = 50, 7, 5_000_000
    gpu.nvlink_errors[(3, pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA)] = 11
    gpu.nvlink_tx_bytes[3] = 2048 * 1024
    first = {(s.metric.name, s.label_values): s.value for s in col.collect()}
    gpu.reload_driver()
    gpu.ecc[corr_vol], gpu.pcie_replay, gpu.energy_mj = 2, 1, 1_000
    second = {(s.metric.name, s.label_values): s.value for s in col.collect()}
    counters = [k for k in first if c.by_name(k[0]).type == "counter"]
    # ecc, energy, replay, violations, NVLink errors and bytes per link, NVLink errors per GPU
    assert len(counters) == 4 + 1 + 1 + 8 + 18 * 4 + 18 * 2 + 1
    assert all(second[k] >= first[k] for k in counters)
    lv = ("n1", "0", gpu.uuid)
    assert second[(c.GPU_ECC_ERRORS.name, (*lv, "corrected", "volatile"))] == 52
    assert second[(c.GPU_PCIE_REPLAY.name, lv)] == 8
    assert second[(c.GPU_ENERGY.name, lv)] == pytest.approx(5_001.0)
    assert second[(c.NVLINK_ERRORS.name, (*lv, "3", "crc_data"))] == 11
    assert second[(c.NVLINK_TRANSMIT.name, (*lv, "3"))] == 2048 * 1024
    assert second[(c.GPU_NVLINK_ERRORS.name, lv)] == 11


def test_a_non_nvml_exception_from_one_field_costs_only_that_series() -> None:
    nvml = hgx_node(gpus=1)
    nvml.gpus[0].failing["utilization"] = ValueError("binding returned garbage")
    col = GpuCollector(nvml, "n1")
    s = col.collect()
    assert of(s, c.GPU_UTILIZATION, "0") == [] and up(s, "0") == (1.0, "")
    assert col.read_errors.counts == {"utilization": 1}


def test_a_malformed_pci_bus_id_is_an_identity_failure_of_that_gpu_only() -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[0].pci_bus_id = "not-a-bus-id"
    col = GpuCollector(nvml, "n1", fail_threshold=1)
    s = col.collect()
    assert up(s, "0") == (0.0, "nvml_error") and up(s, "1") == (1.0, "")
    assert sorted(col.identities()) == ["0000:2a:00"]
    assert col.read_errors.counts == {"identity": 1}


def test_driver_upgrade_shows_in_gpu_info_after_reinit() -> None:
    nvml = hgx_node(gpus=1)
    col = GpuCollector(nvml, "n1")
    col.collect()
    nvml.initialized, nvml.driver_version = False, "570.86.15"
    with pytest.raises(NvmlUnavailableError):
        col.collect()
    [info] = of(col.collect(), c.GPU_INFO, "0")
    assert info.labels["driver_version"] == "570.86.15"
