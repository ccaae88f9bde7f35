"""Profiling on GPUs without GPM comes from a DCGM host engine when one is configured (tested
against a fake of DCGM's Python bindings); without one, the fields are absent and say why."""

from __future__ import annotations

import pytest

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from exporter.sources.dcgm import DcgmProfiling, DcgmUnavailableError, load_bindings
from simulator.nvml_fake import FakeGpuState, FakeNvml
from tests.exporter.dcgm_fake import FakeDcgm


def _ampere(dcgm: FakeDcgm | None) -> GpuCollector:
    nvml = FakeNvml([FakeGpuState.a100(0), FakeGpuState.a100(1)])
    source = DcgmProfiling("127.0.0.1:5555", dcgm.module()) if dcgm else None
    return GpuCollector(nvml, "n1", dcgm=source)


def _profiling_unavailable(samples: list[c.Sample]) -> set[str]:
    """Why profiling fields are unavailable (an A100 has no NVLink fabric info either; that
    field says so too, and is not what these tests are about)."""
    return {
        x.labels["reason"]
        for x in samples
        if x.metric is c.FIELD_UNAVAILABLE and x.labels["metric"] != c.GPU_FABRIC_INFO.name
    }


def _values(samples: list[c.Sample], gpu: str) -> dict[str, float]:
    return {s.metric.name: s.value for s in samples if s.labels.get("gpu") == gpu}


def test_an_ampere_gpu_gets_its_profiling_fields_from_dcgm() -> None:
    fake = FakeDcgm({0: {1001: 0.93, 1004: 0.41, 1005: 0.2, 1009: 1.5e9}, 1: {1004: None}})
    s = _ampere(fake).collect()
    v = _values(s, "0")
    assert v[c.GPU_GRAPHICS_ACTIVE.name] == 0.93 and v[c.GPU_TENSOR_ACTIVE.name] == 0.41
    assert v[c.GPU_PCIE_TRANSMIT_RATE.name] == 1.5e9
    assert c.GPU_TENSOR_ACTIVE.name not in _values(s, "1")  # blank in DCGM: absent here too
    assert not _profiling_unavailable(s)
    assert fake.connects == 1 and sorted(fake.watched[0][0]) == list(range(1001, 1011))


def test_one_host_engine_read_serves_every_gpu_of_a_cycle() -> None:
    fake = FakeDcgm({0: {1004: 0.5}, 1: {1004: 0.25}})
    col = _ampere(fake)
    col.collect()
    assert fake.connects == 1


def test_an_unreachable_host_engine_leaves_the_fields_absent_with_the_reason() -> None:
    fake = FakeDcgm(down=True)
    col = _ampere(fake)
    s = col.collect()
    assert _profiling_unavailable(s) == {"dcgm_unavailable"}
    assert col.read_errors.counts["dcgm"] == 1
    fake.down = False
    fake.values = {0: {1004: 0.75}}
    col.profiler._dcgm_at = -1e18  # the next cycle, past the per-cycle cache
    assert _values(col.collect(), "0")[c.GPU_TENSOR_ACTIVE.name] == 0.75


def test_without_dcgm_an_ampere_gpu_says_gpm_unsupported() -> None:
    s = _ampere(None).collect()
    assert _profiling_unavailable(s) == {"gpm_unsupported"}


def test_missing_bindings_stop_the_start_with_a_reason() -> None:
    with pytest.raises(DcgmUnavailableError, match="DCGM Python bindings not found"):
        load_bindings()
    from exporter.cli import main

    assert main(["--dcgm-hostengine", "127.0.0.1:5555", "--listen", "127.0.0.1:0"]) == 2
