"""Soft reads of one AMD GPU's amdsmi fields: the AMD collector's error policy in one place.

The amdsmi counterpart of :mod:`exporter.collectors.gpu_reader`. A read failing with
``AMDSMI_STATUS_NOT_SUPPORTED`` / ``NOT_YET_IMPLEMENTED`` is absence (remembered, not asked
again until amdsmi is initialised anew); ``NOT_FOUND`` means the device is gone and escapes as
:class:`AmdGpuLost` so the collector marks the whole GPU lost; any other library error, or a
binding quirk, skips that series and is counted in :class:`ReadErrors`. A value the library
marks unsupported arrives as ``"N/A"`` and is read as absent by :func:`number`.
Status codes: ``include/amd_smi/amdsmi.h`` (ROCm/amdsmi).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from exporter.collectors.base import ReadErrors
from exporter.sources import amdsmi_api as api
from exporter.sources.amdsmi_api import AmdSmiApi, error_code

T = TypeVar("T")

ABSENT = frozenset({api.STATUS_NOT_SUPPORTED, api.STATUS_NOT_YET_IMPLEMENTED})
LOST = frozenset({api.STATUS_NOT_FOUND})


class AmdGpuLost(Exception):
    """amdsmi answered NOT_FOUND for a handle it enumerated: the GPU is off the bus."""


def number(v: Any) -> float | None:
    """A reading as a float, or None for amdsmi's ``"N/A"`` (and anything not a number)."""
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return float(v)
    return None


class AmdReader:
    """Reads fields of one GPU for one cycle; ``unsupported`` outlives the cycle."""

    def __init__(
        self, smi: AmdSmiApi, gpu: str, errors: ReadErrors, unsupported: set[Hashable]
    ) -> None:
        self.smi = smi
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
        except self.smi.AmdSmiLibraryException as e:
            code = error_code(e)
            if code in LOST:
                raise AmdGpuLost(str(e)) from e
            if code in ABSENT:
                self.unsupported.add(key)
            else:
                self.errors.add(what)
        except Exception:  # a parameter error or binding quirk costs one series, not the GPU
            self.errors.add(what)
        return None

    def field(self, what: str, fn: Callable[..., dict[str, Any]], *args: Any) -> dict[str, Any]:
        """A dictionary-returning read; {} when absent or failed."""
        got = self.read(what, fn, *args)
        return got if isinstance(got, dict) else {}

    def skip(self, what: str, scope: Hashable = None) -> bool:
        return (self.gpu, what, scope) in self.unsupported
