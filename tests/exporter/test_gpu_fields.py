"""Every NVML field a healthy GPU reports lands in the right metric, in base units."""

from __future__ import annotations

import pynvml
import pytest

from exporter import catalog as c
from exporter.catalog import MetricDef, Sample
from exporter.collectors.gpu import GpuCollector
from simulator.nvml_fake import FakeGpuState, FakeNvml, hgx_node, nvml_error

CORR, UNC = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
VOL, AGG = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC


def series(
    samples: list[Sample], metric: MetricDef, gpu: str = "0"
) -> dict[tuple[str, ...], float]:
    """Values of one metric for one GPU, keyed by the labels after (node, gpu, uuid)."""
    return {
        s.label_values[3:]: s.value
        for s in samples
        if s.metric is metric and s.labels["gpu"] == gpu
    }


def one(samples: list[Sample], metric: MetricDef, gpu: str = "0") -> float:
    got = series(samples, metric, gpu)
    assert list(got) == [()], f"{metric.name}: {got}"
    return got[()]


@pytest.fixture
def busy() -> FakeNvml:
    gpu = FakeGpuState.h100(0)
    gpu.temperature_c, gpu.memory_temperature_c = 71, 83
    gpu.power_mw, gpu.power_limit_mw, gpu.energy_mj = 612_345, 700_000, 98_765_432
    gpu.util_gpu_pct, gpu.util_memory_pct = 97, 41
    gpu.sm_clock_mhz, gpu.mem_clock_mhz = 1755, 2619
    gpu.throttle_reasons = pynvml.nvmlClocksEventReasonSwPowerCap | 0x40  # + hw thermal
    gpu.memory_used = 80_000_000_000
    gpu.ecc.update({(CORR, VOL): 12, (CORR, AGG): 340, (UNC, VOL): 1, (UNC, AGG): 2})
    gpu.remapped_rows = (3, 1, 1, 0)
    gpu.pcie_replay, gpu.pcie_gen, gpu.pcie_width = 17, 4, 8
    gpu.recovery_action = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET
    gpu.nvlink_state[5] = 0
    gpu.nvlink_errors[(5, pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT)] = 9
    gpu.nvlink_errors[(5, pynvml.NVML_NVLINK_ERROR_DL_REPLAY)] = 4
    gpu.nvlink_tx_bytes[2], gpu.nvlink_rx_bytes[2] = 3 * 1024**3, 5 * 1024**2
    return FakeNvml([gpu])


def test_identity_is_one_info_series_with_driver_version(busy: FakeNvml) -> None:
    s = GpuCollector(busy, "n1").collect()
    [info] = [x for x in s if x.metric is c.GPU_INFO]
    gpu = busy.gpus[0]
    assert info.labels == {
        "node": "n1", "gpu": "0", "uuid": gpu.uuid, "name": "NVIDIA H100 80GB HBM3",
        "pci_bus_id": "00000000:18:00.0", "serial": "1654922000001",
        "vbios_version": "96.00.99.00.01", "driver_version": "550.54.15",
    }  # fmt: skip
    assert series(s, c.GPU_UP) == {("",): 1.0}  # healthy: empty reason (label absent)


def test_gauges_are_converted_to_base_units(busy: FakeNvml) -> None:
    s = GpuCollector(busy, "n1").collect()
    assert one(s, c.GPU_TEMPERATURE) == 71
    assert one(s, c.GPU_MEMORY_TEMPERATURE) == 83
    assert one(s, c.GPU_POWER) == pytest.approx(612.345)
    assert one(s, c.GPU_POWER_LIMIT) == 700.0
    assert one(s, c.GPU_ENERGY) == pytest.approx(98_765.432)
    assert one(s, c.GPU_UTILIZATION) == pytest.approx(0.97)
    assert one(s, c.GPU_MEMORY_UTILIZATION) == pytest.approx(0.41)
    assert one(s, c.GPU_SM_CLOCK) == 1755e6
    assert one(s, c.GPU_SM_CLOCK_MAX) == 1980e6
    assert one(s, c.GPU_MEMORY_CLOCK) == 2619e6
    assert one(s, c.GPU_MEMORY_CLOCK_MAX) == 2619e6
    assert one(s, c.GPU_MEMORY_TOTAL) == 85_520_809_984
    assert one(s, c.GPU_MEMORY_USED) == 80_000_000_000
    assert one(s, c.GPU_MEMORY_FREE) == 85_520_809_984 - 80_000_000_000
    assert one(s, c.GPU_RECOVERY_ACTION) == 1


