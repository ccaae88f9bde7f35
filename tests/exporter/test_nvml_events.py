"""NVML XID events are drained each poll and named by PCI key; polling never raises."""

from __future__ import annotations

import pynvml

from exporter.sources.nvml_events import NvmlXidEvents
from simulator.nvml_fake import FakeEventData, hgx_node, nvml_error


def test_xid_events_are_drained_and_mapped_to_pci_keys() -> None:
    nvml = hgx_node()
    events = NvmlXidEvents(nvml)
    assert events.poll() == []  # registers every GPU
    assert nvml.push_xid(3, 79) == 1 and nvml.push_xid(0, 48) == 1 and nvml.push_xid(7, 13) == 1
    assert events.poll() == [("0000:5d:00", 79), ("0000:18:00", 48), ("0000:db:00", 13)]
    assert events.poll() == []
    assert events.read_errors.counts == {}


def test_events_before_registration_are_not_delivered() -> None:
    nvml = hgx_node(gpus=2)
    events = NvmlXidEvents(nvml)
    assert nvml.push_xid(1, 31) == 0  # nobody listening yet, as with real NVML
    assert events.poll() == []


def test_one_poll_is_bounded_and_the_rest_waits_for_the_next() -> None:
    nvml = hgx_node(gpus=1)
    events = NvmlXidEvents(nvml, max_events=2)
    events.poll()
    for xid in (13, 31, 43):
        nvml.push_xid(0, xid)
    assert [x for _, x in events.poll()] == [13, 31]
    assert [x for _, x in events.poll()] == [43]


def test_non_xid_events_are_ignored() -> None:
    nvml = hgx_node(gpus=1)
    events = NvmlXidEvents(nvml)
    events.poll()
    nvml.event_sets[0].queue.append(FakeEventData(nvml.gpus[0], pynvml.nvmlEventTypePState, 2))
    nvml.push_xid(0, 94)
    assert events.poll() == [("0000:18:00", 94)]


def test_no_driver_is_counted_and_retried_not_raised() -> None:
    nvml = hgx_node(gpus=1, init_error=nvml_error(pynvml.NVML_ERROR_DRIVER_NOT_LOADED))
    events = NvmlXidEvents(nvml)
    assert events.poll() == [] and events.poll() == []
    assert events.read_errors.counts == {"xid_events_init": 2}
    nvml.init_error = None
    events.poll()
    nvml.push_xid(0, 119)
    assert events.poll() == [("0000:18:00", 119)]


def test_a_gpu_that_fails_registration_is_retried_while_others_deliver() -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[1].failing["events"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    events = NvmlXidEvents(nvml)
    events.poll()
    assert nvml.push_xid(0, 45) == 1 and nvml.push_xid(1, 45) == 0
    assert events.poll() == [("0000:18:00", 45)]
    assert events.read_errors.counts == {"xid_events_register": 2}
    nvml.gpus[1].failing.clear()
    events.poll()
    nvml.push_xid(1, 74)
    assert events.poll() == [("0000:2a:00", 74)]


def test_gpus_without_event_support_are_not_asked_again() -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[1].unsupported.add("events")
    events = NvmlXidEvents(nvml)
    events.poll()
    nvml.gpus[1].unsupported.clear()
    events.poll()
    assert nvml.push_xid(1, 48) == 0
    assert events.read_errors.counts == {}


def test_a_broken_event_set_is_rebuilt_on_the_next_poll() -> None:
    nvml = hgx_node(gpus=1)
    events = NvmlXidEvents(nvml)
    events.poll()
    nvml.initialized = False  # driver reloaded: the wait fails with Uninitialized
    assert events.poll() == []
    assert events.read_errors.counts == {"xid_events_register": 1, "xid_events_wait": 1}
    assert events.poll() == []  # re-inits, new set, registers again
    assert len(nvml.event_sets) == 2
    nvml.push_xid(0, 79)
    assert events.poll() == [("0000:18:00", 79)]
