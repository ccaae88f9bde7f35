"""dcgm-exporter's naming generations: how each release names and scales the fields that
:mod:`exporter.catalog` maps in its 4.8 names (``DcgmField``). Pure data, a leaf beside the
catalogue: the exporter's ``--compat dcgm:<version>`` renders with it, the analyzer's dcgm
reader may read with it (``to_native``), both from this one table.

Generations (fixtures/dcgm-exporter/README.md and docs/dcgm-generations.md have the sources):

- ``4.8``: 3.x and 4.0-4.8 (tags up to 4.5.3-4.8.2): MHz, %, MiB, mJ, ns; driver label
  ``DCGM_FI_DRIVER_VERSION``. The catalogue's names. Plain ``--compat dcgm`` is this one,
  what community dashboards (Grafana 12239) and most running fleets read.
- ``4.9``: DCGM's canonical field names (DCGM 4.6.1's field header, vendored as facts in
  fixtures/dcgm/dcgm-4.6.1-field-names.tsv; tests/exporter/test_dcgm_generations.py checks
  this table against it). A renamed field that keeps its field id (an alias: GPU_UTIL_RATIO,
  BOARD_POWER_WATTS, PAGE_RETIRED_*, the NVLink ``*_ERROR_TOTAL``, ...) keeps its value and
  unit; only the fields DCGM gave a new base-unit id (SM/MEMORY_CLOCK_HERTZ, Hz;
  GPU_ENERGY_JOULES_TOTAL, J) change unit. Driver label ``DCGM_FI_SYSTEM_DRIVER_VERSION``.
  Which dcgm-exporter release adopted these names (4.9.0, per the project's release-note
  summary) is assumed, not sourced.
- ``4.10``: the same table as 4.9: no 4.10-only rename (such as ``*_BYTES_PER_SECOND``) has a
  source; kept as a generation name so ``dcgm:4.10`` and readers stay valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.catalog import DCGM_DRIVER_LABEL, DCGM_LAST_XID, dcgm_fields

GENERATIONS = ("4.8", "4.9", "4.10")
DEFAULT = "4.8"  # plain ``--compat dcgm``
MIB = 1024.0 * 1024.0  # kept for readers: the framebuffer fields stay MiB in every generation


@dataclass(frozen=True)
class Rename:
    """A 4.8 field in a later generation: value there = value in 4.8's unit * ``factor``.
    ``integer``: DCGM stores it as int64 (printed without a fraction); None: as in 4.8."""

    name: str
    factor: float = 1.0
    unit: str = ""  # the new unit, for documentation and readers: hertz, ratio, bytes, ...
    integer: bool | None = None


_4_9: dict[str, Rename] = {  # DCGM 4.6.1's canonical name of each catalogue dcgm field
    # new field ids (base units): the value changes unit
    "DCGM_FI_DEV_SM_CLOCK": Rename("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e6, "hertz", True),
    "DCGM_FI_DEV_MEM_CLOCK": Rename("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1e6, "hertz", True),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Rename(
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1e-3, "joules", True
    ),
    # aliases (same field id): the value and its unit are unchanged
    "DCGM_FI_DEV_GPU_TEMP": Rename("DCGM_FI_DEV_GPU_TEMP_CELSIUS"),
    "DCGM_FI_DEV_MEMORY_TEMP": Rename("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS"),
    "DCGM_FI_DEV_POWER_USAGE": Rename("DCGM_FI_DEV_BOARD_POWER_WATTS"),
    "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": Rename("DCGM_FI_DEV_BOARD_POWER_LIMIT_ENFORCED_WATTS"),
    "DCGM_FI_DEV_GPU_UTIL": Rename("DCGM_FI_DEV_GPU_UTIL_RATIO"),  # id 203: still 0-100
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Rename("DCGM_FI_DEV_PCIE_REPLAY_TOTAL"),
    DCGM_LAST_XID.name: Rename("DCGM_FI_DEV_XID_ERROR"),
    "DCGM_FI_DEV_RETIRED_SBE": Rename("DCGM_FI_DEV_PAGE_RETIRED_SBE_TOTAL"),
    "DCGM_FI_DEV_RETIRED_DBE": Rename("DCGM_FI_DEV_PAGE_RETIRED_DBE_TOTAL"),
    "DCGM_FI_DEV_RETIRED_PENDING": Rename("DCGM_FI_DEV_PAGE_RETIRED_PENDING"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Rename("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Rename("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": Rename("DCGM_FI_DEV_ROW_REMAP_FAILED"),
    "DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL": Rename("DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_TOTAL"),
    "DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL": Rename("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_TOTAL"),
    "DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL": Rename("DCGM_FI_DEV_NVLINK_REPLAY_ERROR_TOTAL"),
    "DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL": Rename("DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_TOTAL"),
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": Rename("DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Rename("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO"),
    "DCGM_FI_PROF_SM_ACTIVE": Rename("DCGM_FI_PROF_SM_UTIL_RATIO"),
    "DCGM_FI_PROF_SM_OCCUPANCY": Rename("DCGM_FI_PROF_SM_OCCUPANCY_RATIO"),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Rename("DCGM_FI_PROF_TENSOR_UTIL_RATIO"),
    "DCGM_FI_PROF_DRAM_ACTIVE": Rename("DCGM_FI_PROF_DRAM_UTIL_RATIO"),
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": Rename("DCGM_FI_PROF_FP64_UTIL_RATIO"),
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": Rename("DCGM_FI_PROF_FP32_UTIL_RATIO"),
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": Rename("DCGM_FI_PROF_FP16_UTIL_RATIO"),
}  # fmt: skip
_4_10: dict[str, Rename] = dict(_4_9)  # no sourced 4.10-only rename
RENAMES: dict[str, dict[str, Rename]] = {"4.8": {}, "4.9": _4_9, "4.10": _4_10}
DRIVER_LABEL = {"4.8": DCGM_DRIVER_LABEL, "4.9": "DCGM_FI_SYSTEM_DRIVER_VERSION",
                "4.10": "DCGM_FI_SYSTEM_DRIVER_VERSION"}  # fmt: skip
# 4.8 fields a later generation has no series for in gpuwarden's drop-in -> why (or the name
# it would have). None today: every catalogue dcgm field has a DCGM 4.6.1 name. (The earlier
# derived NVLINK_THROUGHPUT_BYTES_PER_SECOND does not exist in DCGM's header; the aggregate
# NVLink field is an alias of the same id, DCGM_FI_DEV_NVLINK_THROUGHPUT_TOTAL, so it is
# renamed like the others.)
OMITTED: dict[str, dict[str, str]] = {gen: {} for gen in GENERATIONS}

# The fields dcgm-exporter serves with no ``-f``: the lines not commented out of its
# etc/default-counters.csv (4.5.3-4.8.2, vendored in fixtures/dcgm-exporter/; 4.8 names).
# Not among them: the enforced power limit, clock-event reasons, ECC and NVLink error
# counters, row-remap pending, PCIe link generation/width, SM activity. A test checks the
# tuple against the vendored file line by line.
DEFAULT_COUNTERS: tuple[str, ...] = (
    "DCGM_FI_DEV_SM_CLOCK", "DCGM_FI_DEV_MEM_CLOCK", "DCGM_FI_DEV_MEMORY_TEMP",
    "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_MEM_COPY_UTIL",
    "DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_RESERVED",
    "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL", "DCGM_FI_DEV_VGPU_LICENSE_STATUS",
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
    "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DRIVER_VERSION", "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "DCGM_FI_PROF_DRAM_ACTIVE", "DCGM_FI_PROF_PCIE_TX_BYTES",
    "DCGM_FI_PROF_PCIE_RX_BYTES",
)  # fmt: skip

_VERSION = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.\d+)?$")


def generation(version: str) -> str:
    """The naming generation of a dcgm-exporter version (``4.10.0``, ``4.9``, ``3``,
    ``4.5.3-4.8.2``: the exporter's part after the dash) or a generation name; "" is the
    default. ValueError on anything else."""
    v = version.strip().rpartition("-")[2]
    if v == "":
        return DEFAULT
    m = _VERSION.match(v)
    if not m:
        raise ValueError(f"dcgm-exporter version {version!r} is not N[.N[.N]]")
    major, minor = int(m[1]), int(m[2] or 0)
    if (major, minor) >= (4, 10):
        return "4.10"
    return "4.9" if (major, minor) == (4, 9) else "4.8"


def name_in(gen: str, field: str) -> str | None:
    """``field`` (its 4.8 name) as generation ``gen`` names it; None where it has none."""
    if field in OMITTED[gen]:
        return None
    r = RENAMES[gen].get(field)
    return r.name if r else field


def to_native(gen: str) -> dict[str, tuple[str, float]]:
    """Every field generation ``gen`` names -> (its 4.8 name, the factor that turns its value
    into the catalogue's native unit): what a reader of dcgm-exporter series needs."""
    legacy = dcgm_fields()
    out: dict[str, tuple[str, float]] = {}
    for old, f in legacy.items():
        new = name_in(gen, old)
        if new is not None and f.scale:
            r = RENAMES[gen].get(old)
            out[new] = (old, 1.0 / (f.scale * (r.factor if r else 1.0)))
    xid = name_in(gen, DCGM_LAST_XID.name)
    out[xid or DCGM_LAST_XID.name] = (DCGM_LAST_XID.name, 1.0)
    return out