def test_throttle_reasons_are_one_series_per_reason(busy: FakeNvml) -> None:
    got = series(GpuCollector(busy, "n1").collect(), c.GPU_THROTTLE)
    assert set(got) == {(r,) for r in c.THROTTLE_REASONS}
    assert {k[0] for k, v in got.items() if v == 1.0} == {"sw_power_cap", "hw_thermal_slowdown"}


def test_memory_errors_pcie_and_row_remapping(busy: FakeNvml) -> None:
    s = GpuCollector(busy, "n1").collect()
    assert series(s, c.GPU_ECC_ERRORS) == {
        ("corrected", "volatile"): 12, ("corrected", "aggregate"): 340,
        ("uncorrected", "volatile"): 1, ("uncorrected", "aggregate"): 2,
    }  # fmt: skip
    assert series(s, c.GPU_REMAPPED_ROWS) == {("correctable",): 3, ("uncorrectable",): 1}
    assert one(s, c.GPU_ROW_REMAP_PENDING) == 1
    assert one(s, c.GPU_ROW_REMAP_FAILED) == 0
    assert one(s, c.GPU_PCIE_REPLAY) == 17
    assert (one(s, c.GPU_PCIE_GENERATION), one(s, c.GPU_PCIE_GENERATION_MAX)) == (4, 5)
    assert (one(s, c.GPU_PCIE_WIDTH), one(s, c.GPU_PCIE_WIDTH_MAX)) == (8, 16)


def test_h100_has_no_retired_pages_but_a_pre_ampere_gpu_does() -> None:
    h100 = FakeGpuState.h100(0)
    volta = FakeGpuState.h100(1)
    volta.unsupported.clear()
    volta.retired_pages = {0: [0x1000, 0x2000], 1: [0x3000]}
    volta.retired_pages_pending = 1
    s = GpuCollector(FakeNvml([h100, volta]), "n1").collect()
    assert series(s, c.GPU_RETIRED_PAGES, "0") == {}
    assert series(s, c.GPU_RETIRED_PAGES_PENDING, "0") == {}
    assert series(s, c.GPU_RETIRED_PAGES, "1") == {("single_bit",): 2, ("double_bit",): 1}
    assert one(s, c.GPU_RETIRED_PAGES_PENDING, "1") == 1


def test_nvlink_state_errors_and_bytes_per_link(busy: FakeNvml) -> None:
    s = GpuCollector(busy, "n1").collect()
    up = series(s, c.NVLINK_UP)
    assert len(up) == 18  # H100 SXM: links 0..17, links up to NVML's max of 36 are absent
    assert {k for k, v in up.items() if v == 0} == {("5",)}
    errors = series(s, c.NVLINK_ERRORS)
    assert len(errors) == 18 * 4
    assert errors[("5", "crc_flit")] == 9 and errors[("5", "replay")] == 4
    assert sum(errors.values()) == 13
    assert series(s, c.NVLINK_TRANSMIT)[("2",)] == 3 * 1024**3
    assert series(s, c.NVLINK_RECEIVE)[("2",)] == 5 * 1024**2
    assert len(series(s, c.NVLINK_RECEIVE)) == 18


def test_each_gpu_also_serves_its_links_down_and_the_sum_of_its_nvlink_errors(
    busy: FakeNvml,
) -> None:
    s = GpuCollector(busy, "n1").collect()
    assert one(s, c.GPU_NVLINK_DOWN, "0") == 1
    assert one(s, c.GPU_NVLINK_ERRORS, "0") == 13


