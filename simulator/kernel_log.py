"""Kernel-log lines for fleet events, in /dev/kmsg record format with NVIDIA's NVRM wording.

Sits between the fleet's :class:`~simulator.effects.Event` list and each simulated node's
:class:`~exporter.sources.kmsg.ListKernelLog`, so the real XID parser reads what a real driver
writes: ``4,<seq>,<usec>,-;NVRM: Xid (PCI:0000:18:00): 79, pid=..., name=..., <text>`` plus the
``SUBSYSTEM``/``DEVICE`` continuation lines, and the multi-part fallen-off-the-bus message
(https://docs.nvidia.com/deploy/xid-errors/).
"""

from __future__ import annotations

from simulator.effects import Event
from simulator.nvml_fake import GB200_PCI_DOMAINS
from simulator.topology import NVL72_SKU, kernel_pci

PCI_IDS = {"h100": "10de:2330", "h200": "10de:2335", "a100": "10de:20b2", "l40s": "10de:26b9"}
TEXT = {
    13: "Graphics SM Warp Exception on (GPC 1, TPC 0, SM 1): Out Of Range Address",
    31: "MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f3a_1c000000. Fault is of type"
    " FAULT_PDE ACCESS_TYPE_VIRT_READ",
    43: "Ch 00000010",
    48: "An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at"
    " partition 6, subpartition 0.",
    63: "Row Remapper: New row (0x0000000000c0ffee) marked for remapping, reset gpu to activate.",
    64: "Row Remapper: Failed to remap row (0x0000000000c0ffee). Please reset the GPU.",
    79: "GPU has fallen off the bus.",
    94: "Contained: SM (0x1). RST: Yes, D-RST: No",
    95: "Uncontained: FBHUB. RST: Yes, D-RST: No",
    119: "Timeout after 6s of waiting for RPC response from GPU{gpu} GSP! Expected function 76"
    " (GSP_RM_CONTROL) (0x2080014b 0x5).",
}


def _pci(gpu: int, sku: str) -> str:
    """The kernel's ``dddd:bb:dd`` of a GPU: an NVL72 tray's GPUs sit in their own PCI domains
    (as the NVML fake's GB200, ``0018:01:00``), an HGX board's on its buses."""
    return f"{GB200_PCI_DOMAINS[gpu]}:01:00" if sku == NVL72_SKU else kernel_pci(gpu)


def message(e: Event, sku: str = "h100") -> str:
    """The NVRM message of one event (without the kmsg envelope)."""
    pci = _pci(e.gpu, sku)
    if e.text == "fallen_off_bus":
        return (
            f"NVRM: The NVIDIA GPU {pci}.0\\x0aNVRM: (PCI ID: {PCI_IDS[sku]}) installed in this"
            " system has\\x0aNVRM: fallen off the bus and is not responding to commands."
        )
    if e.text.startswith("nvlink5:"):  # NVLink5 (144-150): no pid/name, the unit's decode key
        unit, severity, link, intrinfo = e.text.split(":")[1:]
        return (
            f"NVRM: Xid (PCI:{pci}): {e.xid}, {unit} {severity} XC0 i0 Link {int(link):02d}"
            f" ({intrinfo} 0x00000000 0x00000000 0x00000000)"
        )
    if e.text.startswith("nvlink:"):
        link = e.text.split(":", 1)[1]
        text = f"NVLink: fatal error detected on link {link}(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)"
    else:
        text = TEXT.get(e.xid, "").format(gpu=e.gpu)
    who = (
        f"pid={4000 + e.gpu}, name=python" if e.text == "app" else "pid='<unknown>', name=<unknown>"
    )
    # a MIG GPU instance's XID: the driver adds the instance after the GPU's address
    # (open-gpu-kernel-modules kernel_rc_notification.c, "PCI:%04x:%02x:%02x GPU-I:%02u")
    where = pci if e.instance < 0 else f"{pci} GPU-I:{e.instance:02d}"
    return f"NVRM: Xid (PCI:{where}): {e.xid}, {who}, {text}"


def kmsg_lines(e: Event, seq: int, sku: str = "h100") -> list[str]:
    """One kmsg record (``prio,seq,usec,flags;message``) and its continuation lines."""
    usec = round(float(e.t) * 1e6)
    return [
        f"4,{seq},{usec},-;{message(e, sku)}",
        " SUBSYSTEM=pci",
        f" DEVICE=+pci:{_pci(e.gpu, sku)}.0",
    ]
