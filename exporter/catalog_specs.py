"""What each GPU model and HCA generation should look like: the specification table.

A leaf beside :mod:`exporter.catalog` (the analyzer, dashboards and remediation may import
``exporter.catalog*`` and nothing else from the exporter). The analyzer compares like with
like (same model and configuration); when a peer group is too small for statistics it falls
back to this table, never to the fleet.

Values are the vendors' published board specifications (NVIDIA A100, H100, H200, B200 and
L40S datasheets; NVLink per-link speed is one direction, e.g. H100's 900 GB/s total over 18
links is 25 GB/s per link per direction; AMD Instinct MI300X, MI325X and MI355X data sheets:
typical board power, peak engine clock, HBM size; their GPU-to-GPU links are XGMI, not
NVLink, so ``nvlinks`` is 0). An AMD model is matched in amd-smi's market name (DME's
``card_model``: "AMD Instinct MI300X OAM") or its PCI device id (0x74a1 MI300X, 0x74a5
MI325X), so DME nodes whose model label is the id still form their model's group. HCA rates are the InfiniBand 4x link rates: HDR
200 Gb/s (ConnectX-6), NDR 400 Gb/s (ConnectX-7), XDR 800 Gb/s (ConnectX-8). ``hca`` on a GPU
model is the fabric its reference system ships with (DGX A100: HDR; DGX H100/H200/B200: NDR),
used only when neither the inventory file nor a peer group says otherwise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GB = 1e9
HCA_RATES: dict[str, float] = {  # bytes per second of one 4x port
    "EDR": 100e9 / 8,
    "HDR": 200e9 / 8,
    "NDR": 400e9 / 8,
    "XDR": 800e9 / 8,
}
HCA_TYPES: dict[str, str] = {  # sysfs hca_type -> the highest rate the adapter negotiates
    "MT4119": "EDR",  # ConnectX-5
    "MT4123": "HDR",  # ConnectX-6
    "MT4129": "NDR",  # ConnectX-7
    "MT4131": "XDR",  # ConnectX-8
}


@dataclass(frozen=True)
class GpuSpec:
    key: str  # the peer-group name, e.g. "h100-sxm"
    pattern: str  # regex over NVML's device name (gpu_info's ``name`` label)
    power_limit_w: float  # default (board) power limit
    sm_clock_max_hz: float
    memory_bytes: float
    nvlinks: int  # 0: PCIe card without NVLink
    nvlink_bytes_per_s: float  # one link, one direction
    form: str  # "sxm" | "pcie" | "oam" (AMD's OCP accelerator module)
    hca: str | None  # fabric of the reference system (key of HCA_RATES), None: no IB

    @property
    def hca_rate(self) -> float | None:
        return HCA_RATES[self.hca] if self.hca else None


SPECS: tuple[GpuSpec, ...] = (
    GpuSpec("a100-sxm", r"A100-SXM4", 400.0, 1410e6, 80 * GB, 12, 25 * GB, "sxm", "HDR"),
    GpuSpec("a100-pcie", r"A100.*PCIE", 300.0, 1410e6, 80 * GB, 0, 0.0, "pcie", "HDR"),
    GpuSpec("h100-sxm", r"H100 80GB HBM3|H100-SXM", 700.0, 1980e6, 80 * GB, 18, 25 * GB, "sxm", "NDR"),
    GpuSpec("h100-pcie", r"H100 PCIe", 350.0, 1755e6, 80 * GB, 0, 0.0, "pcie", "NDR"),
    GpuSpec("h200-sxm", r"H200", 700.0, 1980e6, 141 * GB, 18, 25 * GB, "sxm", "NDR"),
    GpuSpec("b200-sxm", r"B200", 1000.0, 1965e6, 180 * GB, 18, 50 * GB, "sxm", "NDR"),
    GpuSpec("l40s", r"L40S", 350.0, 2520e6, 48 * GB, 0, 0.0, "pcie", None),
    GpuSpec("mi300x", r"MI300X|\b0x74a1\b", 750.0, 2100e6, 192 * GB, 0, 0.0, "oam", None),
    GpuSpec("mi325x", r"MI325X|\b0x74a5\b", 1000.0, 2100e6, 256 * GB, 0, 0.0, "oam", None),
    GpuSpec("mi355x", r"MI355X", 1400.0, 2400e6, 288 * GB, 0, 0.0, "oam", None),
)  # fmt: skip
BY_KEY: dict[str, GpuSpec] = {s.key: s for s in SPECS}
_COMPILED = tuple((re.compile(s.pattern, re.IGNORECASE), s) for s in SPECS)


def model_key(name: str) -> str:
    """The peer-group key of an NVML device name (``"NVIDIA A100-SXM4-80GB"`` ->
    ``"a100-sxm"``); an unknown model keeps its own name (lower case), so it still forms a
    group of its own and is never mixed with a known one."""
    for rx, s in _COMPILED:
        if rx.search(name):
            return s.key
    return name.strip().lower()


def spec(key_or_name: str) -> GpuSpec | None:
    """The specification of a model key or NVML name; None for a model not in the table."""
    return BY_KEY.get(key_or_name) or BY_KEY.get(model_key(key_or_name))


def hca_rate(value: str | float) -> float:
    """A port rate in bytes per second from a generation name (``"NDR"``), an sysfs
    ``hca_type`` (``"MT4129"``) or a number of bytes per second; ValueError otherwise."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
        return float(value)
    s = str(value).strip().upper()
    if s in HCA_RATES:
        return HCA_RATES[s]
    if s in HCA_TYPES:
        return HCA_RATES[HCA_TYPES[s]]
    raise ValueError(
        f"unknown HCA rate {value!r} (one of {', '.join(HCA_RATES)}, an hca_type such as "
        "MT4129, or bytes per second)"
    )
