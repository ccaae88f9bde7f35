"""GPU model names as one spelling per family, so that sources merge into one cell.

The journal and Prometheus give NVML's device name (``NVIDIA H100 80GB HBM3``), imported
history (RMA records, tickets, the simulator) usually the family (``H100``). A reliability
cell is a family, with the PCIe cards kept apart (another board, cooling and power):
``NVIDIA H100 80GB HBM3`` and ``H100`` are ``H100``, ``NVIDIA A100-PCIE-40GB`` is
``A100 PCIe``. A name with no family in it is kept as given.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from accounting.model import Exposure, Incident

# NVIDIA's data-centre families: a letter or two and 2-3 digits, optionally a suffix
# letter (A100, H100, H200, B200, GB200, GH200, L40S, V100, A10G); a word of its own.
FAMILY = re.compile(r"(?<![A-Z0-9])(G?[A-Z]{1,2}\d{2,3}[A-Z]?)(?![A-Z0-9])")


def family(name: str) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``H100``; ``NVIDIA H100 PCIe`` -> ``H100 PCIe``."""
    upper = name.strip().upper()
    found = FAMILY.search(upper.removeprefix("NVIDIA "))
    if found is None:
        return name.strip()
    pcie = "PCIE" in upper.replace("-", " ").split() or "-PCIE" in upper
    return found.group(1) + (" PCIe" if pcie else "")


def normalised(
    incidents: Sequence[Incident], exposure: Sequence[Exposure]
) -> tuple[list[Incident], list[Exposure]]:
    """The same records with every model spelt as its family."""
    return (
        [dataclasses.replace(i, gpu_model=family(i.gpu_model)) for i in incidents],
        [dataclasses.replace(r, gpu_model=family(r.gpu_model)) for r in exposure],
    )
