"""NVL72 fabric faults: a GPU's fabric route, the rack's switch tray or fabric manager, a tray's
IMEX daemon, the rack's power brake.

Target: a GB200 tray (``node``; ``gpu<N>`` for a route). The frame model has no fabric signal,
so ``apply`` changes nothing in it (as storage faults); what the fault does is applied to the
tray's NVML and systemd fakes when the node is served (:func:`simulator.nvl72.apply_faults`),
which the exporter's real collectors render. Rack-wide kinds act on every tray of the named
tray's rack.
"""

from __future__ import annotations

from simulator.faults.base import Fault, FaultKind, Step

ROUTE, SWITCH_TRAY, FABRIC_MANAGER, IMEX, POWER_BRAKE = (
    "fabric_route_unhealthy",
    "nvlink_switch_tray_down",
    "fabric_manager_stopped",
    "imex_unhealthy",
    "rack_power_brake",
)
RACK_WIDE = frozenset({SWITCH_TRAY, FABRIC_MANAGER, POWER_BRAKE})


def _served(f: Fault, s: Step) -> None:
    """Nothing in the frame: see simulator.nvl72.apply_faults."""


KINDS = (
    FaultKind(ROUTE, "gpu", _served, help="one GB200 GPU's NVLink fabric route unhealthy"),
    FaultKind(SWITCH_TRAY, "node", _served,
              help="an NVLink switch tray of the named tray's rack down: every GPU of the rack"
              " at degraded bandwidth, links 0 and 9 down"),
    FaultKind(FABRIC_MANAGER, "node", _served,
              help="the rack's global fabric manager unreachable (every GPU's GFM bit set)"),
    FaultKind(IMEX, "node", _served, help="the tray's nvidia-imex unit failed"),
    FaultKind(POWER_BRAKE, "node", _served, hardware=False,
              help="the rack's hardware power brake asserted (clocks-event 0x88 on every GPU:"
              " the brake and the HW slowdown NVML sets with it): the facility's, never a drain"),
)  # fmt: skip
