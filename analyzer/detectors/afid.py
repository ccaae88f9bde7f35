"""AMD RAS events: each AFID judged by the AFID catalogue (:mod:`analyzer.afidcat`).

Reads ``Window.afids`` (events the source decoded from ``gpu_ras_events_total`` increases or
from DME's last-event gauge ``gpu_afid_errors``). Stateful like the XID detector: an event is
judged once (a watermark), its finding stays active for ``hold`` seconds, one finding per GPU
and kind holding the gravest event. Corrected events (info) are counted, not reported.
An event read from DME's gauge says so in its evidence (``last_event_only``): DME keeps the
AFIDs of the last RAS event only, so an earlier event between two scrapes is lost and a repeat
of the same list is invisible; CPER records read through amdsmi keep them all.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

import numpy as np

from analyzer.afidcat import AfidCatalog
from analyzer.detectors.events import fresh
from analyzer.detectors.ras import rises
from analyzer.detectors.recall import entries, first, held_doc, held_of, ident, replaced
from analyzer.findings import Finding
from analyzer.window import ECC_COUNTER_TYPES, ECC_ERROR_TYPES, AfidEvent, Window
from exporter import catalog

_RANK = {"critical": 3, "warning": 2, "info": 1}
_CPER_CODE = {"fatal": 1.0, "non_fatal_uncorrected": 0.0, "non_fatal_corrected": 2.0}
LOST_NOTE = ("DME keeps the last RAS event's AFIDs only: an earlier event between two scrapes"
             " is lost")  # fmt: skip


class AfidDetector:
    name = "afid"

    def __init__(self, catalog: AfidCatalog, hold: float = 600.0) -> None:
        self.catalog, self.hold = catalog, hold
        self._watermark: dict[str, float] = {}  # per node (analyzer.detectors.events)
        self._active: dict[tuple[str, str, str], tuple[Finding, float]] = {}

    def detect(self, window: Window) -> list[Finding]:
        new = fresh(window.afids, window.nodes, self._watermark)
        unseen = _unseen(window) if any(e.last_only for e in new) else None
        for e in sorted(new, key=lambda e: e.t):
            self._judge(window.nodes[e.node], e, unseen)
        now = window.now
        self._active = {k: v for k, v in self._active.items() if v[1] > now}
        return [f for f, _ in self._active.values()]

    def remember(self, nodes: Set[str]) -> dict[str, Any]:
        """Per node, the newest event judged and the findings held."""
        return {"watermark": dict(entries(self._watermark, nodes, ident)),
                "active": held_doc(self._active, nodes)}  # fmt: skip

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> None:
        marks = [(str(n), float(t)) for n, t in dict(doc.get("watermark", {})).items()]
        active = held_of(doc.get("active", []))
        self._watermark = replaced(self._watermark, nodes, ident, marks)
        self._active = replaced(self._active, nodes, first, active)

    def _judge(self, node: str, e: AfidEvent, unseen: np.ndarray | None = None) -> None:
        info = self.catalog.get(e.afid, e.severity)
        if info.severity == "info" and info.action == "notify":
            return
        kind = "afid_fatal" if info.fatal else "afid_event"
        key = (node, f"gpu={e.gpu}", kind)
        old = self._active.get(key)
        if old and _RANK[old[0].severity] > _RANK[info.severity]:
            return
        evidence = {"afid": float(e.afid), "events": float(e.count),
                    "cper_severity": _CPER_CODE.get(e.severity, -1.0)}  # fmt: skip
        summary = f"AFID {e.afid} {info.name} ({e.severity or 'severity unknown'})"
        if info.amd.condition:
            summary += f"; AMD: {info.amd.condition}, {info.amd.remediation}"
        if e.last_only:
            evidence["last_event_only"] = 1.0
            summary += f" [{LOST_NOTE}]"
            if unseen is not None and e.gpu < unseen.shape[1] and unseen[e.node, e.gpu] > 0:
                # more uncorrectable errors than events the gauge showed: some were lost
                evidence["uncorrected_errors_without_event"] = float(unseen[e.node, e.gpu])
                summary += (
                    f" [{unseen[e.node, e.gpu]:g} uncorrectable error(s) without a seen event]"
                )
        since = old[0].since if old else e.t
        f = Finding(node, key[1], kind, info.severity, info.action, self.name,
                    1.0 if info.fatal else 0.8, since, evidence, summary)  # fmt: skip
        self._active[key] = (f, e.t + self.hold)


def _unseen(window: Window) -> np.ndarray | None:
    """(node, gpu): uncorrectable ECC errors within the window beyond the RAS events the
    last-event gauge showed there (a lower bound of the events it lost)."""
    a = window.get(catalog.GPU_ECC_ERRORS)
    if a is None or a.ndim != 5:
        return None
    ue = rises(a[..., ECC_ERROR_TYPES.index("uncorrected"), ECC_COUNTER_TYPES.index("volatile")])
    seen = np.zeros(ue.shape)
    rows, cols = int(ue.shape[0]), int(ue.shape[-1])
    for e in window.afids:
        if e.node < rows and e.gpu < cols and e.severity != "non_fatal_corrected":
            seen[e.node, e.gpu] += 1
    return np.clip(ue - seen, 0, None)
