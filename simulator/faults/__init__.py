"""Fault kinds the fleet can inject, one module per family; :data:`KINDS` is the full table."""

from __future__ import annotations

from simulator.faults import amd, fabric, gpu, infiniband, nvlink, partitions, storage, workload
from simulator.faults.base import Fault, FaultError, FaultKind, make_fault

KINDS: dict[str, FaultKind] = {
    k.name: k
    for mod in (gpu, nvlink, infiniband, workload, storage, fabric, amd, partitions)
    for k in mod.KINDS
}

__all__ = ["KINDS", "Fault", "FaultError", "FaultKind", "make_fault"]
