"""NVL72 fabric faults: a GPU's fabric route, the rack's switch tray or fabric manager, a tray's
IMEX daemon, the rack's power brake.

Target: a GB200 tray (``node``; ``gpu<N>`` for a route). The frame model has no fabric signal,
so ``apply`` changes nothing in it (as storage faults); what the fault does is applied to the
tray's NVML and systemd fakes when the node is served (:func:`simulator.nvl72.apply_faults`),
which the exporter's real collectors render. Rack-wide kinds act on every tray of the named
tray's rack.

A switch tray down is also in the kernel log: each GPU of the rack logs XID 149 (NVLink5
NETIR) ``NETIR_LINK_EVT/NETIR_LINK_DOWN`` for each of its two links the tray carried, with
sub-code 32 (intrinfo bits 20-25), a row of NVIDIA's "XID 144-150 Decode" table whose
investigatory action is INVESTIGATE_PEER_DEVICE: the link went down because its far end, the
NVSwitch, did (the decode rows 32-37 all say so; which of them a lost switch tray prints is not
recorded here: no GB200 was lent to this work). Link Fatal, RESET_GPU per GPU; the fabric
rules' domain alert is what names the rack (alerts/fabric.rules.yml).
"""

from __future__ import annotations

from simulator.faults.base import Fault, FaultKind, Step
from simulator.topology import NVL72_GPUS_PER_TRAY, NVL72_SWITCH_TRAY_LINKS, nvl72_rack_of

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


# XID 149's NETIR_LINK_DOWN line with sub-code 32 (peer device): intrinfo bits 20-25 = 0b100000,
# the low bits as in NVIDIA's decode rows for this unit (intrinfo_v2 ...0010001)
PEER_DOWN = ("NETIR_LINK_EVT/NETIR_LINK_DOWN", 0x02000011)


def _switch_tray_down(f: Fault, s: Step) -> None:
    """Every GPU of the rack logs XID 149 for each link the switch tray carried, at onset."""
    if not f.starts_in(s.t0, s.t1) or not f.nodes or not s.skus:
        return
    rack = nvl72_rack_of(s.skus, f.nodes[0])
    if rack is None:
        return
    unit, intrinfo = PEER_DOWN
    for n in range(len(s.skus)):
        if nvl72_rack_of(s.skus, n) != rack:
            continue
        for g in range(NVL72_GPUS_PER_TRAY):
            for link in NVL72_SWITCH_TRAY_LINKS:
                s.event(n, g, 149, f"nvlink5:{unit}:Fatal:{link}:{intrinfo:#010x}", f.onset)


KINDS = (
    FaultKind(ROUTE, "gpu", _served, help="one GB200 GPU's NVLink fabric route unhealthy"),
    FaultKind(SWITCH_TRAY, "node", _switch_tray_down,
              help="an NVLink switch tray of the named tray's rack down: every GPU of the rack"
              " at degraded bandwidth, links 0 and 9 down, XID 149 NETIR_LINK_DOWN (peer) on"
              " each"),
    FaultKind(FABRIC_MANAGER, "node", _served,
              help="the rack's global fabric manager unreachable (every GPU's GFM bit set)"),
    FaultKind(IMEX, "node", _served, help="the tray's nvidia-imex unit failed"),
    FaultKind(POWER_BRAKE, "node", _served, hardware=False,
              help="the rack's hardware power brake asserted (clocks-event 0x88 on every GPU:"
              " the brake and the HW slowdown NVML sets with it): the facility's, never a drain"),
)  # fmt: skip
