"""XIDs from NVML events: the fallback XID source when the kernel log cannot be read.

Sits beside the kernel-log reader, under the XID counting: the exporter polls it each cycle
and counts the ``(pci_key, xid)`` pairs it returns into ``catalog.GPU_XID_ERRORS``.
NVML delivers ``nvmlEventTypeXidCriticalError`` events with the XID number in ``eventData``
(https://docs.nvidia.com/deploy/nvml-api/group__nvmlEvents.html). Events are only queued for
GPUs registered on an event set, so registration is retried each poll until every GPU is in.
Observing never raises: failures are counted in ``read_errors`` and retried next poll.
"""

from __future__ import annotations

import ctypes
from typing import Any

import pynvml

from exporter.collectors.base import ReadErrors
from exporter.sources.protocols import NvmlApi, pci_key

XID_EVENT = pynvml.nvmlEventTypeXidCriticalError


def _handle_id(handle: Any) -> int:
    """A key for an NVML handle: the device pointer for real ctypes handles, else identity.

    Event data carries its own ctypes handle object for the device, which does not compare
    equal to the one ``nvmlDeviceGetHandleByIndex`` returned; the address they hold does.
    """
    try:
        return int(ctypes.cast(handle, ctypes.c_void_p).value or 0) or id(handle)
    except (ctypes.ArgumentError, TypeError):
        return id(handle)


class NvmlXidEvents:
    """Implements :class:`exporter.sources.protocols.XidEventSource` over NVML events."""

    def __init__(
        self, nvml: NvmlApi, *, read_errors: ReadErrors | None = None, max_events: int = 1000
    ) -> None:
        self.nvml = nvml
        self.read_errors = read_errors if read_errors is not None else ReadErrors()
        self.max_events = max_events  # bound one poll; the rest waits in NVML's queue
        self._initialized = False
        self._event_set: Any = None
        self._registered: dict[int, str] = {}  # NVML index -> pci key
        self._by_handle: dict[int, str] = {}  # handle id -> pci key
        self._unsupported: set[int] = set()

    def poll(self) -> list[tuple[str, int]]:
        """XIDs raised since the last poll, as ``(pci_key, xid)``; never raises."""
        if not self._ready():
            return []
        self._register_all()
        return self._drain()

    def _ready(self) -> bool:
        try:
            if not self._initialized:
                self.nvml.nvmlInit()  # reference-counted by NVML; harmless beside the collector
                self._initialized = True
            if self._event_set is None:
                self._event_set = self.nvml.nvmlEventSetCreate()
        except pynvml.NVMLError:
            self.read_errors.add("xid_events_init")
            self._initialized = False
            return False
        return True

    def _register_all(self) -> None:
        try:
            count = self.nvml.nvmlDeviceGetCount()
        except pynvml.NVMLError:
            self.read_errors.add("xid_events_register")
            return
        for index in range(count):
            if index not in self._registered and index not in self._unsupported:
                self._register(index)

    def _register(self, index: int) -> None:
        try:
            handle = self.nvml.nvmlDeviceGetHandleByIndex(index)
            key = pci_key(_text(self.nvml.nvmlDeviceGetPciInfo(handle).busId))
            self.nvml.nvmlDeviceRegisterEvents(handle, XID_EVENT, self._event_set)
        except pynvml.NVMLError_NotSupported:
            self._unsupported.add(index)  # e.g. GPUs without event support: don't ask again
            return
        except (pynvml.NVMLError, ValueError):
            self.read_errors.add("xid_events_register")
            return
        self._registered[index] = key
        self._by_handle[_handle_id(handle)] = key

    def _drain(self) -> list[tuple[str, int]]:
        out: list[tuple[str, int]] = []
        for _ in range(self.max_events):
            try:
                data = self.nvml.nvmlEventSetWait_v2(self._event_set, 0)
            except pynvml.NVMLError_Timeout:
                break  # queue empty
            except pynvml.NVMLError:
                self.read_errors.add("xid_events_wait")
                self._reset()  # e.g. driver reloaded: the set is gone; rebuild next poll
                break
            if data.eventType & XID_EVENT:
                key = self._key_of(data.device)
                if key is not None:
                    out.append((key, int(data.eventData)))
        return out

    def _key_of(self, device: Any) -> str | None:
        key = self._by_handle.get(_handle_id(device))
        if key is not None:
            return key
        try:
            return pci_key(_text(self.nvml.nvmlDeviceGetPciInfo(device).busId))
        except (pynvml.NVMLError, ValueError):
            self.read_errors.add("xid_events_device")
            return None

    def _reset(self) -> None:
        self._event_set = None
        self._initialized = False
        self._registered.clear()
        self._by_handle.clear()
        self._unsupported.clear()


def _text(v: Any) -> str:
    return v.decode(errors="replace") if isinstance(v, bytes) else str(v)
