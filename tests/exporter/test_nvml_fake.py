"""The NVML fake behaves like the real binding where the collector depends on it."""

from __future__ import annotations

import pynvml
import pytest

from simulator.nvml_fake import FakeGpuState, FakeNvml, hgx_node, nvml_error


def test_errors_are_the_real_pynvml_subclasses() -> None:
    assert type(nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)) is pynvml.NVMLError_GpuIsLost
    assert isinstance(nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED), pynvml.NVMLError)


def test_calls_before_init_raise_uninitialized_like_nvml() -> None:
    nvml = hgx_node(gpus=1)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        nvml.nvmlDeviceGetCount()


def test_lost_gpu_raises_gpu_is_lost_on_every_call() -> None:
    nvml = hgx_node(gpus=1)
    nvml.nvmlInit()
    handle = nvml.nvmlDeviceGetHandleByIndex(0)
    nvml.gpus[0].lost = True
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetPowerUsage(handle)
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        nvml.nvmlDeviceGetHandleByIndex(0)


def test_unsupported_and_failing_fields_raise_what_they_name() -> None:
    gpu = FakeGpuState.h100(0)
    gpu.failing["power"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    nvml = FakeNvml([gpu])
    nvml.nvmlInit()
    with pytest.raises(pynvml.NVMLError_NotSupported):
        nvml.nvmlDeviceGetRetiredPages(gpu, 0)  # H100 default: pre-Ampere only
    with pytest.raises(pynvml.NVMLError_Unknown):
        nvml.nvmlDeviceGetPowerUsage(gpu)
    assert nvml.nvmlDeviceGetEnforcedPowerLimit(gpu) == 700_000


def test_unknown_field_names_are_rejected_early() -> None:
    with pytest.raises(ValueError, match="unknown NVML field"):
        FakeGpuState(0, "GPU-x", "x", "00000000:18:00.0", unsupported={"powr"})


def test_field_values_carry_per_entry_returns_like_c_nvml_field_value_t() -> None:
    gpu = FakeGpuState.h200(0)
    gpu.nvlink_tx_bytes[4] = 10 * 1024
    gpu.unsupported.add("recovery_action")
    nvml = FakeNvml([gpu])
    nvml.nvmlInit()
    temp, rec, tx, bad = nvml.nvmlDeviceGetFieldValues(
        gpu,
        [
            pynvml.NVML_FI_DEV_MEMORY_TEMP,
            pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 4),
            (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 30),
        ],
    )
    assert (temp.nvmlReturn, temp.value.uiVal) == (pynvml.NVML_SUCCESS, 42)
    assert rec.nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert (tx.scopeId, tx.value.ullVal) == (4, 10)  # KiB, as NVML counts it
    assert tx.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
    assert bad.nvmlReturn == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_hgx_factories_use_real_board_bus_ids_and_unique_uuids() -> None:
    a, b = hgx_node("h100", seed="a"), hgx_node("h100", seed="b")
    assert [g.pci_bus_id[9:11] for g in a.gpus] == ["18", "2A", "3A", "5D", "9A", "AB", "BA", "DB"]
    assert len({g.uuid for g in a.gpus + b.gpus}) == 16
    assert a.gpus[0].memory_free == a.gpus[0].memory_total - a.gpus[0].memory_used


def test_driver_reload_resets_volatile_counters_but_not_aggregate_ecc() -> None:
    gpu = FakeGpuState.h100(0)
    vol = (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_VOLATILE_ECC)
    agg = (pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_AGGREGATE_ECC)
    gpu.ecc[vol] = gpu.ecc[agg] = 5
    gpu.pcie_replay = 3
    gpu.reload_driver()
    assert (gpu.ecc[vol], gpu.ecc[agg], gpu.pcie_replay, gpu.energy_mj) == (0, 5, 0, 0)
