"""GPU faults: fatal XIDs, GPU lost, memory (ECC, row remap), PCIe, throttling, stragglers.

Each ``apply`` writes the fault's one-off marks at onset (kernel-log event, counter jump,
job crash) and its standing state while active (GPU lost, clocks down, remap pending) into
the step's :class:`simulator.effects.Effects` and :class:`simulator.state.FleetState`.
"""

from __future__ import annotations

from simulator.faults.base import Fault, FaultKind, Param, Step
from simulator.state import AGGREGATE, CORRECTED, UNCORRECTED, VOLATILE

# NVML recovery actions (nvmlDeviceGpuRecoveryAction_t).
RESET, REBOOT, DRAIN_AND_RESET = 1, 2, 4
# nvmlClocksEventReason bits.
SW_POWER_CAP, SW_THERMAL, HW_THERMAL, HW_POWER_BRAKE = 0x4, 0x20, 0x40, 0x80
FATAL_XIDS = (48, 64, 79, 95, 119)
APPLICATION_XIDS = (13, 31, 43)


def _gpus(f: Fault) -> int | slice:
    return slice(None) if f.gpu < 0 else f.gpu


def _dbe(s: Step, n: int, g: int, at: float) -> None:
    """A double-bit error: uncorrected count, Xid 48, then the row remap it triggers (Xid 63)."""
    s.st.ecc[n, g, UNCORRECTED, VOLATILE] += 1
    s.st.ecc[n, g, UNCORRECTED, AGGREGATE] += 1
    s.st.remapped[n, g, 1] += 1
    s.event(n, g, 48, "xid", at)
    s.event(n, g, 63, "xid", at + 0.01)
    s.eff.stop_jobs.add(n)


def xid(f: Fault, s: Step) -> None:
    n, g, x = f.nodes[0], f.gpu, int(f.parameters["xid"])
    if f.starts_in(s.t0, s.t1):
        if x == 48:
            _dbe(s, n, g, f.onset)
        else:
            s.event(n, g, x, "xid", f.onset)
            s.eff.stop_jobs.add(n)
        if x == 95:
            s.st.ecc[n, g, UNCORRECTED, :] += 1
        if x == 64:
            s.st.remapped[n, g, 1] += 1
    if not f.state_at(s.t1):
        return
    if x == 79:
        s.eff.lost[n, g] = True
    elif x == 119:
        s.eff.hung[n, g] = True
        s.eff.recovery[n, g] = REBOOT
    elif x == 64:
        s.eff.remap_failed[n, g] = True
        s.eff.recovery[n, g] = DRAIN_AND_RESET
    else:
        s.eff.remap_pending[n, g] |= x == 48
        s.eff.recovery[n, g] = RESET


def app_xid(f: Fault, s: Step) -> None:
    """The job's fault (bad kernel, page fault): its processes die and restart; the node is fine."""
    n, g = f.nodes[0], f.gpu
    if f.starts_in(s.t0, s.t1):
        s.event(n, g, int(f.parameters["xid"]), "app", f.onset)
    if f.state_at(s.t1) and f.since(s.t1) < float(f.parameters["restart_s"]):
        jid = s.jobs.job_of[n]
        s.eff.pause[s.jobs.job_of == jid if jid >= 0 else n] = True


def fallen_off_bus(f: Fault, s: Step) -> None:
    """Newer drivers log no Xid line, only the fallen-off-the-bus message (or nothing at all)."""
    n, g = f.nodes[0], f.gpu
    if f.starts_in(s.t0, s.t1):
        if f.parameters["message"]:
            s.event(n, g, 79, "fallen_off_bus", f.onset)
        s.eff.stop_jobs.add(n)
    if f.state_at(s.t1):
        s.eff.lost[n, g] = True


def ecc_sbe_storm(f: Fault, s: Step) -> None:
    """Corrected errors at a growing rate; after ``escalate_after_s`` a double-bit error."""
    n, g = f.nodes[0], f.gpu
    p = f.parameters
    esc = float(p["escalate_after_s"])
    rate = float(p["rate"]) * (1.0 + f.since(s.t1) / 600.0)
    k = s.rng.poisson(rate * f.overlap(s.t0, s.t1))
    s.st.ecc[n, g, CORRECTED, :] += k
    at = f.onset + esc
    if esc > 0 and s.t0 < at <= s.t1 and f.state_at(at):
        _dbe(s, n, g, at)
    if esc > 0 and f.state_at(s.t1) and s.t1 >= at:
        s.eff.remap_pending[n, g] = True
        s.eff.recovery[n, g] = RESET


