"""Which component failed, from the fault class and the finding's labels.

The fault classes are the alert rules' (alerts/findings.rules.yml); an XID refines a GPU
fault: the memory XIDs (48 DBE, 63/64 row remapping, 92/94/95 ECC containment, per NVIDIA's
XID catalogue, docs.nvidia.com/deploy/xid-errors) are gpu_memory, XID 74 is NVLink.
"""

from __future__ import annotations

from collections.abc import Mapping

BY_FAULT_CLASS = {
    "xid_fatal": "gpu",
    "gpu_lost": "gpu",
    "thermal": "gpu",
    "memory": "gpu_memory",
    "nvlink": "nvlink",
    "infiniband": "nic",
    "switch": "nic",
    "pcie": "host",
    "faulty_machine": "host",
    "storage": "storage",
    "xid_application_repeated": "software",
}
MEMORY_XIDS = frozenset({"48", "63", "64", "92", "94", "95"})
NVLINK_XIDS = frozenset({"74"})


def component(fault_class: str, labels: Mapping[str, str] | None = None) -> str:
    base = BY_FAULT_CLASS.get(fault_class, "unknown")
    xid = (labels or {}).get("xid")
    if base == "gpu" and xid in MEMORY_XIDS:
        return "gpu_memory"
    if base == "gpu" and xid in NVLINK_XIDS:
        return "nvlink"
    return base