def test_the_per_gpu_nvlink_sums_are_not_served_when_a_link_could_not_be_read(
    busy: FakeNvml,
) -> None:
    busy.gpus[0].failing["nvlink_errors"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    s = GpuCollector(busy, "n1").collect()
    assert series(s, c.GPU_NVLINK_ERRORS, "0") == {}  # a partial sum would look like a reset
    assert one(s, c.GPU_NVLINK_DOWN, "0") == 1
    busy.gpus[0].failing = {"nvlink_state": nvml_error(pynvml.NVML_ERROR_UNKNOWN)}
    s = GpuCollector(busy, "n1").collect()
    assert series(s, c.GPU_NVLINK_DOWN, "0") == {}


def test_every_gpu_and_nvlink_metric_of_the_catalogue_is_emitted_for_a_pre_ampere_gpu() -> None:
    gpu = FakeGpuState.h100(0)
    gpu.unsupported.clear()
    gpu.vgpu_licensed = True  # a vGPU-licensed host; bare metal has no such series
    gpu.partition("1g.10gb", 2)  # MIG series exist only in MIG mode
    col = GpuCollector(FakeNvml([gpu]), "n1")
    col.collect()  # profiling needs a pair of GPM samples
    emitted = {s.metric for s in col.collect()}
    gpu_section = {
        m for m in c.all_metrics() if m.name.startswith((c.PREFIX + "gpu_", c.PREFIX + "nvlink_"))
    }
    # XIDs and job allocations come from other collectors (kernel log, job map).
    assert gpu_section - emitted == {
        c.GPU_XID_ERRORS,
        c.GPU_MIG_XID_ERRORS,
        c.GPU_XID_NVLINK5_ERRORS,
        c.GPU_ALLOCATION_INFO,
        c.GPU_POD_INFO,  # the kubelet's, not NVML's
        # per-pod use of a shared GPU: the gpu_processes collector's (NVML + cgroups)
        c.GPU_POD_MEMORY_USED,
        c.GPU_POD_SM_UTILIZATION,
        c.GPU_POD_PROCESSES,
        # AMD Instinct's RAS and XGMI series: amdsmi's (issue 34 item 2), not NVML's
        c.GPU_RAS_ERRORS,
        c.GPU_RAS_EVENTS,
        c.GPU_XGMI_TRANSMIT,
        c.GPU_XGMI_RECEIVE,
        c.GPU_AMDGPU_EVENTS,  # amdgpu kernel-log events (exporter.collectors.amdgpu_log)
        c.GPU_PCIE_LINK_EVENTS,
        c.GPU_VIOLATION_RESIDENCY,
        c.GPU_VIOLATION_SAMPLES,
        c.GPU_PARTITION_INFO,
    }


def test_a_healthy_hgx_node_reports_eight_gpus_named_by_pci_key() -> None:
    col = GpuCollector(hgx_node("h200", seed="n7"), "n7")
    s = col.collect()
    assert sorted(x.labels["gpu"] for x in s if x.metric is c.GPU_UP) == [str(i) for i in range(8)]
    ids = col.identities()
    assert sorted(ids) == [f"0000:{b}:00" for b in ("18", "2a", "3a", "5d", "9a", "ab", "ba", "db")]
    assert ids["0000:5d:00"].index == "3" and ids["0000:5d:00"].name == "NVIDIA H200"
    assert one(s, c.GPU_MEMORY_TOTAL, "7") == 150_754_820_096
    assert col.read_errors.counts == {}


def test_old_driver_without_clocks_event_reasons_falls_back_to_throttle_reasons() -> None:
    nvml = hgx_node(gpus=1, function_not_found={"nvmlDeviceGetCurrentClocksEventReasons"})
    nvml.gpus[0].throttle_reasons = pynvml.nvmlClocksEventReasonHwSlowdown
    col = GpuCollector(nvml, "n1")
    for _ in range(2):  # the second cycle goes straight to the legacy call
        got = series(col.collect(), c.GPU_THROTTLE)
        assert {k[0] for k, v in got.items() if v} == {"hw_slowdown"}
    assert col.read_errors.counts == {}


def test_bytes_strings_from_older_bindings_are_decoded() -> None:
    nvml = hgx_node(gpus=1)
    gpu = nvml.gpus[0]
    gpu.name = b"NVIDIA H100 80GB HBM3"  # type: ignore[assignment]
    gpu.uuid = gpu.uuid.encode()  # type: ignore[assignment]
    [info] = [s for s in GpuCollector(nvml, "n1").collect() if s.metric is c.GPU_INFO]
    assert info.labels["name"] == "NVIDIA H100 80GB HBM3"
    assert info.labels["uuid"].startswith("GPU-")


def test_one_unreadable_nvlink_error_counter_costs_that_series_and_the_gpu_sum_only(
    busy: FakeNvml,
) -> None:
    real = busy.nvmlDeviceGetNvLinkErrorCounter

    def flaky(device, link, counter):  # type: ignore[no-untyped-def]
        if link == 5 and counter == pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT:
            raise nvml_error(pynvml.NVML_ERROR_UNKNOWN)
        return real(device, link, counter)

    busy.nvmlDeviceGetNvLinkErrorCounter = flaky  # type: ignore[method-assign]
    s = GpuCollector(busy, "n1").collect()
    errors = series(s, c.NVLINK_ERRORS)
    assert ("5", "crc_flit") not in errors and errors[("5", "replay")] == 4
    assert len(errors) == 18 * 4 - 1  # the link's other types and the other links still read
    assert series(s, c.GPU_NVLINK_ERRORS, "0") == {}
