"""dcgm-exporter's naming generations: how each release names and scales the fields that
:mod:`exporter.catalog` maps in its 4.8 names (``DcgmField``). Pure data, a leaf beside the
catalogue: the exporter's ``--compat dcgm:<version>`` renders with it, the analyzer's dcgm
reader may read with it (``to_native``), both from this one table.

Generations (fixtures/dcgm-exporter/README.md has the sources):

- ``4.8``: 3.x and 4.0-4.8 (tags up to 4.5.3-4.8.2): MHz, %, MiB, mJ, ns; driver label
  ``DCGM_FI_DRIVER_VERSION``. The catalogue's names. Plain ``--compat dcgm`` is this one,
  what community dashboards (Grafana 12239) and most running fleets read.
- ``4.9``: the release that moved the default fields to DCGM's base-unit field identifiers:
  clocks in Hz, energy in J, utilisation as a 0-1 ratio, framebuffer in bytes, the driver
  label ``DCGM_FI_SYSTEM_DRIVER_VERSION``. The names are DCGM's canonical field identifiers
  (DCGM "Field Identifiers" reference); fields outside the default set keep their 4.8 names
  here until a field list of that release is vendored.
- ``4.10``: 4.9, plus the PCIe profiling rates named ``*_BYTES_PER_SECOND``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from exporter.catalog import DCGM_DRIVER_LABEL, DCGM_LAST_XID, dcgm_fields

GENERATIONS = ("4.8", "4.9", "4.10")
DEFAULT = "4.8"  # plain ``--compat dcgm``
MIB = 1024.0 * 1024.0


@dataclass(frozen=True)
class Rename:
    """A 4.8 field in a later generation: value there = value in 4.8's unit * ``factor``.
    ``integer``: DCGM stores it as int64 (printed without a fraction); None: as in 4.8."""

    name: str
    factor: float = 1.0
    unit: str = ""  # the new unit, for documentation and readers: hertz, ratio, bytes, ...
    integer: bool | None = None


_4_9: dict[str, Rename] = {
    "DCGM_FI_DEV_SM_CLOCK": Rename("DCGM_FI_DEV_SM_CLOCK_HERTZ", 1e6, "hertz", True),
    "DCGM_FI_DEV_MEM_CLOCK": Rename("DCGM_FI_DEV_MEMORY_CLOCK_HERTZ", 1e6, "hertz", True),
    "DCGM_FI_DEV_GPU_TEMP": Rename("DCGM_FI_DEV_GPU_TEMP_CELSIUS", unit="celsius"),
    "DCGM_FI_DEV_MEMORY_TEMP": Rename("DCGM_FI_DEV_MEMORY_TEMP_CELSIUS", unit="celsius"),
    "DCGM_FI_DEV_POWER_USAGE": Rename("DCGM_FI_DEV_BOARD_POWER_WATTS", unit="watts"),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": Rename(
        "DCGM_FI_DEV_GPU_ENERGY_JOULES_TOTAL", 1e-3, "joules", True
    ),
    "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": Rename("DCGM_FI_DEV_PCIE_REPLAY_TOTAL"),
    "DCGM_FI_DEV_GPU_UTIL": Rename("DCGM_FI_DEV_GPU_UTIL_RATIO", 0.01, "ratio", False),
    "DCGM_FI_DEV_MEM_COPY_UTIL": Rename("DCGM_FI_DEV_MEMORY_UTIL_RATIO", 0.01, "ratio", False),
    "DCGM_FI_DEV_ENC_UTIL": Rename("DCGM_FI_DEV_ENC_UTIL_RATIO", 0.01, "ratio", False),
    "DCGM_FI_DEV_DEC_UTIL": Rename("DCGM_FI_DEV_DEC_UTIL_RATIO", 0.01, "ratio", False),
    DCGM_LAST_XID.name: Rename("DCGM_FI_DEV_XID_ERROR"),
    "DCGM_FI_DEV_FB_FREE": Rename("DCGM_FI_DEV_FB_FREE_BYTES", MIB, "bytes", True),
    "DCGM_FI_DEV_FB_USED": Rename("DCGM_FI_DEV_FB_USED_BYTES", MIB, "bytes", True),
    "DCGM_FI_DEV_FB_RESERVED": Rename("DCGM_FI_DEV_FB_RESERVED_BYTES", MIB, "bytes", True),
    "DCGM_FI_DEV_FB_TOTAL": Rename("DCGM_FI_DEV_FB_CAPACITY_BYTES", MIB, "bytes", True),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": Rename("DCGM_FI_DEV_ROW_REMAP_UNCORRECTABLE_TOTAL"),
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": Rename("DCGM_FI_DEV_ROW_REMAP_CORRECTABLE_TOTAL"),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": Rename("DCGM_FI_DEV_ROW_REMAP_FAILED"),
    "DCGM_FI_PROF_GR_ENGINE_ACTIVE": Rename("DCGM_FI_PROF_GR_ENGINE_UTIL_RATIO", unit="ratio"),
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": Rename("DCGM_FI_PROF_TENSOR_UTIL_RATIO", unit="ratio"),
    "DCGM_FI_PROF_DRAM_ACTIVE": Rename("DCGM_FI_PROF_DRAM_UTIL_RATIO", unit="ratio"),
}
_4_10: dict[str, Rename] = {
    **_4_9,
    "DCGM_FI_PROF_PCIE_TX_BYTES": Rename("DCGM_FI_PROF_PCIE_TX_BYTES_PER_SECOND", unit="bytes_per_second"),
    "DCGM_FI_PROF_PCIE_RX_BYTES": Rename("DCGM_FI_PROF_PCIE_RX_BYTES_PER_SECOND", unit="bytes_per_second"),
}  # fmt: skip
RENAMES: dict[str, dict[str, Rename]] = {"4.8": {}, "4.9": _4_9, "4.10": _4_10}
DRIVER_LABEL = {"4.8": DCGM_DRIVER_LABEL, "4.9": "DCGM_FI_SYSTEM_DRIVER_VERSION",
                "4.10": "DCGM_FI_SYSTEM_DRIVER_VERSION"}  # fmt: skip
# 4.8 fields a later generation has no series for in gpuwarden's drop-in, and why: 4.9's
# aggregate NVLink field is a rate in B/s, the exporter keeps per-link byte counters (a
# render is stateless); rate(gpuwarden_nvlink_transmit_bytes_total) is the same figure
OMITTED: dict[str, dict[str, str]] = {
    "4.8": {},
    "4.9": {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND"},
    "4.10": {"DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": "DCGM_FI_DEV_NVLINK_THROUGHPUT_BYTES_PER_SECOND"},
}  # fmt: skip

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
