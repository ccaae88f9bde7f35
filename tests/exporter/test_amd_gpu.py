"""The AMD GPU collector: amdsmi's readings as the catalogue's series, failures observed softly."""

from __future__ import annotations

import pytest

from exporter import catalog as c
from exporter.catalog import MetricDef, Sample
from exporter.collectors.amd_fields import pcie_generation
from exporter.collectors.amd_gpu import AmdGpuCollector, AmdSmiUnavailableError
from exporter.sources import amdsmi_api as api
from exporter.sources.amdsmi_fake import CperRecord, FakeAmdSmi, mi300x_node


def of(samples: list[Sample], metric: MetricDef, gpu: str = "0") -> list[Sample]:
    return [s for s in samples if s.metric is metric and s.labels["gpu"] == gpu]


def one(samples: list[Sample], metric: MetricDef, gpu: str = "0", **labels: str) -> float:
    [s] = [x for x in of(samples, metric, gpu) if all(x.labels[k] == v for k, v in labels.items())]
    return s.value


def up(samples: list[Sample], gpu: str) -> tuple[float, str]:
    [s] = of(samples, c.GPU_UP, gpu)
    return s.value, s.labels["reason"]


def test_an_mi300x_node_reports_eight_gpus_with_identity_in_base_units() -> None:
    smi = mi300x_node()
    col = AmdGpuCollector(smi, "m1")
    s = col.collect()
    assert sorted(x.labels["gpu"] for x in s if x.metric is c.GPU_UP) == [str(i) for i in range(8)]
    [info] = of(s, c.GPU_INFO, "3")
    assert (
        info.labels["name"] == "AMD Instinct MI300X" and info.labels["pci_bus_id"] == "0000:65:00.0"
    )
    assert (
        info.labels["serial"] == "0x5E8D2C3A1B9F0003" and info.labels["driver_version"] == "6.10.5"
    )
    assert one(s, c.GPU_TEMPERATURE) == 45 and one(s, c.GPU_MEMORY_TEMPERATURE) == 38
    assert one(s, c.GPU_POWER) == 320 and one(s, c.GPU_POWER_LIMIT) == 750
    assert one(s, c.GPU_ENERGY) == pytest.approx(1_000_000 * 15.259e-6)
    assert one(s, c.GPU_UTILIZATION) == 0.87 and one(s, c.GPU_MEMORY_UTILIZATION) == 0.41
    assert one(s, c.GPU_SM_CLOCK) == 2.1e9 and one(s, c.GPU_MEMORY_CLOCK_MAX) == 1.3e9
    assert one(s, c.GPU_MEMORY_TOTAL) == 196_592 * 2**20
    assert one(s, c.GPU_PCIE_GENERATION) == 5 and one(s, c.GPU_PCIE_WIDTH) == 16
    assert sorted(col.identities())[0] == "0000:05:00" and col.read_errors.counts == {}


def test_ras_counts_per_block_with_deferred_errors_and_bif_named_as_the_catalogue_does() -> None:
    smi = mi300x_node(gpus=1)
    smi.gpus[0].ecc_blocks = {"UMC": {"deferred_count": 3, "uncorrectable_count": 1},
                              "PCIE_BIF": {"correctable_count": 7}}  # fmt: skip
    s = AmdGpuCollector(smi, "m1").collect()
    assert one(s, c.GPU_RAS_ERRORS, block="umc", error_type="deferred") == 3
    assert one(s, c.GPU_RAS_ERRORS, block="umc", error_type="uncorrectable") == 1
    assert one(s, c.GPU_RAS_ERRORS, block="bif", error_type="correctable") == 7
    # blocks without RAS on this GPU answer NOT_SUPPORTED: absent, not failed
    assert {x.labels["block"] for x in of(s, c.GPU_RAS_ERRORS)} == {
        "umc", "sdma", "gfx", "mmhub", "bif", "xgmi_wafl"}  # fmt: skip


