"""Profiling fields from a DCGM host engine, through DCGM's own Python bindings (optional).

Sits beside NVML under :class:`exporter.collectors.gpu_profiling.GpmProfiler`: GPUs that GPM
cannot serve (Ampere and older) get their DCP fields from DCGM when ``--dcgm-hostengine`` names
a running ``nv-hostengine``. The bindings (``pydcgm``, ``dcgm_structs``, ``dcgm_fields``) ship
with DCGM under /usr/local/dcgm/bindings/python3, not on PyPI, so they are imported only when
asked for, and the module is injectable: tests pass a fake of the same API shape.

API used (DCGM Python bindings): ``pydcgm.DcgmHandle(ipAddress=..., opMode=...)``,
``pydcgm.DcgmGroup(handle, groupName=..., groupType=DCGM_GROUP_DEFAULT)``,
``pydcgm.DcgmFieldGroup(handle, name=..., fieldIds=[...])``,
``group.samples.WatchFields(fieldGroup, updateFreq_us, maxKeepAge_s, maxKeepSamples)`` and
``group.samples.GetLatest_v2(fieldGroup).values[entityGroup][gpuId][fieldId]`` -> values with
``.value`` and ``.isBlank``. Field ids: dcgm_fields.h (DCGM_FI_PROF_* 1001-1010).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from exporter import catalog as c
from exporter.catalog import MetricDef

BINDINGS_DIR = "/usr/local/dcgm/bindings/python3"
DCGM_FE_GPU = 1  # dcgm_fields.DCGM_FE_GPU: the entity group of whole GPUs
# DCGM field id -> catalogue metric, factor to the catalogue's unit (DCP ratios are 0..1 already)
FIELDS: Mapping[int, tuple[MetricDef, float]] = {
    1001: (c.GPU_GRAPHICS_ACTIVE, 1.0),  # DCGM_FI_PROF_GR_ENGINE_ACTIVE
    1002: (c.GPU_SM_ACTIVE, 1.0),  # DCGM_FI_PROF_SM_ACTIVE
    1003: (c.GPU_SM_OCCUPANCY, 1.0),  # DCGM_FI_PROF_SM_OCCUPANCY
    1004: (c.GPU_TENSOR_ACTIVE, 1.0),  # DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    1005: (c.GPU_DRAM_ACTIVE, 1.0),  # DCGM_FI_PROF_DRAM_ACTIVE
    1006: (c.GPU_FP64_PIPE_ACTIVE, 1.0),  # DCGM_FI_PROF_PIPE_FP64_ACTIVE
    1007: (c.GPU_FP32_PIPE_ACTIVE, 1.0),  # DCGM_FI_PROF_PIPE_FP32_ACTIVE
    1008: (c.GPU_FP16_PIPE_ACTIVE, 1.0),  # DCGM_FI_PROF_PIPE_FP16_ACTIVE
    1009: (c.GPU_PCIE_TRANSMIT_RATE, 1.0),  # DCGM_FI_PROF_PCIE_TX_BYTES (bytes/s)
    1010: (c.GPU_PCIE_RECEIVE_RATE, 1.0),  # DCGM_FI_PROF_PCIE_RX_BYTES (bytes/s)
}


class DcgmUnavailableError(OSError):
    """The bindings are not installed, or the host engine cannot be reached."""


def load_bindings() -> Any:
    """The bindings' classes and constants in one namespace, the shape :class:`DcgmProfiling`
    uses (DcgmUnavailableError with the reason when they are missing)."""
    if BINDINGS_DIR not in sys.path:
        sys.path.append(BINDINGS_DIR)
    try:
        pydcgm = importlib.import_module("pydcgm")
        structs = importlib.import_module("dcgm_structs")
    except ImportError as e:
        raise DcgmUnavailableError(
            f"DCGM Python bindings not found ({e}); install DCGM (datacenter-gpu-manager), "
            f"whose bindings live in {BINDINGS_DIR}"
        ) from e
    return SimpleNamespace(
        DcgmHandle=pydcgm.DcgmHandle,
        DcgmGroup=pydcgm.DcgmGroup,
        DcgmFieldGroup=pydcgm.DcgmFieldGroup,
        DCGM_OPERATION_MODE_AUTO=structs.DCGM_OPERATION_MODE_AUTO,
        DCGM_GROUP_DEFAULT=structs.DCGM_GROUP_DEFAULT,
    )


class DcgmProfiling:
    """Watches the DCP fields on every GPU of one host engine and reads the latest values."""

    def __init__(self, address: str, pydcgm: Any | None = None, update_s: float = 1.0) -> None:
        self.address = address
        self._pydcgm = pydcgm
        self._update_s = update_s
        self._group: Any = None
        self._fields: Any = None

    def latest(self) -> dict[str, list[tuple[MetricDef, float]]]:
        """GPU index -> (metric, value) of every non-blank DCP field (raises when unreachable)."""
        if self._group is None:
            self._connect()
        try:
            values = self._group.samples.GetLatest_v2(self._fields).values
        except Exception as e:  # a restarted host engine: reconnect on the next call
            self._group = None
            raise DcgmUnavailableError(f"DCGM GetLatest failed: {e}") from e
        out: dict[str, list[tuple[MetricDef, float]]] = {}
        for gpu_id, by_field in values.get(DCGM_FE_GPU, {}).items():
            for field_id, samples in by_field.items():
                if field_id not in FIELDS or not samples or samples[-1].isBlank:
                    continue
                metric, factor = FIELDS[field_id]
                out.setdefault(str(gpu_id), []).append((metric, float(samples[-1].value) * factor))
        return out

    def _connect(self) -> None:
        m = self._pydcgm if self._pydcgm is not None else load_bindings()
        try:
            handle = m.DcgmHandle(ipAddress=self.address, opMode=m.DCGM_OPERATION_MODE_AUTO)
            group = m.DcgmGroup(handle, groupName="gpuwarden", groupType=m.DCGM_GROUP_DEFAULT)
            fields = m.DcgmFieldGroup(handle, name="gpuwarden-dcp", fieldIds=list(FIELDS))
            group.samples.WatchFields(fields, int(self._update_s * 1e6), 3600.0, 0)
        except Exception as e:
            raise DcgmUnavailableError(f"DCGM host engine {self.address}: {e}") from e
        self._group, self._fields = group, fields
