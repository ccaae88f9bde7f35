"""Fault plans for ``gpuwarden evaluate``: which faults, when, for how long, drawn from a seed.

Sits between the evaluation driver and the fleet simulator's ``inject`` API. The plan fixes
kinds, onsets, durations and parameters up front; the node is picked when the fault starts
(a straggler needs a node in a running multi-node job, which only the fleet knows then).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

# kind -> (target type, needs a node in a multi-node job, duration s)
HARDWARE: dict[str, tuple[str, bool, float]] = {
    "xid": ("gpu", False, 1800.0),
    "gpu_fallen_off_bus": ("gpu", False, 1800.0),
    "ecc_sbe_storm": ("gpu", False, 3600.0),
    "row_remap_pending": ("gpu", False, 3600.0),
    "row_remap_failure": ("gpu", False, 3600.0),
    "pcie_downgrade": ("gpu_or_node", False, 3600.0),
    "thermal_throttle": ("gpu_or_node", True, 3600.0),
    "power_throttle": ("gpu_or_node", True, 3600.0),
    "straggler": ("gpu_or_node", True, 3600.0),
    "nvlink_errors": ("link", False, 3600.0),
    "nvlink_down": ("link", False, 1800.0),
    "ib_symbol_errors": ("port", False, 3600.0),
    "ib_flap": ("port", False, 3600.0),
    "ib_port_down": ("port", False, 1800.0),
    "ib_rate_downgrade": ("port", False, 3600.0),
    "leaf_outage": ("switch", False, 900.0),
}
CONTROLS: dict[str, tuple[str, bool, float]] = {
    "app_xid": ("gpu", True, 600.0),
    "pipeline_imbalance": ("node", True, 3600.0),
    "checkpoint_pause": ("node", True, 600.0),
    "job_stop": ("node", True, 60.0),
    "reboot": ("node", False, 600.0),
}
# controls only the mixed-fleet runs draw (the homogeneous plans stay as they were)
MIXED_CONTROLS: dict[str, tuple[str, bool, float]] = {"driver_reload": ("node", True, 60.0)}
# AMD Instinct faults (simulator.faults.amd): only the mixed H100 + MI300X runs draw them, on
# MI300X nodes; the NVIDIA-only kinds go to the H100 nodes there (the rest anywhere)
AMD_HARDWARE: dict[str, tuple[str, bool, float]] = {
    "amd_hbm_uncorrectable": ("gpu", False, 1800.0),
    "amd_deferred_errors": ("gpu", False, 3600.0),
    "xgmi_link_down": ("xgmi_link", True, 1800.0),
    "amd_gpu_lost": ("gpu", False, 1800.0),
    "amd_ppt_throttle": ("gpu_or_node", True, 3600.0),
    "amd_thermal_throttle": ("gpu_or_node", True, 3600.0),
    "amd_fail_slow": ("gpu_or_node", True, 3600.0),
    "amd_afid_event": ("gpu", False, 1800.0),
}
NVIDIA_ONLY = frozenset({"xid", "app_xid", "gpu_fallen_off_bus", "ecc_sbe_storm",
                         "row_remap_pending", "row_remap_failure", "nvlink_errors", "nvlink_down",
                         "thermal_throttle", "power_throttle", "straggler"})  # fmt: skip
EXPLICIT = frozenset({"xid", "gpu_fallen_off_bus", "nvlink_down", "ib_port_down", "leaf_outage"})


@dataclass(frozen=True)
class Planned:
    kind: str
    onset: float
    duration: float
    target_type: str
    needs_job: bool
    parameters: dict[str, Any] = field(default_factory=dict)
    target: str = ""


def _params(kind: str, rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    """Parameters and the GPU/link/port target (node chosen later)."""
    g = int(rng.integers(0, 8))
    if kind == "xid":
        return {"xid": int(rng.choice([48, 64, 79, 95, 119]))}, f"gpu{g}"
    if kind == "gpu_fallen_off_bus":
        return {"message": bool(rng.random() < 0.5)}, f"gpu{g}"
    if kind == "app_xid":
        return {"xid": int(rng.choice([13, 31, 43]))}, f"gpu{g}"
    if kind in ("pcie_downgrade", "thermal_throttle", "power_throttle", "straggler"):
        target = "node" if rng.random() < 0.4 else f"gpu{g}"
        if kind == "straggler":
            return {"slowdown": float(rng.choice([0.05, 0.08, 0.1, 0.15]))}, target
        if kind == "power_throttle":
            return {"brake": bool(rng.random() < 0.5)}, target
        if kind == "pcie_downgrade":
            return {
                "generation": int(rng.choice([3, 4])),
                "width": int(rng.choice([8, 16])),
            }, target
        return {}, target
    if kind in AMD_HARDWARE:
        return _amd_params(kind, g, rng)
    if kind in ("nvlink_errors", "nvlink_down"):
        return {}, f"gpu{g}/{int(rng.integers(0, 18))}"
    if kind.startswith("ib_"):
        return {}, f"mlx5_{int(rng.integers(0, 8))}/1"
    if kind in ("ecc_sbe_storm", "row_remap_pending", "row_remap_failure"):
        return {}, f"gpu{g}"
    if kind == "pipeline_imbalance":
        return {"extra": float(rng.uniform(0.05, 0.3))}, "node"
    return {}, "node" if kind != "leaf_outage" else ""


def _amd_params(kind: str, g: int, rng: np.random.Generator) -> tuple[dict[str, Any], str]:
    if kind == "xgmi_link_down":
        return {}, f"gpu{g}/{(g + 1 + int(rng.integers(0, 7))) % 8}"
    if kind == "amd_hbm_uncorrectable":
        return {"fatal": bool(rng.random() < 0.7)}, f"gpu{g}"
    if kind == "amd_deferred_errors":
        return {"count": int(rng.integers(1, 5))}, f"gpu{g}"
    if kind == "amd_afid_event":  # a watchdog timeout, or it then an HBM error before a scrape
        return {"afid": 27, "then": int(rng.choice([0, 22]))}, f"gpu{g}"
    if kind == "amd_gpu_lost":  # a GPU fault only (its target type is "gpu", never "node")
        rng.random()  # drawn as before, so every later draw of a seed stays the same
        return {}, f"gpu{g}"
    target = "node" if rng.random() < 0.4 else f"gpu{g}"
    if kind == "amd_fail_slow":
        return {"slowdown": float(rng.choice([0.05, 0.08, 0.1, 0.15]))}, target
    return {}, target


def plan(
    seed: int, horizon: float, per_kind: int, controls_per_kind: int, hardware: bool = True,
    extra: tuple[str, ...] = (), amd: bool = False,
) -> list[Planned]:  # fmt: skip
    rng = np.random.default_rng(10_000 + seed)
    hw = [*HARDWARE, *AMD_HARDWARE] if amd else list(HARDWARE)
    kinds = ([k for k in hw for _ in range(per_kind)] if hardware else []) + [
        k for k in (*CONTROLS, *extra) for _ in range(controls_per_kind)
    ]
    rng.shuffle(kinds)
    lo, hi = 1200.0, max(1500.0, horizon - 1800.0)
    onsets = np.sort(rng.uniform(lo, hi, len(kinds)))
    out = []
    for kind, onset in zip(kinds, onsets, strict=True):
        ttype, needs_job, duration = (HARDWARE | CONTROLS | MIXED_CONTROLS | AMD_HARDWARE)[kind]
        params, target = _params(kind, rng)
        if kind == "pcie_downgrade" and params["width"] == 16 and params["generation"] == 5:
            params["generation"] = 4
        out.append(Planned(kind, float(np.round(onset / 15) * 15), duration, ttype, needs_job,
                           params, target))  # fmt: skip
    return out
