"""The collector and event source run on the real ``pynvml`` module, GPU or not.

On a machine without the NVIDIA driver (CI, laptops) the real binding raises
``NVMLError_LibraryNotFound`` from ``nvmlInit``: the collector must turn that into one clear
error per cycle and the event source into a counted, retried failure. On a GPU machine the
same tests check that every GPU reports ``gpu_up`` and is named by a PCI key.
"""

from __future__ import annotations

import pynvml
import pytest

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector, NvmlUnavailableError
from exporter.sources.nvml_events import NvmlXidEvents


def _driver_present() -> bool:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


def test_gpu_collector_on_the_real_binding_reports_gpus_or_a_clear_no_driver_error() -> None:
    col = GpuCollector(pynvml, "real")
    try:
        if not _driver_present():
            for _ in range(2):  # every cycle, not once
                with pytest.raises(NvmlUnavailableError, match="is the NVIDIA driver installed"):
                    col.collect()
            return
        samples = col.collect()
        ups = [s for s in samples if s.metric is c.GPU_UP]
        assert ups and all(s.value == 1.0 for s in ups)
        assert len(col.identities()) == len(ups)
    finally:
        col.close()


def test_xid_events_on_the_real_binding_never_raise() -> None:
    events = NvmlXidEvents(pynvml)
    assert events.poll() == []
    if not _driver_present():
        assert events.read_errors.counts == {"xid_events_init": 1}
