"""The amdsmi seam: the part of AMD's ``amdsmi`` Python module the AMD GPU collector calls.

Sits where :class:`~exporter.sources.protocols.NvmlApi` sits for NVIDIA: the real
implementation is the ``amdsmi`` module itself (PyPI ``amdsmi``, a ctypes wrapper that loads
ROCm's ``libamd_smi.so`` when imported), the fake is :mod:`exporter.sources.amdsmi_fake`.
Names, arguments and returned dictionaries are amdsmi's (ROCm/amdsmi, ``py-interface/
amdsmi_interface.py``; https://rocm.docs.amd.com/projects/amdsmi/). Errors are
``amdsmi.AmdSmiLibraryException`` carrying ``err_code`` (an ``amdsmi_status_t`` of
``include/amd_smi/amdsmi.h``); the module exports the class, so the collector catches the one
its seam names (``api.AmdSmiLibraryException``) and works with the fake's class alike.

Values the library marks unsupported (an all-ones integer) come back as the string ``"N/A"``
(``_validate_if_max_uint``): a field, not a failure, is absent then.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from typing import Any, Protocol

# amdsmi_status_t (include/amd_smi/amdsmi.h); the collector reads these codes
STATUS_INVAL = 1
STATUS_NOT_SUPPORTED = 2
STATUS_NOT_YET_IMPLEMENTED = 3
STATUS_FAIL_LOAD_MODULE = 4
STATUS_DRM_ERROR = 6
STATUS_API_FAILED = 7
STATUS_NO_PERM = 10
STATUS_IO = 12
STATUS_FILE_ERROR = 14
STATUS_INIT_ERROR = 18
STATUS_BUSY = 30
STATUS_NOT_FOUND = 31
STATUS_NOT_INIT = 32
STATUS_DRIVER_NOT_LOADED = 34
STATUS_NO_DATA = 40
STATUS_MORE_DATA = 39  # amdsmi_get_gpu_cper_entries: more records than fit; read on

CPER_MASK_ALL = 0xFFFFFFFF  # every CPER severity
MODULE = "amdsmi"
# the enum members the collector passes (amdsmi checks isinstance against its IntEnums, so
# they are read from the module: api.AmdSmiTemperatureType.HOTSPOT, ...)
TEMPERATURE_GPU = "HOTSPOT"  # = JUNCTION on MI200/MI300; EDGE where a GPU has no hotspot
TEMPERATURE_EDGE = "EDGE"
TEMPERATURE_MEMORY = "VRAM"
CLOCK_GFX, CLOCK_MEM = "GFX", "MEM"


class AmdSmiApi(Protocol):
    """The amdsmi functions the collector calls, with amdsmi's names and arguments."""

    # read-only members: the module's classes (amdsmi checks enum arguments with isinstance)
    @property
    def AmdSmiException(self) -> type[Exception]: ...
    @property
    def AmdSmiLibraryException(self) -> type[Exception]: ...  # .err_code
    @property
    def AmdSmiInitFlags(self) -> Any: ...  # INIT_AMD_GPUS
    @property
    def AmdSmiTemperatureType(self) -> Any: ...  # EDGE, HOTSPOT (JUNCTION), VRAM
    @property
    def AmdSmiTemperatureMetric(self) -> Any: ...  # CURRENT
    @property
    def AmdSmiClkType(self) -> Any: ...  # SYS (= GFX), MEM
    @property
    def AmdSmiGpuBlock(self) -> Any: ...  # UMC, ..., XGMI_WAFL, ..., MPIO

    def amdsmi_init(self, flag: Any = ...) -> None: ...
    def amdsmi_shut_down(self) -> None: ...
    def amdsmi_get_processor_handles(self) -> list[Any]: ...
    def amdsmi_get_gpu_device_uuid(self, processor_handle: Any) -> str: ...
    def amdsmi_get_gpu_device_bdf(self, processor_handle: Any) -> str: ...
    def amdsmi_get_gpu_asic_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_board_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_vbios_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_driver_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_kfd_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_compute_partition(self, processor_handle: Any) -> str: ...
    def amdsmi_get_gpu_memory_partition(self, processor_handle: Any) -> str: ...
    def amdsmi_get_temp_metric(
        self, processor_handle: Any, sensor_type: Any, metric: Any
    ) -> int: ...  # Celsius
    # current_socket_power / average_socket_power W ("N/A" where absent)
    def amdsmi_get_power_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_power_cap_info(self, processor_handle: Any) -> dict[str, Any]: ...  # uW
    # energy_accumulator ticks of counter_resolution uJ
    def amdsmi_get_energy_count(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_activity(self, processor_handle: Any) -> dict[str, Any]: ...  # %
    def amdsmi_get_clock_info(self, processor_handle: Any, clock_type: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_vram_usage(self, processor_handle: Any) -> dict[str, Any]: ...  # MB
    def amdsmi_get_gpu_total_ecc_count(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_ecc_count(self, processor_handle: Any, block: Any) -> dict[str, Any]: ...
    def amdsmi_get_pcie_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_gpu_metrics_info(self, processor_handle: Any) -> dict[str, Any]: ...
    def amdsmi_get_violation_status(self, processor_handle: Any) -> dict[str, Any]: ...
    # (entries by index, next cursor, raw records, status); ROCm 6.4+
    def amdsmi_get_gpu_cper_entries(
        self, processor_handle: Any, severity_mask: int, buffer_size: int = ..., cursor: int = ...
    ) -> tuple[dict[int, dict[str, Any]], int, list[dict[str, Any]], int]: ...
    def amdsmi_get_afids_from_cper(self, cper_afid_data: Any) -> tuple[list[int], int]: ...


def amdsmi_installed() -> bool:
    """True when the ``amdsmi`` module can be found (cheap: the library is not loaded)."""
    if sys.modules.get(MODULE) is not None:
        return True
    try:
        return importlib.util.find_spec(MODULE) is not None
    except (ImportError, ValueError):
        return False


def load_amdsmi() -> AmdSmiApi:
    """The real ``amdsmi`` module; OSError/ImportError when ROCm's library cannot load."""
    module: Any = importlib.import_module(MODULE)
    return module  # type: ignore[no-any-return]


def error_code(e: BaseException) -> int | None:
    """The ``amdsmi_status_t`` an ``AmdSmiLibraryException`` carries (None for other errors)."""
    code = getattr(e, "err_code", None)
    return abs(int(code)) if isinstance(code, int) else None
