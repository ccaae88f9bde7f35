"""XID interpretation: coalesce bursts, fold chains into incidents, escalate repetition.

Reads ``Window.xids`` (events the source decoded from ``gpu_xid_errors_total`` increases or
the simulator's frame events) and the XID catalogue (:mod:`analyzer.xidcat`). Stateful: it
remembers incidents across cycles to escalate repeated application XIDs across jobs and
fatal XIDs that come back after reboots. Findings stay active for ``hold`` seconds.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Set
from dataclasses import dataclass
from typing import Any

from analyzer.detectors.events import fresh
from analyzer.detectors.recall import entries, first, held_doc, held_of, ident, replaced
from analyzer.findings import Finding
from analyzer.window import Window, XidEvent
from analyzer.xidcat import XidCatalog, XidInfo

_CLASS_RANK = {"consequence": 0, "informational": 0, "application": 1}
_SEV_RANK = {"critical": 3, "warning": 2, "info": 1}


@dataclass
class _Incident:
    node: str
    gpu: int
    start: float
    last: float
    xids: list[int]
    count: int


class XidDetector:
    name = "xid"

    def __init__(
        self,
        catalog: XidCatalog,
        burst: float = 5.0,
        chain: float = 10.0,
        hold: float = 600.0,
        recur_after: float = 600.0,
        recur_count: int = 3,
        recur_window: float = 7 * 86400.0,
    ) -> None:
        self.catalog = catalog
        self.burst, self.chain, self.hold = burst, chain, hold
        self.recur_after, self.recur_count, self.recur_window = (
            recur_after,
            recur_count,
            recur_window,
        )
        # per node, the newest event judged: a node another replica judged until now (or
        # an engine just started) has its events in the window read afresh
        self._watermark: dict[str, float] = {}
        self._open: dict[tuple[str, int], _Incident] = {}
        self._active: dict[tuple[str, str, str], tuple[Finding, float]] = {}
        self._app: dict[tuple[str, int], deque[tuple[float, int, str]]] = defaultdict(deque)
        self._fatal: dict[tuple[str, int, int], list[float]] = defaultdict(list)

    def detect(self, window: Window) -> list[Finding]:
        now = window.now
        events = sorted(fresh(window.xids, window.nodes, self._watermark), key=lambda e: e.t)
        jobs_of = _jobs_by_node(window)
        for e in events:
            self._add(window.nodes[e.node], e, jobs_of.get(e.node, ""))
        for key in [k for k, inc in self._open.items() if now - inc.last > self.chain]:
            self._close(self._open.pop(key))
        for key in list(self._open):
            self._close(self._open[key], final=False)
        self._active = {k: v for k, v in self._active.items() if v[1] > now}
        return [f for f, _ in self._active.values()]

    def remember(self, nodes: Set[str]) -> dict[str, Any]:
        """Per node, the newest event judged, the open incidents, the findings held, the
        application XIDs' and the fatal XIDs' history (:mod:`analyzer.detectors.recall`)."""
        return {
            "watermark": dict(entries(self._watermark, nodes, ident)),
            "open": [[i.node, i.gpu, i.start, i.last, list(i.xids), i.count]
                     for _, i in entries(self._open, nodes, first)],
            "active": held_doc(self._active, nodes),
            "app": [[n, g, [list(x) for x in h]] for (n, g), h in entries(self._app, nodes, first)
                    if h],
            "fatal": [[n, g, x, list(ts)] for (n, g, x), ts in entries(self._fatal, nodes, first)
                      if ts],
        }  # fmt: skip

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> None:
        marks = [(str(n), float(t)) for n, t in dict(doc.get("watermark", {})).items()]
        open_ = [((str(n), int(g)), _Incident(str(n), int(g), float(a), float(b),
                                              [int(x) for x in xs], int(c)))
                 for n, g, a, b, xs, c in doc.get("open", [])]  # fmt: skip
        active = held_of(doc.get("active", []))
        app = [((str(n), int(g)), deque((float(t), int(x), str(j)) for t, x, j in h))
               for n, g, h in doc.get("app", [])]  # fmt: skip
        fatal = [((str(n), int(g), int(x)), [float(t) for t in ts])
                 for n, g, x, ts in doc.get("fatal", [])]  # fmt: skip
        self._watermark = replaced(self._watermark, nodes, ident, marks)
        self._open = replaced(self._open, nodes, first, open_)
        self._active = replaced(self._active, nodes, first, active)
        self._app = defaultdict(deque, replaced(self._app, nodes, first, app))
        self._fatal = defaultdict(list, replaced(self._fatal, nodes, first, fatal))

    def _add(self, node: str, e: XidEvent, job: str) -> None:
        key = (node, e.gpu)
        inc = self._open.get(key)
        if inc is not None and e.t - inc.last > self.chain:
            self._close(self._open.pop(key))
            inc = None
        if inc is None:
            self._open[key] = _Incident(node, e.gpu, e.t, e.t, [e.xid], e.count)
        else:
            inc.last = max(inc.last, e.t)
            inc.count += e.count
            if e.xid not in inc.xids:
                inc.xids.append(e.xid)
        info = self.catalog.get(e.xid)
        if info.cls == "application":
            hist = self._app[key]
            if not hist or e.t - hist[-1][0] > self.burst or hist[-1][1] != e.xid:
                hist.append((e.t, e.xid, job))

    def _primary(self, inc: _Incident) -> XidInfo:
        infos = [self.catalog.get(x) for x in inc.xids]
        return max(
            infos,
            key=lambda i: (_SEV_RANK[i.severity], _CLASS_RANK.get(i.cls, 2), i.fatal),
        )

    def _close(self, inc: _Incident, final: bool = True) -> None:
        p = self._primary(inc)
        evidence = {"xid": float(p.xid), "events": float(inc.count), "xids": float(len(inc.xids))}
        if p.fatal:
            self._emit(
                "xid_fatal", inc, p.severity, p.action, 1.0, evidence, f"XID {p.xid} {p.name}"
            )
            if final:
                self._recurrence(inc, p)
        self._repeated_application(inc)

    def _recurrence(self, inc: _Incident, p: XidInfo) -> None:
        times = self._fatal[(inc.node, inc.gpu, p.xid)]
        if not times or inc.start - times[-1] > self.recur_after:
            times.append(inc.start)
        times[:] = [t for t in times if inc.start - t <= self.recur_window]
        if len(times) >= self.recur_count:
            ev = {"xid": float(p.xid), "incidents": float(len(times))}
            summary = f"XID {p.xid} came back {len(times)} times: inspect/replace the GPU"
            self._emit("xid_recurring", inc, "critical", "drain", 0.95, ev, summary)

    def _repeated_application(self, inc: _Incident) -> None:
        hist = self._app.get((inc.node, inc.gpu))
        if not hist:
            return
        for xid in {x for _, x, _ in hist}:
            info = self.catalog.get(xid)
            if info.repeat_count <= 0:
                continue
            while hist and inc.last - hist[0][0] > max(info.repeat_window, 86400.0):
                hist.popleft()
            recent = [(t, j) for t, x, j in hist if x == xid and inc.last - t <= info.repeat_window]
            jobs = {j for _, j in recent}
            if len(recent) >= info.repeat_count and (len(jobs) >= 2 or jobs == {""}):
                ev = {"xid": float(xid), "events": float(len(recent)), "jobs": float(len(jobs))}
                summary = f"XID {xid} repeated {len(recent)} times across jobs: suspect hardware"
                self._emit("xid_repeated_application", inc, "warning", "drain", 0.8, ev, summary)

    def _emit(
        self,
        kind: str,
        inc: _Incident,
        severity: str,
        action: str,
        conf: float,
        evidence: dict[str, float],
        summary: str,
    ) -> None:
        subject = f"gpu={inc.gpu}"
        key = (inc.node, subject, kind)
        old = self._active.get(key)
        since = old[0].since if old else inc.start
        if old and _SEV_RANK[old[0].severity] > _SEV_RANK[severity]:
            return
        f = Finding(
            inc.node, subject, kind, severity, action, self.name, conf, since, evidence, summary
        )
        self._active[key] = (f, inc.last + self.hold)


def _jobs_by_node(window: Window) -> dict[int, str]:
    out: dict[int, str] = {}
    for job, nodes in window.jobs.items():
        for n in nodes:
            out[n] = job
    return out
