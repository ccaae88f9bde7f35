"""Faults of partitioned GPUs: an XID the driver attributes to one MIG GPU instance, and a
stalled instance (its replica stops serving while its peers carry on).

The XID applies to the physical GPU, whatever instance the kernel-log line names (NVIDIA XID
catalogue: 48 and 95 call for a GPU reset, which ends every instance of the GPU; 94, a
contained error, for restarting the application); the model writes what the plain ``xid``
kind writes for the GPU and tags the line with the instance
(``NVRM: Xid (PCI:0000:18:00 GPU-I:07): 95, ...``). A 48 (DBE) counts its
uncorrectable ECC error on the parent GPU, as NVML reports ECC per physical GPU.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from simulator.faults import gpu
from simulator.faults.base import Fault, FaultError, FaultKind, Param, Step
from simulator.partitions import Layout

INSTANCE_XIDS = (48, 94, 95)  # DBE, contained and uncontained ECC errors


def _slot(layouts: Mapping[int, Layout], n: int, g: int, instance: int) -> int | None:
    layout = layouts.get(n)
    part = layout[g] if layout is not None else None
    if part is None or instance not in part.instance_ids():
        return None
    return part.instance_ids().index(instance)


def mig_xid(f: Fault, s: Step) -> None:
    before = len(s.eff.events)
    gpu.xid(f, s)  # the parent GPU's state and counters, as for any XID
    x, gi = int(f.parameters["xid"]), int(f.parameters["instance"])
    s.eff.events[before:] = [
        dataclasses.replace(e, instance=gi) if e.xid == x else e for e in s.eff.events[before:]
    ]


def instance_stall(f: Fault, s: Step) -> None:
    if not f.state_at(s.t1):
        return
    n, g = f.nodes[0], f.gpu
    slot = _slot(s.layouts, n, g, int(f.parameters["instance"]))
    if slot is not None:
        s.eff.instance_speed[n, g, slot] = 1.0 - float(f.parameters["slowdown"])


def check_instance(f: Fault, layouts: Mapping[int, Layout], node: str) -> None:
    """FaultError unless the fault's GPU instance exists on that GPU of ``node``."""
    n, gi = f.nodes[0], int(f.parameters["instance"])
    if _slot(layouts, n, f.gpu, gi) is None:
        layout = layouts.get(n)
        part = layout[f.gpu] if layout is not None else None
        have = (
            "no instances (not partitioned)"
            if part is None
            else (f"instances {', '.join(map(str, part.instance_ids()))} ({part.profile})")
        )
        raise FaultError(f"{f.kind}: {node} gpu{f.gpu} has {have}, not instance {gi}")


KINDS = (
    FaultKind(
        "mig_xid",
        "gpu",
        mig_xid,
        {"xid": Param(95, choices=INSTANCE_XIDS), "instance": Param(7, 0, 14)},
        help="XID the driver attributes to a MIG GPU instance (GPU-I); the physical GPU's fault",
        clears_on_reboot=lambda f: True,
    ),
    FaultKind(
        "instance_stall",
        "gpu",
        instance_stall,
        {"instance": Param(7, 0, 14), "slowdown": Param(0.6, 0.05, 1.0)},
        help="one GPU instance (MIG) or compute partition (AMD) serves far less than its peers",
    ),
)
PARTITION_KINDS = frozenset(k.name for k in KINDS)