def test_every_cper_record_counts_even_two_between_scrapes_which_dme_would_lose() -> None:
    smi = mi300x_node(gpus=1)
    col = AmdGpuCollector(smi, "m1")
    col.collect()
    smi.gpus[0].cper += [CperRecord("non_fatal_uncorrected", (30,)),
                         CperRecord("non_fatal_uncorrected", (30,)),
                         CperRecord("fatal", (25, 26))]  # fmt: skip
    s = col.collect()
    assert one(s, c.GPU_RAS_EVENTS, afid="30", severity="non_fatal_uncorrected") == 2
    assert one(s, c.GPU_RAS_EVENTS, afid="25", severity="fatal") == 1
    s = col.collect()  # the cursor moved on: nothing counts twice
    assert one(s, c.GPU_RAS_EVENTS, afid="30", severity="non_fatal_uncorrected") == 2


def test_more_cper_records_than_one_call_returns_are_read_on_with_the_cursor() -> None:
    smi = mi300x_node(gpus=1)
    smi.gpus[0].cper = [CperRecord("non_fatal_corrected", (3,))] * 45
    s = AmdGpuCollector(smi, "m1").collect()
    assert one(s, c.GPU_RAS_EVENTS, afid="3", severity="non_fatal_corrected") == 45
    assert smi.calls.count("amdsmi_get_gpu_cper_entries") == 3


def test_a_gpu_without_cper_support_serves_everything_else() -> None:
    smi = mi300x_node(gpus=1)
    smi.gpus[0].fail_with("amdsmi_get_gpu_cper_entries", api.STATUS_NOT_SUPPORTED)
    col = AmdGpuCollector(smi, "m1")
    s = col.collect()
    assert of(s, c.GPU_RAS_EVENTS) == [] and up(s, "0") == (1.0, "")
    col.collect()
    assert smi.calls.count("amdsmi_get_gpu_cper_entries") == 1  # absence remembered
    assert col.read_errors.counts == {}


def test_xgmi_traffic_per_link_in_bytes_and_a_dead_link_stays_flat() -> None:
    smi = mi300x_node(gpus=1)
    g = smi.gpus[0]
    col = AmdGpuCollector(smi, "m1")
    col.collect()
    g.xgmi_write_kb = [0, 100, 100, 100, 0, 100, 100, 100]
    g.xgmi_read_kb = [0, 50, 50, 50, 0, 50, 50, "N/A"]
    s = col.collect()
    assert one(s, c.GPU_XGMI_TRANSMIT, link="1") == 100 * 1024
    assert one(s, c.GPU_XGMI_TRANSMIT, link="4") == 0
    assert len(of(s, c.GPU_XGMI_RECEIVE)) == 7  # "N/A" is absent, not zero


def test_pcie_replays_recoveries_and_naks_are_counters() -> None:
    smi = mi300x_node(gpus=1)
    smi.gpus[0].pcie.update(pcie_replay_count=4, pcie_l0_to_recovery_count=2,
                            pcie_nak_received_count=9)  # fmt: skip
    s = AmdGpuCollector(smi, "m1").collect()
    assert one(s, c.GPU_PCIE_REPLAY) == 4
    assert one(s, c.GPU_PCIE_LINK_EVENTS, event="recovery") == 2
    assert one(s, c.GPU_PCIE_LINK_EVENTS, event="nak_received") == 9


@pytest.mark.parametrize(("mts", "gen"), [(2500, 1), (5000, 2), (8000, 3), (16000, 4),
                                          (32000, 5), (64000, 6), (0, None), (None, None)])  # fmt: skip
def test_pcie_generation_from_the_link_speed(mts: float | None, gen: float | None) -> None:
    assert pcie_generation(mts) == gen


def test_violation_residency_counts_and_ppt_reads_as_the_power_cap() -> None:
    smi = mi300x_node(gpus=1)
    smi.gpus[0].violation.update(acc_counter=1000, acc_ppt_pwr=400, acc_hbm_thrm=20,
                                 active_ppt_pwr=True)  # fmt: skip
    s = AmdGpuCollector(smi, "m1").collect()
    assert one(s, c.GPU_VIOLATION_SAMPLES) == 1000
    assert one(s, c.GPU_VIOLATION_RESIDENCY, cause="ppt") == 400
    assert one(s, c.GPU_VIOLATION_RESIDENCY, cause="hbm_thermal") == 20
    assert one(s, c.GPU_THROTTLE, reason="sw_power_cap") == 1
    assert one(s, c.GPU_THROTTLE, reason="sw_thermal_slowdown") == 0


