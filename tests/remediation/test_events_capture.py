"""Capture: what the journal committed becomes outbox events, once each, in causal order."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from remediation.events import capture, outbox
from remediation.events.filter import build as build_filter
from remediation.journal import Journal
from tests.remediation.helpers import alert

NOW = 1_800_000_000.0


def journal(tmp_path: Path) -> Journal:
    j = Journal(tmp_path / "state.db")
    capture.prime(j)
    return j


def run(j: Journal, **filter_args: Any) -> list[dict[str, Any]]:
    keep = build_filter(**filter_args)
    while capture.capture(j, "/test", keep, lambda: NOW)[1]:
        pass
    return [json.loads(r["event"]) for r in j.rows("SELECT event FROM outbox ORDER BY seq")]


def decide(j: Journal, node: str, key: str | None, state: str | None = None) -> None:
    with j.tx() as db:
        d = db.execute(
            "INSERT INTO decisions(alert_key,node,fault_class,action,verdict,guard,reason,"
            "evidence,at) VALUES(?,?,'xid_fatal','drain','allow','policy','ok','{\"x\": 1}',?)",
            (key, node, NOW),
        ).lastrowid
        if state:
            db.execute(
                "INSERT INTO actions(decision_id,node,action,backend,state,started_at) "
                "VALUES(?,?,'drain','dry-run',?,?)",
                (d, node, state, NOW),
            )


def test_the_first_capture_starts_at_the_present_and_replays_no_history(tmp_path: Path):
    j = Journal(tmp_path / "state.db")
    j.accept([alert("gpu-node-001")], NOW)
    decide(j, "gpu-node-001", None, "done")
    assert capture.prime(j) is True
    assert capture.prime(j) is False
    assert run(j) == []
    j.accept([alert("gpu-node-002")], NOW)
    assert [e["subject"] for e in run(j)] == ["gpu-node-002"]


def test_an_alert_its_decision_and_its_action_become_three_events_in_that_order(
    tmp_path: Path,
):
    j = journal(tmp_path)
    a = alert("gpu-node-001", gpu="2")
    j.accept([a], NOW)
    decide(j, "gpu-node-001", a.key, "pending")
    events = run(j)
    assert [e["type"] for e in events] == [
        "io.gpuwarden.finding.v1", "io.gpuwarden.decision.v1", "io.gpuwarden.action.v1"]  # fmt: skip
    assert {e["subject"] for e in events} == {"gpu-node-001/2"}
    assert events[1]["data"]["evidence"] == {"x": 1}
    assert events[2]["data"]["state"] == "pending"
    assert run(j) == events  # captured once: a second pass adds nothing


def test_each_state_an_action_is_seen_in_is_one_more_event(tmp_path: Path):
    j = journal(tmp_path)
    decide(j, "gpu-node-001", None, "pending")
    run(j)
    with j.tx() as db:
        db.execute("UPDATE actions SET state='retry', attempts=1")
    run(j)
    run(j)  # nothing changed: nothing new
    with j.tx() as db:
        db.execute("UPDATE actions SET state='done', finished_at=?", (NOW + 5,))
    states = [e["data"]["state"] for e in run(j) if e["type"] == "io.gpuwarden.action.v1"]
    assert states == ["pending", "retry", "done"]


def test_a_cluster_decision_has_no_subject_and_orders_with_the_other_cluster_events(
    tmp_path: Path,
):
    j = journal(tmp_path)
    decide(j, "", None)
    (event,) = run(j)
    assert "subject" not in event and "partitionkey" not in event
    assert j.rows("SELECT partition FROM outbox")[0]["partition"] == ""


def test_a_stale_firing_is_no_finding_only_its_stale_decision(tmp_path: Path):
    j = journal(tmp_path)
    resolved = alert("gpu-node-001", status="resolved", starts_at="2026-11-29T10:00:00Z")
    j.accept([resolved], NOW)
    j.accept([alert("gpu-node-001", starts_at="2026-11-29T09:00:00Z")], NOW + 1)  # older
    events = run(j)
    assert [(e["type"], e["data"].get("status") or e["data"]["guard"]) for e in events] == [
        ("io.gpuwarden.finding.v1", "resolved"), ("io.gpuwarden.decision.v1", "stale")]  # fmt: skip
    assert events[0]["time"] == resolved.starts_at  # no endsAt sent: its startsAt


def test_the_filter_keeps_what_is_not_asked_for_out_of_the_outbox(tmp_path: Path):
    j = journal(tmp_path)
    j.accept([alert("gpu-node-001", severity="warning"), alert("gpu-node-002")], NOW)
    events = run(j, kinds=("finding",), min_severity="critical")
    assert [e["subject"] for e in events] == ["gpu-node-002"]
    assert outbox.counts(j)[outbox.PENDING] == {"finding": 1}
