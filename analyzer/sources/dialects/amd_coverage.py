"""What AMD's Device Metrics Exporter (DME) cannot show, for coverage and findings.

Pure data beside :mod:`.amd` (the reader), read by :mod:`.coverage`: per detector, how DME's
signal differs from gpuwarden's own (notes on the report and on findings), and per family the
exact DME fields (``GPUConfig.Fields`` names) that would serve it, or why none can.
"""

from __future__ import annotations

from exporter import catalog
from exporter import catalog_amd as dme

# what DME shows differently, per detector: on the coverage report and on findings
REDUCED = {
    "afid": "DME's gpu_afid_errors holds the last RAS event's AFIDs only: an earlier event"
    " between two scrapes is lost and a repeat of one list is invisible (CPER records through"
    " amdsmi keep them all)",
    "xgmi": "DME serves XGMI traffic per link but no link state or CRC counter: a lost link is"
    " inferred from flat traffic beside rising siblings",
    "throttling": "DME's violation residency: ppt is the power cap (not a fault);"
    " socket and HBM thermal the firmware's thermal management; VR thermal and PROCHOT the"
    " platform's",
}
# families DME has no field for: why, and what serves them instead
_UNSERVED = {
    catalog.GPU_POWER_LIMIT.name: "DME has no power-limit field: PPT violation residency"
    " (gpu_violation_ppt_residency_*) tells a power cap instead",
    catalog.GPU_PCIE_WIDTH.name: "DME has no PCIe link-width field (pcie_speed only)",
    catalog.GPU_PCIE_WIDTH_MAX.name: "DME has no PCIe link-width field (pcie_max_speed only)",
    catalog.GPU_ROW_REMAP_PENDING.name: "AMD GPUs retire pages, not rows; DME serves no"
    " retired-page series (deferred errors are the ras line)",
    catalog.GPU_ROW_REMAP_FAILED.name: "AMD GPUs retire pages, not rows; DME serves no"
    " retired-page series",
    catalog.GPU_REMAPPED_ROWS.name: "AMD GPUs retire pages, not rows",
    catalog.NVLINK_ERRORS.name: "AMD GPUs have no NVLink: XGMI is the xgmi line",
    catalog.NVLINK_UP.name: "AMD GPUs have no NVLink: XGMI is the xgmi line",
    catalog.GPU_FABRIC_HEALTH.name: "NVIDIA's NVLink fabric only",
    catalog.FABRIC_SERVICE_UP.name: "NVIDIA's Fabric Manager / IMEX only",
    catalog.FABRIC_IMEX_READY.name: "NVIDIA's IMEX only",
    catalog.GPU_SM_ACTIVE.name: "DME's profiler fields (GPU_PROF_SM_ACTIVE) are not read yet",
    catalog.GPU_TENSOR_ACTIVE.name: "DME's profiler fields (GPU_PROF_TENSOR_ACTIVE_PERCENT) are"
    " not read yet",
    catalog.JOB_STEP_SECONDS.name: "published by the training job (gpuwarden-exporter --step-dir)",
    catalog.STORAGE_PROBE_UP.name: "gpuwarden-exporter's storage probes",
}
# detectors whose inputs DME serves but whose signal it has not
NO_SIGNAL = {
    "power_brake": "DME serves no power-brake signal: PPT residency is the board's own power"
    " cap, not a rack's brake",
}
# the DME fields (enum names, for GPUConfig.Fields) that serve each family the reader reads
_FIELDS = {
    catalog.GPU_UP.name: [*dme.PRESENCE],
    catalog.GPU_UTILIZATION.name: ["gpu_gfx_activity"],
    catalog.GPU_SM_CLOCK.name: ["gpu_clock"],
    catalog.GPU_POWER.name: ["gpu_package_power", "gpu_power_usage"],
    catalog.GPU_TEMPERATURE.name: ["gpu_junction_temperature", "gpu_edge_temperature"],
    catalog.GPU_MEMORY_TEMPERATURE.name: ["gpu_memory_temperature"],
    catalog.GPU_ECC_ERRORS.name: [*dme.ECC_TOTALS.values()],
    catalog.GPU_RAS_ERRORS.name: [dme.ras_field(b, t) for t in dme.RAS_READ
                                  for b in catalog.RAS_BLOCKS],
    catalog.GPU_PCIE_GENERATION.name: [dme.PCIE_SPEED[catalog.GPU_PCIE_GENERATION.name]],
    catalog.GPU_PCIE_GENERATION_MAX.name: [dme.PCIE_SPEED[catalog.GPU_PCIE_GENERATION_MAX.name]],
    catalog.GPU_XGMI_TRANSMIT.name: [dme.XGMI[catalog.GPU_XGMI_TRANSMIT.name]],
    catalog.GPU_XGMI_RECEIVE.name: [dme.XGMI[catalog.GPU_XGMI_RECEIVE.name]],
    catalog.GPU_THROTTLE.name: [x for cause in dme.VIOLATIONS for x in dme.violation_fields(cause)],
}  # fmt: skip


def enable(family: str) -> str:
    """What would make ``family`` (a catalogue name, or coverage's XID / AFID / job inputs)
    readable on DME nodes."""
    if family == "xid events":
        return "AMD GPUs report no XIDs: their RAS events are AFIDs (the afid line)"
    if family == "afid events":
        return ("add GPU_AFID_ERRORS to DME's GPUConfig Fields and set"
                " AMD_METRICS_EXPORTER_ENABLE_CPER=1 (off by default)")  # fmt: skip
    if family == "job attribution":
        return ("DME's Slurm prolog/epilog (label job_id, off by default) or its Kubernetes pod"
                " labels; or gpuwarden-exporter --job-map-dir")  # fmt: skip
    if family in _UNSERVED:
        return _UNSERVED[family]
    fields = _FIELDS.get(family)
    if fields:
        upper = ", ".join(f.upper() for f in dict.fromkeys(fields))
        return f"add to DME's GPUConfig Fields: {upper}"
    return "not served by DME"