def test_cpx_partitions_report_physical_sensors_on_partition_zero_only() -> None:
    smi = mi300x_node(gpus=1, partitions=8)
    col = AmdGpuCollector(smi, "m1")
    s = col.collect()
    assert len([x for x in s if x.metric is c.GPU_UP]) == 8
    parts = {x.labels["gpu"]: x.labels for x in s if x.metric is c.GPU_PARTITION_INFO}
    assert parts["0"]["compute_partition"] == "CPX" and parts["5"]["partition_id"] == "5"
    assert len(of(s, c.GPU_POWER, "0")) == 1 and of(s, c.GPU_POWER, "5") == []
    assert of(s, c.GPU_RAS_ERRORS, "5") == [] and len(of(s, c.GPU_UTILIZATION, "5")) == 1
    assert col.identities()["0000:05:00"].index == "0"  # the kernel log names partition 0


def test_a_gpu_answering_not_found_is_lost_keeps_its_identity_and_the_others_read_on() -> None:
    smi = mi300x_node(gpus=2)
    col = AmdGpuCollector(smi, "m1")
    col.collect()
    smi.gpus[1].lost = True
    s = col.collect()
    assert up(s, "1") == (0.0, "gpu_lost") and up(s, "0") == (1.0, "")
    assert of(s, c.GPU_INFO, "1")[0].labels["pci_bus_id"] == "0000:26:00.0"
    assert of(s, c.GPU_POWER, "1") == []
    smi.gpus.pop(1)  # gone from the handle list after a re-init: still reported lost
    assert up(col.collect(), "1") == (0.0, "gpu_lost")


def test_one_field_failing_costs_its_series_and_is_counted() -> None:
    smi = mi300x_node(gpus=2)
    smi.gpus[0].fail_with("amdsmi_get_power_info", api.STATUS_BUSY)
    col = AmdGpuCollector(smi, "m1")
    s = col.collect()
    assert of(s, c.GPU_POWER, "0") == [] and len(of(s, c.GPU_POWER, "1")) == 1
    assert len(of(s, c.GPU_ENERGY, "0")) == 1 and up(s, "0") == (1.0, "")
    assert col.read_errors.counts == {"power": 1}


def test_identity_failing_three_cycles_marks_the_gpu_down_with_the_reason() -> None:
    smi = mi300x_node(gpus=1)
    col = AmdGpuCollector(smi, "m1")
    col.collect()
    smi.gpus[0].fail_with("amdsmi_get_gpu_device_uuid", api.STATUS_DRM_ERROR)
    assert up(col.collect(), "0") == (1.0, "")  # debounced
    col.collect()
    assert up(col.collect(), "0") == (0.0, "amdsmi_error")


def test_no_driver_raises_a_clear_error_each_cycle_and_init_is_retried() -> None:
    smi = FakeAmdSmi(mi300x_node(gpus=1).gpus)
    smi.init_error = api.STATUS_DRIVER_NOT_LOADED
    col = AmdGpuCollector(smi, "m1")
    with pytest.raises(AmdSmiUnavailableError, match="amdgpu driver"):
        col.collect()
    smi.init_error = None
    assert up(col.collect(), "0") == (1.0, "") and smi.init_calls == 2


def test_the_fake_rejects_a_plain_int_where_amdsmi_wants_its_enum() -> None:
    smi = mi300x_node(gpus=1)
    smi.amdsmi_init()
    [h] = smi.amdsmi_get_processor_handles()
    with pytest.raises(smi.AmdSmiParameterException):
        smi.amdsmi_get_temp_metric(h, 1, 0)
    with pytest.raises(smi.AmdSmiLibraryException) as e:
        smi.gpus[0].lost = True
        smi.amdsmi_get_gpu_device_uuid(h)
    assert e.value.get_error_code() == api.STATUS_NOT_FOUND
