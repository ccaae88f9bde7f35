"""AMD Instinct in the fleet model: which nodes are AMD, their XGMI hive, their RAS events.

A leaf of :mod:`simulator` beside :mod:`simulator.topology`: an MI300X node has 8 OAM GPUs
joined all-to-all by XGMI (one link per peer GPU, ``link_index`` = the peer's index; a GPU's
own index carries nothing, as amdsmi reports it) and 8 NICs. RAS errors are counted per
hardware block (``exporter.catalog.RAS_BLOCKS``: ``umc`` is HBM, ``xgmi_wafl`` the XGMI
link) and error type; a RAS event (a CPER record) carries AMD Field IDs (AFIDs). The CPER
severity of each AFID the simulator emits is AMD's (the AFID list in AMD's "Instinct GPU
RAS / AFID" documentation, vendored with its origin in analyzer/afid_catalog.yaml;
tests/simulator/test_amd_fleet.py checks this table against it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from exporter import catalog as c

AMD_SKUS = frozenset({"mi300x"})
XGMI_LINKS = 8  # one per GPU of the hive (the own index idle)
XGMI_GPU_BYTES_S = 448e9 / 2  # MI300X: 7 links x 64 GB/s per direction ~ 448 GB/s aggregate
BLOCK = {b: i for i, b in enumerate(c.RAS_BLOCKS)}
ERROR = {t: i for i, t in enumerate(c.RAS_ERROR_TYPES)}
# AFID -> CPER severity of the record that carries it (AMD's AFID list)
AFID_SEVERITY = {
    17: "non_fatal_corrected",  # XGMI link (PCS) error, corrected
    18: "fatal",  # XGMI link (PCS) error, uncorrected
    20: "fatal",  # HBM uncorrectable error, fatal
    22: "non_fatal_uncorrected",  # HBM uncorrectable error, poison contained
    24: "non_fatal_corrected",  # HBM error, corrected
    26: "fatal",  # hardware assertion
    27: "fatal",  # watchdog timeout
    28: "non_fatal_uncorrected",  # other non-fatal uncorrected error
    30: "fatal",  # other fatal error
}
HBM_FATAL, HBM_CONTAINED, XGMI_UNCORRECTED = 20, 22, 18


@dataclass(frozen=True)
class RasEvent:
    """One RAS event (CPER record) with one AFID on one GPU at time ``t``."""

    t: float
    node: int
    gpu: int
    afid: int
    severity: str


def amd_rows(skus: Sequence[str]) -> np.ndarray:
    """Per node: an AMD node?"""
    return np.array([s in AMD_SKUS for s in skus], dtype=bool)


def xgmi_start(n: int, gpus: int) -> np.ndarray:
    """(n, gpus, links) KB-scale traffic some days into the fleet's life, no draw from the
    fleet's generator (homogeneous NVIDIA fleets replay bit for bit): 0 on the own index."""
    k = np.arange(XGMI_LINKS)
    base = 1e12 * (1.0 + k / 10.0)[None, None, :] * (1.0 + np.arange(gpus) / 20.0)[None, :, None]
    own = np.arange(gpus)[:, None] == k[None, :]
    return np.broadcast_to(np.where(own[None], 0.0, base), (n, gpus, XGMI_LINKS)).copy()
