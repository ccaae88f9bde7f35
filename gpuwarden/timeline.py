"""What happened in the running stack, as a readable timeline (demo) and as data (e2e tests).

Each poll reads every service once (simulator truth, Prometheus alerts, analyzer findings,
remediation decisions and node states) and :func:`diff` turns the change since the last
poll into events. The diff is pure; the poller is the only I/O.
"""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Event:
    t: float  # seconds since the timeline started
    kind: str  # INJECT | ALERT | FINDING | DECISION | NODE
    node: str
    text: str

    def line(self) -> str:
        return f"[{self.t:7.1f}s] {self.kind:<8} {self.node:<14} {self.text}"


@dataclass
class Seen:
    """Keys of everything already reported, so each change is reported once."""

    keys: dict[str, str] = field(default_factory=dict)

    def new(self, key: str, value: str) -> bool:
        if self.keys.get(key) == value:
            return False
        self.keys[key] = value
        return True


def _truth_events(truth: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    out = []
    for f in truth.get("faults", []):
        params = ", ".join(f"{k}={v}" for k, v in (f.get("parameters") or {}).items())
        role = "negative control" if f.get("negative_control") else "fault"
        out.append(
            (
                f"inject/{f['id']}",
                "",
                "INJECT",
                f"{f['node']}\t{f['kind']} on {f['target']} {params} ({role})",
            )
        )
    return out


def _alert_events(alerts: list[dict[str, Any]]) -> list[tuple[str, str, str, str]]:
    out = []
    for a in alerts:
        if a.get("state") != "firing":  # pending alerts may never fire: report firing only
            continue
        lab = a.get("labels", {})
        ident = "/".join(lab.get(k, "") for k in ("alertname", "node", "gpu", "link", "port"))
        where = " ".join(f"{k}={lab[k]}" for k in ("gpu", "link", "device", "port") if k in lab)
        text = (
            f"{lab.get('node', lab.get('component', '-'))}\t{lab.get('alertname')} "
            f"{a.get('state')} {where} severity={lab.get('severity', '')}"
            + (f" action={lab['action']}" if "action" in lab else "")
        )
        out.append((f"alert/{ident}", a.get("state", ""), "ALERT", text))
    return out


def _finding_events(findings: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    out = []
    for f in findings.get("findings", []):
        key = f"finding/{f.get('node')}/{f.get('subject')}/{f.get('kind')}"
        text = (
            f"{f.get('node')}\t{f.get('kind')} {f.get('subject')} "
            f"severity={f.get('severity')} action={f.get('action')} "
            f"confidence={float(f.get('confidence', 0)):.2f}"
        )
        if f.get("kind") == "straggler" and f.get("summary"):  # the job it slows down
            text += f" ({f['summary']})"
        out.append((key, "active", "FINDING", text))
    return out


def _decision_events(decisions: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    out = []
    for d in decisions.get("decisions", []):
        text = (
            f"{d.get('node')}\t{d.get('action')} -> {str(d.get('verdict')).upper()} "
            f"(guard {d.get('guard')}: {d.get('reason')})"
        )
        out.append((f"decision/{d.get('id')}", "", "DECISION", text))
    return out


def _node_events(nodes: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    out = []
    for n in nodes.get("nodes", []):
        state = str(n.get("state"))
        out.append((f"node/{n.get('node')}", state, "NODE", f"{n.get('node')}\tnow {state}"))
    return out


def diff(seen: Seen, snapshot: dict[str, Any], t: float) -> list[Event]:
    """Events for whatever in ``snapshot`` is new or changed since the last call."""
    rows: list[tuple[str, str, str, str]] = []
    rows += _truth_events(snapshot.get("truth") or {})
    rows += _alert_events(snapshot.get("alerts") or [])
    rows += _finding_events(snapshot.get("findings") or {})
    rows += _decision_events(snapshot.get("decisions") or {})
    rows += _node_events(snapshot.get("nodes") or {})
    events = []
    for key, value, kind, text in rows:
        if seen.new(key, value):
            node, _, rest = text.partition("\t")
            events.append(Event(t, kind, node, rest))
    return events


Fetch = Callable[[str, bool], Any]


def http_fetch(token: str) -> Fetch:
    def fetch(url: str, auth: bool) -> Any:
        headers = {"Authorization": f"Bearer {token}"} if auth else {}
        req = urllib.request.Request(url, headers=headers)
        with urllib.request.urlopen(req, timeout=3) as r:
            return json.loads(r.read())

    return fetch


def snapshot(
    fetch: Fetch, simulator: str, analyzer: str, remediation: str, prometheus: str | None
) -> dict[str, Any]:
    """One read of every service; a service that does not answer is left out this time."""
    calls: dict[str, tuple[str, bool]] = {
        "truth": (f"{simulator}/truth", False),
        "findings": (f"{analyzer}/findings", False),
        "decisions": (f"{remediation}/api/v1/decisions", True),
        "nodes": (f"{remediation}/api/v1/nodes", True),
    }
    if prometheus:
        calls["alerts"] = (f"{prometheus}/api/v1/alerts", False)

    def one(item: tuple[str, tuple[str, bool]]) -> tuple[str, Any]:
        name, (url, auth) = item
        try:
            body = fetch(url, auth)
        except Exception:  # a service still starting or briefly busy: next poll
            return name, None
        return name, body["data"]["alerts"] if name == "alerts" else body

    # In parallel, so one slow service (an analyzer mid-cycle) does not stall the timeline.
    with ThreadPoolExecutor(max_workers=len(calls)) as pool:
        out = {k: v for k, v in pool.map(one, calls.items()) if v is not None}
    return out
