"""Soft reads of one GPU's NVML fields: the GPU collector's error policy in one place.

Sits between :class:`exporter.collectors.gpu.GpuCollector` and the NVML seam. Each read is
wrapped so that "not supported" skips the series silently (and is remembered, so the GPU is
not asked again until NVML is re-initialised), any other NVML error skips the series and is
counted in :class:`ReadErrors`, and ``GpuIsLost`` escapes so the collector can mark the whole
GPU lost. NVML error semantics: https://docs.nvidia.com/deploy/nvml-api/group__nvmlReturn.html
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

import pynvml

from exporter.collectors.base import ReadErrors

T = TypeVar("T")

# Absence, not failure: NOT_SUPPORTED (this GPU has no such counter), INVALID_ARGUMENT (per-link
# reads of a link the GPU does not have; nvml.h: "link is invalid"), FUNCTION_NOT_FOUND (a new
# binding calling an entry point the installed driver predates).
ABSENT = (
    pynvml.NVML_ERROR_NOT_SUPPORTED,
    pynvml.NVML_ERROR_INVALID_ARGUMENT,
    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
)


def is_lost(e: BaseException) -> bool:
    return isinstance(e, pynvml.NVMLError_GpuIsLost)


def text(v: Any) -> str:
    """Older bindings return ``bytes`` for strings (no ``convertStrBytes``); decode them."""
    if isinstance(v, bytes):
        return v.decode(errors="replace").rstrip("\x00")
    return str(v)


def field_number(fv: Any) -> float:
    """The number in a ``c_nvmlFieldValue_t``, read from the union member its type names."""
    member = {
        pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
        pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
        pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
    }.get(fv.valueType, "ullVal")
    return float(getattr(fv.value, member))


class FieldReader:
    """Reads fields of one GPU for one cycle; ``unsupported`` outlives the cycle."""

    def __init__(self, gpu: str, errors: ReadErrors, unsupported: set[Hashable]) -> None:
        self.gpu = gpu
        self.errors = errors
        self.unsupported = unsupported

    def read(self, what: str, fn: Callable[..., T], *args: Any, scope: Hashable = None) -> T | None:
        """``fn(*args)``, or None when the field is absent or failed (failure counted)."""
        key = (self.gpu, what, scope)
        if key in self.unsupported:
            return None
        try:
            return fn(*args)
        except pynvml.NVMLError as e:
            self.failed(what, e, scope)
        except Exception:  # a binding quirk (ctypes, odd value) costs one series, not the GPU
            self.errors.add(what)
        return None

    def failed(self, what: str, e: pynvml.NVMLError, scope: Hashable = None) -> None:
        """Classify an NVML error: lost escapes, absence is remembered, the rest is counted."""
        if is_lost(e):
            raise e
        if e.value in ABSENT:
            self.unsupported.add((self.gpu, what, scope))
        else:
            self.errors.add(what)

    def skip(self, what: str, scope: Hashable = None) -> bool:
        return (self.gpu, what, scope) in self.unsupported
