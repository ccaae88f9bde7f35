"""AMD's ROCm Device Metrics Exporter (DME): which of its fields stand for which catalogue series.

Pure data, a leaf beside the catalogue (as :mod:`exporter.catalog_dcgm` is for dcgm-exporter):
the analyzer's AMD reader (``analyzer.sources.dialects.amd``) reads with it, and an exporter
that one day serves DME's names would render from it. DME names each series after the
lower-cased ``GPUMetricField`` enum of ``pkg/exporter/proto/exporterconfig.proto``, optionally
behind a prefix (``CommonConfig.MetricsFieldPrefix``, ``amd_`` in its example config), types
every field a gauge (counters included), and labels it ``hostname``, ``serial_number``,
``gpu_id`` (mandatory), ``gpu_uuid``, ``card_model``, ``gpu_partition_id``, ... Units are
metricslist.md's. The enum, the table and the labels are vendored as facts in
fixtures/amd-dme/ (origin and DME commit in its README); tests/analyzer/test_amd_dialect.py
checks every name here against them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from exporter import catalog as c

# identity labels (exporterconfig.proto MetricLabel / GPUMetricLabel, lower-cased)
HOSTNAME = "hostname"
SERIAL = "serial_number"
GPU_ID = "gpu_id"
GPU_UUID = "gpu_uuid"
MODEL = "card_model"  # mandatory; DME falls back to card_series when the model is empty
# a compute-partitioned GPU (CPX/DPX/QPX): each partition is a GPU of its own (gpu_id) with its
# id on the physical GPU (gpu_partition_id; "NA" where none) and the mode; physical sensors are
# served on partition 0 only (docs/configuration/metricslist.md)
PARTITION_ID = "gpu_partition_id"
PARTITION_TYPE = "gpu_compute_partition_type"
PARTITIONS_PER_GPU = {"spx": 1, "dpx": 2, "qpx": 4, "cpx": 8}  # MI300X compute partition modes
JOB_ID = "job_id"  # from DME's Slurm prolog/epilog (off by default)
POD, NAMESPACE = "pod", "namespace"
LINK_INDEX = "link_index"  # gpu_xgmi_link_{rx,tx}: one per XGMI link (usually 8 on MI300X)
# gpu_clock's clock type: system | memory | data | video | soc from DME 1.5.0 on; the proto's
# enum name (GPU_CLOCK_TYPE_SYSTEM, ...) before it (pkg/amdgpu/gpuagent/gpuagent_metrics.go
# at v1.4.0 labels clock.Type.String() as it is)
CLOCK_TYPE = "clock_type"
SYSTEM_CLOCK = f'{CLOCK_TYPE}=~"system|GPU_CLOCK_TYPE_SYSTEM"'
AFID_SEVERITY, AFID_INDEX = "severity", "afid_index"  # gpu_afid_errors


@dataclass(frozen=True)
class DmeField:
    """One DME field read as a catalogue series: ``name`` without DME's prefix; the value
    divided by ``divide`` is the catalogue's unit; ``match``: a PromQL label matcher on DME's
    own labels (``gpu_clock``'s clock type)."""

    name: str
    divide: float = 1.0
    unit: str = ""  # DME's unit, as metricslist.md gives it
    match: str = ""


# a field every GPU (every partition 0 of a partitioned one) reports: its presence. Physical
# sensors report on partition 0 only (CPX/DPX/QPX), so presence is "any of these".
PRESENCE = (
    "gpu_junction_temperature",  # MI3xx
    "gpu_edge_temperature",  # MI2xx
    "gpu_package_power",
    "gpu_power_usage",
    "gpu_health",
)
# gauges read one to one (several fields for one series: the first one present is read)
GAUGES: Mapping[str, tuple[DmeField, ...]] = {
    c.GPU_TEMPERATURE.name: (DmeField("gpu_junction_temperature", unit="Celsius"),
                             DmeField("gpu_edge_temperature", unit="Celsius")),
    c.GPU_MEMORY_TEMPERATURE.name: (DmeField("gpu_memory_temperature", unit="Celsius"),),
    c.GPU_POWER.name: (DmeField("gpu_package_power", unit="W"),
                       DmeField("gpu_power_usage", unit="W")),
    c.GPU_UTILIZATION.name: (DmeField("gpu_gfx_activity", 100.0, "%"),),
    c.GPU_SM_CLOCK.name: (DmeField("gpu_clock", 1e-6, "MHz", SYSTEM_CLOCK),),
}  # fmt: skip
# PCIe: DME serves the link speed (GT/s) and no width; the generation is round(log2(GT/s))
# (2.5 -> 1, 5 -> 2, 8 -> 3, 16 -> 4, 32 -> 5, 64 -> 6)
PCIE_SPEED = {c.GPU_PCIE_GENERATION.name: "pcie_speed",
              c.GPU_PCIE_GENERATION_MAX.name: "pcie_max_speed"}  # fmt: skip
# ECC totals -> the catalogue's ECC counter (counter_type volatile: since the driver loaded)
ECC_TOTALS = {"corrected": "gpu_ecc_correct_total", "uncorrected": "gpu_ecc_uncorrect_total"}
DEFERRED_TOTAL = "gpu_ecc_deferred_total"
_RAS_WORD = {"correctable": "correct", "uncorrectable": "uncorrect", "deferred": "deferred"}
# per-block errors read by the analyzer: uncorrectable and deferred (a correctable error in a
# block is counted by the total; reading 19 more fields per GPU buys no judgement)
RAS_READ = ("uncorrectable", "deferred")


def ras_field(block: str, error_type: str) -> str:
    """DME's field for one block's errors: ``gpu_ecc_uncorrect_umc``, ``gpu_ecc_deferred_gfx``."""
    return f"gpu_ecc_{_RAS_WORD[error_type]}_{block}"


# XGMI: accumulated data per link in KB (amdsmi's kilobytes, read as KiB), label link_index
XGMI = {c.GPU_XGMI_TRANSMIT.name: "gpu_xgmi_link_tx", c.GPU_XGMI_RECEIVE.name: "gpu_xgmi_link_rx"}
XGMI_KB = 1024.0
# the AFIDs of the last RAS event per GPU: value = AFID, labels severity + afid_index
AFID_ERRORS = "gpu_afid_errors"
# violation residency (MI3xx): per cause an accumulated counter and (DME 1.8+) the share of
# the last interval in percent. Each cause -> the catalogue's throttle reason it stands for:
# PPT (package power tracking) is the power cap (normal, tells an admin cap from a fault);
# socket and HBM thermal are the firmware's thermal management (as NVML's SW thermal
# slowdown: notify); a voltage-regulator thermal limit is the platform's (as HW slowdown);
# PROCHOT is the processor-hot signal (as HW thermal slowdown).
VIOLATIONS: Mapping[str, str] = {
    "ppt": "sw_power_cap",
    "socket_thermal": "sw_thermal_slowdown",
    "hbm_thermal": "sw_thermal_slowdown",
    "vr_thermal": "hw_slowdown",
    "processor_hot": "hw_thermal_slowdown",
}


def violation_fields(cause: str) -> tuple[str, str]:
    """(accumulated, percentage) fields of one violation cause."""
    base = f"gpu_violation_{cause}_residency"
    return f"{base}_accumulated", f"{base}_percentage"


def read_fields() -> tuple[str, ...]:
    """Every DME field the analyzer reads (discovery asks for these, with any prefix)."""
    out = [*PRESENCE, *PCIE_SPEED.values(), *ECC_TOTALS.values(), DEFERRED_TOTAL,
           *XGMI.values(), AFID_ERRORS]  # fmt: skip
    out += [f.name for fs in GAUGES.values() for f in fs]
    out += [ras_field(b, t) for b in c.RAS_BLOCKS for t in RAS_READ]
    out += [x for cause in VIOLATIONS for x in violation_fields(cause)]
    return tuple(dict.fromkeys(out))


# the fields whose presence says "DME serves here" (any one; a prefix may stand before each)
MARKERS = ("gpu_health", "gpu_junction_temperature", "gpu_edge_temperature",
           "gpu_ecc_uncorrect_total", "gpu_gfx_activity", "gpu_afid_errors")  # fmt: skip
