"""The demo's timeline reports each change once, from whatever the services answered."""

from __future__ import annotations

from gpuwarden.timeline import Seen, diff, snapshot

SNAP = {
    "truth": {"faults": [{"id": 1, "node": "gpu-node-003", "kind": "xid", "target": "gpu2",
                          "parameters": {"xid": 79}, "negative_control": False}]},
    "alerts": [
        {"state": "pending", "labels": {"alertname": "GpuLost", "node": "gpu-node-003"}},
        {"state": "firing", "labels": {"alertname": "GpuXidFatalHardware", "node": "gpu-node-003",
                                       "gpu": "2", "severity": "critical", "action": "drain"}},
    ],
    "findings": {"findings": [{"node": "gpu-node-003", "subject": "gpu=2", "kind": "xid_fatal",
                               "severity": "critical", "action": "drain", "confidence": 1}]},
    "decisions": {"decisions": [{"id": 7, "node": "gpu-node-003", "action": "drain",
                                 "verdict": "allow", "guard": "policy", "reason": "ok"}]},
    "nodes": {"nodes": [{"node": "gpu-node-003", "state": "quarantined"}]},
}  # fmt: skip


def test_every_kind_of_change_becomes_one_event_and_pending_alerts_are_not_reported() -> None:
    events = diff(Seen(), SNAP, 12.5)
    assert [e.kind for e in events] == ["INJECT", "ALERT", "FINDING", "DECISION", "NODE"]
    assert all(e.node == "gpu-node-003" for e in events)
    assert "GpuXidFatalHardware firing gpu=2" in events[1].text
    assert "drain -> ALLOW" in events[3].text
    assert events[0].line().startswith("[   12.5s] INJECT")


def test_nothing_is_reported_twice_but_a_state_change_is() -> None:
    seen = Seen()
    diff(seen, SNAP, 1)
    assert diff(seen, SNAP, 2) == []
    changed = {**SNAP, "nodes": {"nodes": [{"node": "gpu-node-003", "state": "released"}]}}
    events = diff(seen, changed, 3)
    assert [(e.kind, e.text) for e in events] == [("NODE", "now released")]


def test_a_service_that_does_not_answer_is_left_out_of_the_snapshot() -> None:
    def fetch(url: str, auth: bool) -> object:
        if "analyzer" in url:
            raise ConnectionRefusedError(url)
        if "prom" in url:
            return {"data": {"alerts": []}}
        return {"url": url, "auth": auth}

    snap = snapshot(fetch, "http://sim", "http://analyzer", "http://rem", "http://prom")
    assert "findings" not in snap
    assert snap["alerts"] == []
    assert snap["decisions"] == {"url": "http://rem/api/v1/decisions", "auth": True}
    assert snap["truth"]["auth"] is False
