"""Detectors: one module per fault family, each a pure judgement over a :class:`Window`.

Data flow: source -> Window -> every detector here -> findings -> outputs. A detector may
keep state between cycles (XID history, flap counts); it never does I/O. The set is built
explicitly by :func:`default_detectors`; nothing registers itself at import time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol

from analyzer.findings import Finding
from analyzer.window import Window


class Detector(Protocol):
    name: str

    def detect(self, window: Window) -> list[Finding]: ...


def default_detectors(config: Mapping[str, Any] | None = None) -> list[Detector]:
    """The full detector set, configured from the analyzer config's ``detectors`` mapping."""
    from analyzer.afidcat import load_catalog as load_afids
    from analyzer.detectors.afid import AfidDetector
    from analyzer.detectors.fabric import FabricDetector
    from analyzer.detectors.fabric_services import FabricServicesDetector
    from analyzer.detectors.infiniband import InfinibandDetector
    from analyzer.detectors.instances import InstanceStragglerDetector
    from analyzer.detectors.marginal import MarginalDetector
    from analyzer.detectors.memory import MemoryDetector
    from analyzer.detectors.missing import MissingDetector
    from analyzer.detectors.nvlink import NvlinkDetector
    from analyzer.detectors.pcie import PcieDetector
    from analyzer.detectors.peer import PeerDetector
    from analyzer.detectors.power_brake import PowerBrakeDetector
    from analyzer.detectors.ras import RasDetector
    from analyzer.detectors.roce import RoceDetector
    from analyzer.detectors.storage import StorageDetector
    from analyzer.detectors.straggler import StragglerDetector
    from analyzer.detectors.throttling import ThrottlingDetector
    from analyzer.detectors.xgmi import XgmiDetector
    from analyzer.detectors.xid import XidDetector
    from analyzer.xidcat import load_catalog

    cfg = dict(config or {})
    xid_overrides = cfg.get("xid_overrides") or {}
    peer_cfg = dict(cfg.get("peer") or {})
    return [
        XidDetector(load_catalog(overrides=xid_overrides)),
        AfidDetector(load_afids(overrides=cfg.get("afid_overrides") or {})),
        MissingDetector(),
        MemoryDetector(),
        RasDetector(),
        NvlinkDetector(),
        XgmiDetector(),
        FabricDetector(),
        FabricServicesDetector(),
        InfinibandDetector(expected_rate=cfg.get("ib_expected_rate_bytes")),
        RoceDetector(**dict(cfg.get("roce") or {})),
        PcieDetector(),
        ThrottlingDetector(),
        PowerBrakeDetector(),
        PeerDetector(**peer_cfg),
        StragglerDetector(),
        InstanceStragglerDetector(**dict(cfg.get("instances") or {})),
        StorageDetector.from_config(cfg.get("storage")),
        MarginalDetector(**dict(cfg.get("marginal") or {})),
    ]
