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

from analyzer.afidcat import AfidCatalog
from analyzer.findings import Finding
from analyzer.window import AfidEvent, Window

_RANK = {"critical": 3, "warning": 2, "info": 1}
_CPER_CODE = {"fatal": 1.0, "non_fatal_uncorrected": 0.0, "non_fatal_corrected": 2.0}
LOST_NOTE = ("DME keeps the last RAS event's AFIDs only: an earlier event between two scrapes"
             " is lost")  # fmt: skip


class AfidDetector:
    name = "afid"

    def __init__(self, catalog: AfidCatalog, hold: float = 600.0) -> None:
        self.catalog, self.hold = catalog, hold
        self._watermark = float("-inf")
        self._active: dict[tuple[str, str, str], tuple[Finding, float]] = {}

    def detect(self, window: Window) -> list[Finding]:
        fresh = [e for e in window.afids if e.t > self._watermark and e.node < len(window.nodes)]
        if window.afids:
            self._watermark = max(self._watermark, max(e.t for e in window.afids))
        for e in sorted(fresh, key=lambda e: e.t):
            self._judge(window.nodes[e.node], e)
        now = window.now
        self._active = {k: v for k, v in self._active.items() if v[1] > now}
        return [f for f, _ in self._active.values()]

    def _judge(self, node: str, e: AfidEvent) -> None:
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
        since = old[0].since if old else e.t
        f = Finding(node, key[1], kind, info.severity, info.action, self.name,
                    1.0 if info.fatal else 0.8, since, evidence, summary)  # fmt: skip
        self._active[key] = (f, e.t + self.hold)
