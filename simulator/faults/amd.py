"""AMD Instinct faults (MI300X nodes only): HBM uncorrectable and deferred errors, a lost XGMI
link, a lost GPU, PPT (power cap) and thermal throttling, a fail-slow GPU, RAS events by AFID.

Each ``apply`` writes what the GPU's RAS machinery would record (errors per block in
``FleetState.ras``, CPER records as :class:`~simulator.amd.RasEvent`) and the standing
state (GPU lost, link flat, clocks down) into the step. AMD GPUs log no XIDs, so none of these
adds a kernel-log :class:`~simulator.effects.Event`. Throttling and fail-slow reuse the
vendor-neutral effects of :mod:`simulator.faults.gpu` (DME shows them as violation residency).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from simulator.amd import (
    AFID_SEVERITY,
    BLOCK,
    ERROR,
    HBM_CONTAINED,
    HBM_FATAL,
    XGMI_UNCORRECTED,
    RasEvent,
)
from simulator.faults.base import Fault, FaultKind, Param, Step
from simulator.faults.gpu import power_throttle, straggler, thermal_throttle
from simulator.state import CORRECTED, UNCORRECTED

AMD = "amd"


def _ras(s: Step, n: int, g: int, block: str, error: str, count: int = 1) -> None:
    s.st.ras[n, g, BLOCK[block], ERROR[error]] += count
    if error != "deferred":  # the ECC totals count corrected and uncorrected errors
        s.st.ecc[n, g, CORRECTED if error == "correctable" else UNCORRECTED, :] += count


def _event(s: Step, n: int, g: int, afid: int, at: float) -> None:
    s.eff.ras_events.append(RasEvent(at, n, g, afid, AFID_SEVERITY[afid]))


def hbm_uncorrectable(f: Fault, s: Step) -> None:
    """An uncorrectable HBM error (umc): fatal (AFID 20, the job dies, gpu_health 0 until a
    reset) or contained by poisoning (AFID 22, the job may run on)."""
    n, g, fatal = f.nodes[0], f.gpu, bool(f.parameters["fatal"])
    if f.starts_in(s.t0, s.t1):
        _ras(s, n, g, "umc", "uncorrectable")
        _event(s, n, g, HBM_FATAL if fatal else HBM_CONTAINED, f.onset)
        if fatal:
            s.eff.stop_jobs.add(n)


def deferred_errors(f: Fault, s: Step) -> None:
    """Deferred errors in HBM: poison caught before anything consumed it (no event, no crash)."""
    if f.starts_in(s.t0, s.t1):
        _ras(s, f.nodes[0], f.gpu, "umc", "deferred", int(f.parameters["count"]))


def xgmi_link_down(f: Fault, s: Step) -> None:
    """The XGMI link between GPU g and its peer k: flat both ways while its siblings carry the
    job's traffic, with xgmi_wafl errors (an uncorrected one and its CPER record at onset)."""
    n, g, k = f.nodes[0], f.gpu, f.link
    if f.starts_in(s.t0, s.t1):
        _ras(s, n, g, "xgmi_wafl", "uncorrectable")
        _event(s, n, g, XGMI_UNCORRECTED, f.onset)
    if f.state_at(s.t1):
        s.eff.xgmi_down[n, g, k] = s.eff.xgmi_down[n, k, g] = True
        extra = s.rng.poisson(float(f.parameters["rate"]) * f.overlap(s.t0, s.t1))
        _ras(s, n, g, "xgmi_wafl", "correctable", int(extra))


def gpu_lost(f: Fault, s: Step) -> None:
    """A GPU gone from the bus (amdgpu logs no XID): its series vanish, the job dies."""
    n, g = f.nodes[0], f.gpu
    if f.starts_in(s.t0, s.t1):
        s.eff.stop_jobs.add(n)
    if f.state_at(s.t1):
        s.eff.lost[n, g] = True


def afid_event(f: Fault, s: Step) -> None:
    """A RAS event with ``afid`` and, ``gap_s`` later, a second with ``then`` (0: none): two
    events between scrapes, of which DME's last-event gauge shows only the second."""
    n, g, p = f.nodes[0], f.gpu, f.parameters
    second = f.onset + float(p["gap_s"])
    if f.starts_in(s.t0, s.t1):
        _event(s, n, g, int(p["afid"]), f.onset)
        if AFID_SEVERITY[int(p["afid"])] == "fatal":
            s.eff.stop_jobs.add(n)
    if int(p["then"]) and s.t0 < second <= s.t1 and f.state_at(second):
        _event(s, n, g, int(p["then"]), second)


def _always(f: Fault) -> bool:
    return True


def _then(p: Mapping[str, Any]) -> str:
    return "" if int(p["then"]) in (0, *AFID_SEVERITY) else "then must be 0 or an AFID"


_AFIDS = tuple(sorted(AFID_SEVERITY))
KINDS = (
    FaultKind("amd_hbm_uncorrectable", "gpu", hbm_uncorrectable, {"fatal": Param(True)},
              help="uncorrectable HBM (umc) error: AFID 20 fatal, or 22 contained",
              clears_on_reboot=_always, vendor=AMD),
    FaultKind("amd_deferred_errors", "gpu", deferred_errors, {"count": Param(2, 1, 10_000)},
              help="deferred HBM errors: poison caught, not consumed", vendor=AMD),
    FaultKind("xgmi_link_down", "xgmi_link", xgmi_link_down, {"rate": Param(0.01, 0, 100)},
              help="an XGMI link flat both ways while its siblings rise, xgmi_wafl errors",
              clears_on_reboot=_always, vendor=AMD),
    FaultKind("amd_gpu_lost", "gpu", gpu_lost, help="GPU lost (no XID on AMD)",
              clears_on_reboot=_always, vendor=AMD),
    FaultKind("amd_ppt_throttle", "gpu_or_node", power_throttle,
              {"cap_w": Param(450.0, 100, 750), "clock_factor": Param(0.8, 0.1, 1.0),
               "brake": Param(False)},
              check=lambda p: "AMD has no power brake" if p["brake"] else "",
              help="held at a power cap (PPT) below its peers' (clocks down)", vendor=AMD),
    FaultKind("amd_thermal_throttle", "gpu_or_node", thermal_throttle,
              {"temp_add": Param(25.0, 0, 80), "clock_factor": Param(0.75, 0.1, 1.0)},
              help="socket thermal and PROCHOT residency, clocks down", vendor=AMD),
    FaultKind("amd_fail_slow", "gpu_or_node", straggler, {"slowdown": Param(0.1, 0.01, 0.9)},
              help="fail-slow MI300X GPU or node", vendor=AMD),
    FaultKind("amd_afid_event", "gpu", afid_event,
              {"afid": Param(27, choices=_AFIDS), "then": Param(0),
               "gap_s": Param(5.0, 0.1, 14.0)},
              check=_then, help="RAS event(s) by AFID; then: a second one gap_s later",
              vendor=AMD),
)  # fmt: skip
