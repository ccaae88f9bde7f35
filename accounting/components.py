"""Which component failed, from the fault class and the finding's labels.

The fault classes are the alert rules' (alerts/findings.rules.yml); an XID refines a GPU
fault by the class NVIDIA's XID catalogue gives it, as gpuwarden keeps it in
analyzer/xid_catalog.yaml (docs.nvidia.com/deploy/xid-errors): memory XIDs (48, 63, 64,
92-95, 140, ...) are gpu_memory, link XIDs (74 and the NVLink5 144-150, 155, ...) nvlink,
application and driver XIDs software (NVIDIA's resolution for them is the application's or
the driver's, not the board's), power XIDs host (the rack's power delivery).

An AMD GPU's RAS event (AFID) is refined the same way by the AFID catalogue's class
(analyzer/afid_catalog.yaml: memory, link, firmware, hardware), which the AFID alerts carry as
``afid_class`` (alerts/amd_rules.py): an HBM event is gpu_memory, an XGMI link event nvlink
(the GPU-to-GPU fabric, whichever vendor's).

The XID alerts carry the class as the label ``xid_class`` (alerts/generate_xid_rules.py);
an alert without it (a findings rule, an older journal) has its XID's class read from the
catalogue file, read as data (accounting runs no analyzer code); without it (a trimmed
install) the fault class alone decides.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from pathlib import Path

import yaml

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
# The catalogue's classes that name another component than the GPU board; hardware,
# firmware, consequence and informational XIDs stay with the fault class's component.
BY_XID_CLASS = {
    "memory": "gpu_memory",
    "link": "nvlink",
    "application": "software",
    "driver": "software",
    "power": "host",
}
CATALOGUE = Path(__file__).resolve().parents[1] / "analyzer" / "xid_catalog.yaml"


@cache
def xid_classes(path: Path = CATALOGUE) -> Mapping[str, str]:
    """XID (as the label's string) -> its class in the catalogue; empty when unreadable."""
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError):
        return {}
    table = data.get("xids") if isinstance(data, dict) else None
    if not isinstance(table, dict):
        return {}
    return {
        str(xid): str(entry["class"])
        for xid, entry in table.items()
        if isinstance(entry, dict) and "class" in entry
    }


def component(
    fault_class: str,
    labels: Mapping[str, str] | None = None,
    classes: Mapping[str, str] | None = None,
) -> str:
    base = BY_FAULT_CLASS.get(fault_class, "unknown")
    if base != "gpu":
        return base
    labels = labels or {}
    if labels.get("afid_class"):
        return BY_XID_CLASS.get(labels["afid_class"], base)
    xid_class = labels.get("xid_class") or (xid_classes() if classes is None else classes).get(
        str(labels.get("xid", ""))
    )
    return BY_XID_CLASS.get(xid_class or "", base)
