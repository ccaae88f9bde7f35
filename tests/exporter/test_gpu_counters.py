"""Whatever the hardware counters do (grow, reset on reload), exported GPU counters only grow.

A reset is seen as a drop between two reads; one that grows back past the old value before the
next read is invisible (as it is to Prometheus' ``rate()``), so growth may be undercounted, never
overcounted.
"""

from __future__ import annotations

import pynvml
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from simulator.nvml_fake import hgx_node

UNC_VOL = (pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, pynvml.NVML_VOLATILE_ECC)
# one step: (reload the driver first?, growth of the raw counters after it)
steps = st.lists(st.tuples(st.booleans(), st.integers(0, 10_000)), min_size=1, max_size=6)


@settings(max_examples=25, deadline=None)
@given(steps)
def test_exported_counters_never_decrease_nor_exceed_the_real_growth(
    plan: list[tuple[bool, int]],
) -> None:
    nvml = hgx_node(gpus=1)
    gpu = nvml.gpus[0]
    col = GpuCollector(nvml, "n1")
    previous: dict[tuple[str, tuple[str, ...]], float] = {}
    grown = 0
    for reload, growth in plan:
        if reload:
            gpu.reload_driver()
        gpu.ecc[UNC_VOL] += growth
        gpu.pcie_replay += growth
        gpu.nvlink_rx_bytes[0] += growth * 1024
        grown += growth
        now = {
            (s.metric.name, s.label_values): s.value
            for s in col.collect()
            if s.metric.type == "counter"
        }
        assert all(now[k] >= v for k, v in previous.items())
        previous = now
    lv = ("n1", "0", gpu.uuid)
    replay = previous[(c.GPU_PCIE_REPLAY.name, lv)]
    assert gpu.pcie_replay <= replay <= grown
    if not any(reload for reload, _ in plan):
        assert replay == grown
    assert previous[(c.GPU_ECC_ERRORS.name, (*lv, "uncorrected", "volatile"))] == replay
    assert previous[(c.NVLINK_RECEIVE.name, (*lv, "0"))] == replay * 1024


def test_a_reset_seen_as_a_drop_keeps_everything_counted_before_it() -> None:
    nvml = hgx_node(gpus=1)
    gpu = nvml.gpus[0]
    col = GpuCollector(nvml, "n1")
    lv = ("n1", "0", gpu.uuid)
    for raw, exported in ((40, 40), (55, 55), (3, 58), (10, 65)):
        if raw < gpu.pcie_replay:
            gpu.reload_driver()
        gpu.pcie_replay = raw
        [s] = [s for s in col.collect() if s.metric is c.GPU_PCIE_REPLAY]
        assert (s.label_values, s.value) == (lv, exported)