def row_remap_pending(f: Fault, s: Step) -> None:
    n, g = f.nodes[0], f.gpu
    if f.starts_in(s.t0, s.t1):
        s.st.remapped[n, g, 1] += 1
        s.event(n, g, 63, "xid", f.onset)
    if f.state_at(s.t1):
        s.eff.remap_pending[n, g] = True
        s.eff.recovery[n, g] = RESET


def pcie_downgrade(f: Fault, s: Step) -> None:
    n, g = f.nodes[0], _gpus(f)
    if f.state_at(s.t1):
        s.eff.pcie_gen[n, g] = int(f.parameters["generation"])
        s.eff.pcie_width[n, g] = int(f.parameters["width"])
    s.st.pcie_replay[n, g] += s.rng.poisson(0.05 * f.overlap(s.t0, s.t1))


def thermal_throttle(f: Fault, s: Step) -> None:
    if f.state_at(s.t1):
        n, g, c = f.nodes[0], _gpus(f), float(f.parameters["clock_factor"])
        s.eff.temp_add[n, g] += float(f.parameters["temp_add"])
        s.eff.clock[n, g] *= c
        s.eff.speed[n, g] *= c
        s.eff.throttle[n, g] |= HW_THERMAL | SW_THERMAL


def power_throttle(f: Fault, s: Step) -> None:
    if f.state_at(s.t1):
        n, g, c = f.nodes[0], _gpus(f), float(f.parameters["clock_factor"])
        s.eff.power_cap_w[n, g] = float(f.parameters["cap_w"])
        s.eff.clock[n, g] *= c
        s.eff.speed[n, g] *= c
        s.eff.throttle[n, g] |= HW_POWER_BRAKE if f.parameters["brake"] else SW_POWER_CAP


def straggler(f: Fault, s: Step) -> None:
    """A fail-slow GPU (or every GPU of a node): lower clocks, less work per second."""
    if f.state_at(s.t1):
        n, g, slow = f.nodes[0], _gpus(f), float(f.parameters["slowdown"])
        s.eff.clock[n, g] *= 1.0 - slow
        s.eff.speed[n, g] *= 1.0 - slow


def _cleared_unless_64(f: Fault) -> bool:
    return int(f.parameters.get("xid", 0)) != 64


def _always(f: Fault) -> bool:
    return True


KINDS = (
    FaultKind(
        "xid",
        "gpu",
        xid,
        {"xid": Param(79, choices=FATAL_XIDS)},
        help="fatal XID; 79 loses the GPU, 119 hangs it, 48/95/64 hit memory",
        clears_on_reboot=_cleared_unless_64,
    ),
    FaultKind(
        "app_xid",
        "gpu",
        app_xid,
        {"xid": Param(13, choices=APPLICATION_XIDS), "restart_s": Param(120.0, 0, 86400)},
        hardware=False,
        negative_control=True,
        help="application XID: the job's fault",
    ),
    FaultKind(
        "gpu_fallen_off_bus",
        "gpu",
        fallen_off_bus,
        {"message": Param(True)},
        help="GPU lost without an Xid line",
        clears_on_reboot=_always,
    ),
    FaultKind(
        "ecc_sbe_storm",
        "gpu",
        ecc_sbe_storm,
        {"rate": Param(0.5, 0.001, 1000), "escalate_after_s": Param(1800.0, 0, 1e7)},
        help="corrected ECC storm escalating to a double-bit error",
    ),
    FaultKind("row_remap_pending", "gpu", row_remap_pending, clears_on_reboot=_always),
    FaultKind("row_remap_failure", "gpu", xid, {"xid": Param(64, choices=(64,))}),
    FaultKind(
        "pcie_downgrade",
        "gpu_or_node",
        pcie_downgrade,
        {"generation": Param(4, 1, 5), "width": Param(8, choices=(1, 2, 4, 8, 16))},
    ),
    FaultKind(
        "thermal_throttle",
        "gpu_or_node",
        thermal_throttle,
        {"temp_add": Param(25.0, 0, 80), "clock_factor": Param(0.75, 0.1, 1.0)},
    ),
    FaultKind(
        "power_throttle",
        "gpu_or_node",
        power_throttle,
        {
            "cap_w": Param(400.0, 100, 700),
            "clock_factor": Param(0.8, 0.1, 1.0),
            "brake": Param(False),
        },
    ),
    FaultKind(
        "straggler",
        "gpu_or_node",
        straggler,
        {"slowdown": Param(0.1, 0.01, 0.9)},
        help="fail-slow GPU or node: clocks and throughput low, peers idle more",
    ),
)
