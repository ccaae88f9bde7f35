"""NVLink fabric state per GPU: nvmlDeviceGetGpuFabricInfoV -> gpu_fabric_info and
gpu_fabric_health, or exporter_field_unavailable saying why there is none.

Shapes: the struct and constants are nvidia-ml-py's (``c_nvmlGpuFabricInfo_v2_t``,
NVML_GPU_FABRIC_STATE_*, NVML_GPU_FABRIC_HEALTH_MASK_*, from nvml.h); the cluster UUID and clique
id are the values gpud's tests record for an NVL72 GPU (components/accelerator/nvidia/
fabric-manager/fabric_state_test.go, github.com/leptonai/gpud at 4a8de33).
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.gpu_fabric import decode_health
from simulator.nvml_fake import FakeFabric, FakeNvml, fabric_mask, hgx_node

CLUSTER = "9c6f5af3-53bf-49b5-a436-b66766c413c3"
CLIQUE = 4026


def _collect(fabric: FakeFabric | None, **kw: object) -> tuple[FakeNvml, list]:
    nvml = hgx_node("h100", gpus=1, **kw)  # type: ignore[arg-type]
    nvml.gpus[0].fabric = fabric
    return nvml, GpuCollector(nvml, "n1").collect()


def _info(samples: list) -> list[dict[str, str]]:
    return [dict(s.labels) for s in samples if s.metric is c.GPU_FABRIC_INFO]


def _health(samples: list) -> dict[str, float]:
    return {s.labels["check"]: s.value for s in samples if s.metric is c.GPU_FABRIC_HEALTH}


def _unavailable(samples: list) -> list[str]:
    return [
        s.labels["reason"]
        for s in samples
        if s.metric is c.FIELD_UNAVAILABLE and s.labels["metric"] == c.GPU_FABRIC_INFO.name
    ]


@pytest.mark.parametrize(
    ("state", "label"),
    [
        (pynvml.NVML_GPU_FABRIC_STATE_NOT_STARTED, "not_started"),
        (pynvml.NVML_GPU_FABRIC_STATE_IN_PROGRESS, "in_progress"),
        (pynvml.NVML_GPU_FABRIC_STATE_COMPLETED, "completed"),
    ],
)
def test_each_fabric_state_is_the_state_label_with_cluster_and_clique(
    state: int, label: str
) -> None:
    _, samples = _collect(FakeFabric(state=state, cluster_uuid=CLUSTER, clique_id=CLIQUE))
    (info,) = _info(samples)
    assert (info["state"], info["status"]) == (label, "success")
    assert (info["cluster_uuid"], info["clique_id"]) == (CLUSTER, str(CLIQUE))
    assert _unavailable(samples) == []


def test_a_state_of_not_supported_is_an_unavailable_field_not_an_info_series() -> None:
    _, samples = _collect(FakeFabric(state=pynvml.NVML_GPU_FABRIC_STATE_NOT_SUPPORTED))
    assert _info(samples) == [] and _unavailable(samples) == ["fabric_unsupported"]


def test_a_failed_registration_names_the_nvml_return_in_status() -> None:
    fab = FakeFabric(state=pynvml.NVML_GPU_FABRIC_STATE_COMPLETED,
                     status=pynvml.NVML_ERROR_NOT_READY)  # fmt: skip
    (info,) = _info(_collect(fab)[1])
    assert info["status"] == "not_ready"


def test_a_zero_cluster_uuid_is_an_empty_label() -> None:
    (info,) = _info(_collect(FakeFabric())[1])
    assert info["cluster_uuid"] == "" and info["clique_id"] == "0"


CHECK_FIELDS = {
    "degraded_bandwidth": "DEGRADED_BW",
    "route_recovery": "ROUTE_RECOVERY",
    "route_unhealthy": "ROUTE_UNHEALTHY",
    "access_timeout_recovery": "ACCESS_TIMEOUT_RECOVERY",
}


@pytest.mark.parametrize("check", sorted(CHECK_FIELDS))
def test_each_health_bit_set_is_one_and_only_that_check(check: str) -> None:
    field = CHECK_FIELDS[check]
    mask = fabric_mask(**{field: getattr(pynvml, f"NVML_GPU_FABRIC_HEALTH_MASK_{field}_TRUE")})
    health = _health(_collect(FakeFabric(health_mask=mask))[1])
    assert health[check] == 1.0
    assert {k for k, v in health.items() if v} == {check}


@pytest.mark.parametrize("check", sorted(CHECK_FIELDS))
def test_a_health_bit_the_driver_does_not_report_has_no_series(check: str) -> None:
    mask = fabric_mask(**{CHECK_FIELDS[check]: 0})  # NOT_SUPPORTED
    health = _health(_collect(FakeFabric(health_mask=mask))[1])
    assert check not in health and health  # the others are still there


def test_the_global_fabric_manager_disconnected_bit() -> None:
    mask = fabric_mask(GFM_STATE=pynvml.NVML_GPU_FABRIC_HEALTH_MASK_GFM_STATE_DISCONNECTED)
    assert decode_health(mask)["gfm_disconnected"] == 1.0
    assert decode_health(fabric_mask())["gfm_disconnected"] == 0.0


@pytest.mark.parametrize(
    "config",
    [
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INCORRECT_SYSGUID,
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_NO_PARTITION,
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_INSUFFICIENT_NVLINKS,
        pynvml.NVML_GPU_FABRIC_HEALTH_MASK_INCORRECT_CONFIGURATION_GPU_STATE_INVALID,
    ],
)
def test_any_incorrect_configuration_sets_that_check(config: int) -> None:
    assert (
        decode_health(fabric_mask(INCORRECT_CONFIGURATION=config))["incorrect_configuration"] == 1
    )
    assert decode_health(fabric_mask())["incorrect_configuration"] == 0


def test_an_all_zero_mask_reports_no_health_checks() -> None:
    assert decode_health(0) == {}


def test_a_gpu_without_fabric_says_so_once_and_is_not_asked_again() -> None:
    nvml = hgx_node("a100", gpus=1)
    calls = []
    real = nvml.nvmlDeviceGetGpuFabricInfoV
    nvml.nvmlDeviceGetGpuFabricInfoV = lambda h, i: calls.append(1) or real(h, i)  # type: ignore[method-assign]
    col = GpuCollector(nvml, "n1")
    for _ in range(3):
        samples = col.collect()
        assert _unavailable(samples) == ["fabric_unsupported"] and _info(samples) == []
    assert len(calls) == 1


def test_a_driver_without_the_entry_point_is_driver_too_old() -> None:
    _, samples = _collect(FakeFabric(), function_not_found={"nvmlDeviceGetGpuFabricInfoV"})
    assert _unavailable(samples) == ["driver_too_old"] and _info(samples) == []


def test_a_transient_fabric_failure_costs_the_series_and_counts_a_read_error() -> None:
    nvml = hgx_node("h100", gpus=1)
    nvml.gpus[0].failing["fabric"] = pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    col = GpuCollector(nvml, "n1")
    samples = col.collect()
    assert _info(samples) == [] and _unavailable(samples) == []
    assert any(s.metric is c.GPU_UP and s.value == 1 for s in samples)
    del nvml.gpus[0].failing["fabric"]
    assert len(_info(col.collect())) == 1  # asked again next cycle


def test_the_fake_rejects_a_struct_without_a_known_version_like_the_library() -> None:
    nvml = hgx_node("h100", gpus=1)
    nvml.nvmlInit()
    wrong = pynvml.c_nvmlGpuFabricInfo_v2_t()
    wrong.version = 1
    with pytest.raises(pynvml.NVMLError_ArgumentVersionMismatch):
        nvml.nvmlDeviceGetGpuFabricInfoV(nvml.gpus[0], ctypes.byref(wrong))
