"""Every path of the engine pinned by what it journals: the decision rows (action, verdict,
guard, reason, evidence), the node's state, the metrics and the backend calls; the per-job
budget and the rate limit exercised end to end through ``Engine.decide`` (mutation testing
found these paths run by other tests without their results being checked)."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from exporter import catalog as c
from remediation.backends.base import BackendError
from remediation.clock import FakeClock
from remediation.model import Alert, Job, NodeView
from remediation.service import Service
from tests.remediation.helpers import LIVE_POLICY, alert, service, topology_file

POLICY = LIVE_POLICY.replace(
    "storm: {max_nodes: 50, window_s: 60, quiet_s: 120}",
    "storm: {max_nodes: 3, window_s: 60, quiet_s: 120}",
).replace("inspect_after: 4", "inspect_after: 4\nretry: {max_attempts: 2, backoff_s: 10}")


class Pager:
    def __init__(self) -> None:
        self.pages: list[tuple[str, float]] = []

    def page(self, summary: str, hold_s: float) -> None:
        self.pages.append((summary, hold_s))


@pytest.fixture
def svc(tmp_path: Path) -> Service:
    s = service(tmp_path, POLICY, clock=FakeClock(), topology=topology_file(tmp_path, 20))
    s.engine.pager = Pager()
    return s


def clock(svc: Service) -> FakeClock:
    assert isinstance(svc.clock, FakeClock)
    return svc.clock


def rows(svc: Service, since: int = 0) -> list[tuple[str, str, str, str, str, str]]:
    return [
        (r["node"], r["fault_class"], r["action"], r["verdict"], r["guard"], r["reason"])
        for r in svc.journal.rows("SELECT * FROM decisions WHERE id>? ORDER BY id", (since,))
    ]


def evidence(svc: Service) -> dict:
    [r] = svc.journal.rows("SELECT evidence FROM decisions ORDER BY id DESC LIMIT 1")
    return dict(json.loads(r["evidence"]))


def top(svc: Service) -> int:
    return int(svc.journal.scalar("SELECT COALESCE(MAX(id),0) FROM decisions"))


def sample(svc: Service, name: str, **labels: str) -> float | None:
    return svc.metrics.registry.get_sample_value(name, labels)


def send(svc: Service, *alerts: object) -> list[int | None]:
    out = []
    for a in alerts:
        svc.journal.accept([a], svc.clock.now())  # type: ignore[list-item]
        out.append(svc.engine.decide(a))  # type: ignore[arg-type]
    return out


def effects(svc: Service, op: str) -> list[tuple[str, dict]]:
    return [
        (r["node"], json.loads(r["detail"]))
        for r in svc.journal.rows("SELECT * FROM dry_run_effects WHERE op=? ORDER BY id", (op,))
    ]


def node(svc: Service, name: str) -> dict:
    rec = svc.journal.node(name)
    assert rec is not None
    return rec


# ---------------------------------------------------------------- pause
def test_pause_and_resume_are_journaled_with_who_and_drive_the_gauge(svc: Service) -> None:
    svc.engine.set_paused(True, "carol")
    assert svc.engine.paused and svc.journal.get("paused") == "1"
    assert sample(svc, c.REMEDIATION_PAUSED.name) == 1
    svc.engine.set_paused(False, "dave")
    assert not svc.engine.paused and svc.journal.get("paused") == "0"
    assert sample(svc, c.REMEDIATION_PAUSED.name) == 0
    assert rows(svc) == [
        ("", "", "pause", "allow", "manual", "paused by carol"),
        ("", "", "resume", "allow", "manual", "resumed by dave"),
    ]
    assert evidence(svc) == {}
    labels = {"guard": "manual", "verdict": "allow", "action": "pause"}
    assert sample(svc, c.REMEDIATION_DECISIONS.name, **labels) == 1


# ---------------------------------------------------------------- breaker
def test_the_breaker_opens_pages_closes_when_quiet_and_resets_by_hand_all_journaled(
    svc: Service,
) -> None:
    send(svc, *(alert(f"gpu-node-{i:03d}") for i in range(1, 5)))
    opened = [r for r in rows(svc) if r[2] == "breaker_open"]
    why = "storm breaker open: 4 nodes flagged in 60s (limit 3)"
    assert opened == [("", "", "breaker_open", "deny", "storm_breaker", why)]
    assert svc.engine.pager.pages == [(why, 120.0)]  # type: ignore[attr-defined]
    assert sample(svc, c.REMEDIATION_BREAKER_OPEN.name) == 1
    assert svc.journal.get("breaker_opened_at") == repr(svc.clock.now())
    mark = top(svc)
    clock(svc).advance(119)
    assert svc.engine.breaker_open() and rows(svc, mark) == []
    clock(svc).advance(1)
    assert not svc.engine.breaker_open()
    closed = ("", "", "breaker_close", "allow", "storm_breaker")
    assert rows(svc, mark) == [(*closed, "storm breaker closed: no valid flag for 120s")]
    assert evidence(svc) == {"cause": "quiet"}
    assert sample(svc, c.REMEDIATION_BREAKER_OPEN.name) == 0
    assert svc.journal.get("breaker_opened_at") is None
    assert float(svc.journal.get("breaker_reset_at") or 0) > svc.clock.now()
    mark = top(svc)
    svc.engine.reset_breaker("erin")
    assert rows(svc, mark) == [(*closed, "storm breaker closed: reset by erin")]
    assert evidence(svc) == {"cause": "manual"}


def test_flags_before_a_close_do_not_reopen_the_breaker(svc: Service) -> None:
    send(svc, *(alert(f"gpu-node-{i:03d}") for i in range(1, 5)))
    svc.engine.reset_breaker("erin")
    clock(svc).advance(1)
    assert not svc.engine.breaker_open()  # the four earlier flags no longer count
    send(svc, alert("gpu-node-010"), alert("gpu-node-011"), alert("gpu-node-012"))
    assert not svc.engine.breaker_open()  # three new nodes: at the limit, not above
    send(svc, alert("gpu-node-013"))
    assert svc.engine.breaker_open()


# ---------------------------------------------------------------- hold
def test_a_hold_journals_the_state_it_keeps(svc: Service) -> None:
    [aid] = send(svc, alert("gpu-node-002"))
    hold = alert("gpu-node-002", "unwatched", action="hold", fp="h", alertname="NodeUnwatched")
    send(svc, hold, alert("gpu-node-019", "unwatched", action="hold", fp="h2"))
    assert rows(svc)[-2:] == [
        (
            "gpu-node-002",
            "unwatched",
            "hold",
            "allow",
            "hold",
            "node unwatched (NodeUnwatched): state quarantined kept; no probation or release "
            "while this fires",
        ),
        (
            "gpu-node-019",
            "unwatched",
            "hold",
            "allow",
            "hold",
            "node unwatched (GpuXidFatal): state unknown kept; no probation or release "
            "while this fires",
        ),
    ]
    assert aid is not None and node(svc, "gpu-node-002")["state"] == "quarantined"
    resolved = alert("gpu-node-002", "unwatched", action="hold", fp="h", status="resolved")
    send(svc, resolved)
    assert rows(svc)[-1] == (
        "gpu-node-002",
        "unwatched",
        "hold",
        "allow",
        "hold",
        "hold resolved: watched again; no change to the node",
    )


# ---------------------------------------------------------------- resolve, probation, tick
def test_a_resolve_starts_probation_and_the_tick_releases_after_probation_s(
    svc: Service,
) -> None:
    [aid] = send(svc, alert("gpu-node-003", "memory"))
    assert aid is not None and svc.executor.run({"id": aid})[0] == "done"
    t0 = clock(svc).advance(10)
    mark = top(svc)
    send(svc, alert("gpu-node-003", "memory", status="resolved"))
    assert rows(svc, mark) == [
        ("gpu-node-003", "memory", "probation", "allow", "resolve", "alert resolved; probation starts")
    ]  # fmt: skip
    rec = node(svc, "gpu-node-003")
    assert (rec["state"], rec["resolved_at"]) == ("probation", t0)
    assert effects(svc, "mark")[-1] == ("gpu-node-003", {"state": "probation"})
    clock(svc).advance(59)
    assert svc.engine.tick() == [] and node(svc, "gpu-node-003")["state"] == "probation"
    clock(svc).advance(1)
    mark = top(svc)
    assert svc.engine.tick() == ["gpu-node-003"]
    assert rows(svc, mark) == [
        ("gpu-node-003", "", "release", "allow", "probation", "released by probation: would resume")
    ]  # fmt: skip
    assert evidence(svc) == {"manual": False, "who": "probation"}
    rec = node(svc, "gpu-node-003")
    assert (rec["state"], rec["released_at"]) == ("released", svc.clock.now())
    assert not svc.backend.is_taken_out("gpu-node-003")


def test_a_resolve_with_another_alert_firing_waits_and_the_tick_starts_probation_later(
    svc: Service,
) -> None:
    a1, a2 = alert("gpu-node-004", fp="a1"), alert("gpu-node-004", "memory", fp="a2")
    send(svc, a1, a2)
    t0 = clock(svc).advance(5)
    mark = top(svc)
    send(svc, alert("gpu-node-004", fp="a1", status="resolved"))
    assert rows(svc, mark) == [
        ("gpu-node-004", "xid_fatal", "notify", "allow", "resolve", "resolved; node state quarantined, 1 firing")
    ]  # fmt: skip
    rec = node(svc, "gpu-node-004")
    assert (rec["state"], rec["resolved_at"]) == ("quarantined", t0)
    assert svc.engine.tick() == [] and node(svc, "gpu-node-004")["state"] == "quarantined"
    with svc.journal.tx() as db:  # the other alert resolved without a webhook (e.g. pruned)
        db.execute("UPDATE alerts SET status='resolved' WHERE fingerprint='a2'")
    mark = top(svc)
    t1 = clock(svc).advance(1)
    svc.engine.tick()
    assert rows(svc, mark) == [
        ("gpu-node-004", "memory", "probation", "allow", "resolve", "every alert resolved; probation starts")
    ]  # fmt: skip
    rec = node(svc, "gpu-node-004")
    assert (rec["state"], rec["resolved_at"]) == ("probation", t1)


def test_a_resolve_for_a_node_not_quarantined_changes_nothing(svc: Service) -> None:
    send(svc, alert("gpu-node-005", status="resolved"))
    assert rows(svc) == [
        ("gpu-node-005", "xid_fatal", "notify", "allow", "resolve", "resolved; node state None, 0 firing")
    ]  # fmt: skip
    assert svc.journal.node("gpu-node-005") is None


def test_the_tick_does_not_release_while_an_alert_fires_or_validation_fails(
    svc: Service, tmp_path: Path
) -> None:
    [aid] = send(svc, alert("gpu-node-006", "memory", fp="m"))
    assert aid is not None
    svc.executor.run({"id": aid})
    send(svc, alert("gpu-node-006", "memory", fp="m", status="resolved"))
    with svc.journal.tx() as db:  # firing again, but the alert not decided yet
        db.execute(
            "INSERT INTO alerts(key,fingerprint,node,status,labels,received_at,processed) "
            "VALUES('k','f2','gpu-node-006','firing','{}',0,1)"
        )
    clock(svc).advance(61)
    assert svc.engine.tick() == [] and node(svc, "gpu-node-006")["state"] == "probation"
    with svc.journal.tx() as db:
        db.execute("DELETE FROM alerts WHERE key='k'")
    svc.engine.policy = dataclasses.replace(svc.policy, validate_command=("false", "{node}"))
    mark = top(svc)
    assert svc.engine.tick() == []
    assert rows(svc, mark) == [
        ("gpu-node-006", "", "release", "deny", "validation", "validation rc 1: ")
    ]
    assert node(svc, "gpu-node-006")["state"] == "probation"


def test_without_auto_release_the_tick_releases_nothing(svc: Service) -> None:
    [aid] = send(svc, alert("gpu-node-007", "memory"))
    assert aid is not None
    svc.executor.run({"id": aid})
    send(svc, alert("gpu-node-007", "memory", status="resolved"))
    clock(svc).advance(3600)
    svc.engine.policy = dataclasses.replace(svc.policy, auto_release=False)
    assert svc.engine.tick() == [] and node(svc, "gpu-node-007")["state"] == "probation"


# ---------------------------------------------------------------- release
def test_a_manual_release_is_journaled_counted_and_bumps_the_epoch(svc: Service) -> None:
    [aid] = send(svc, alert("gpu-node-008"))
    assert aid is not None
    svc.executor.run({"id": aid})
    v = svc.engine.release("gpu-node-008", manual=True, who="bob")
    assert (v.allow, v.guard, v.reason) == (True, "manual", "released by bob: would resume")
    assert rows(svc)[-1] == (
        "gpu-node-008", "", "release", "allow", "manual", "released by bob: would resume"
    )  # fmt: skip
    assert evidence(svc) == {"manual": True, "who": "bob"}
    assert svc.journal.epoch("gpu-node-008") == 1
    rec = node(svc, "gpu-node-008")
    assert (rec["state"], rec["released_at"]) == ("released", svc.clock.now())
    labels = {"backend": "dry-run", "action": "release", "outcome": "done"}
    assert sample(svc, c.REMEDIATION_ACTIONS.name, **labels) == 1


def test_a_release_of_a_node_we_never_held_changes_no_journal_state(svc: Service) -> None:
    v = svc.engine.release("gpu-node-009", manual=True, who="bob")
    assert v.allow and svc.journal.node("gpu-node-009") is None
    assert svc.journal.epoch("gpu-node-009") == 0


def test_a_release_the_backend_refuses_or_crashes_on_is_denied_with_the_reason(
    svc: Service,
) -> None:
    send(svc, alert("gpu-node-010"), alert("gpu-node-011"))

    def not_ours(node: str) -> str:
        raise BackendError(f"refusing to resume {node}: reason 'fan' is not ours")

    svc.backend.release = not_ours  # type: ignore[method-assign, assignment]
    v = svc.engine.release("gpu-node-010", manual=True, who="bob")
    assert (v.allow, v.guard) == (False, "ownership") and "'fan' is not ours" in v.reason
    assert node(svc, "gpu-node-010")["state"] == "quarantined"
    labels = {"backend": "dry-run", "action": "release", "outcome": "denied"}
    assert sample(svc, c.REMEDIATION_ACTIONS.name, **labels) == 1

    def flaky(node: str) -> str:
        raise BackendError("Unable to contact slurm controller")

    svc.backend.release = flaky  # type: ignore[method-assign, assignment]
    v = svc.engine.release("gpu-node-010", manual=True, who="bob")
    assert (v.allow, v.guard, v.reason) == (False, "backend", "Unable to contact slurm controller")

    def bug(node: str) -> str:
        raise KeyError("x")

    svc.backend.release = bug  # type: ignore[method-assign, assignment]
    v = svc.engine.release("gpu-node-011", manual=True, who="bob")
    assert (v.allow, v.guard, v.reason) == (False, "backend", "KeyError: 'x'")
    assert rows(svc)[-1][3:5] == ("deny", "backend")


def test_a_release_when_the_scheduler_cannot_be_asked_fails_closed_with_the_error(
    svc: Service,
) -> None:
    send(svc, alert("gpu-node-012"))

    def down(name: str) -> None:
        raise BackendError("sinfo: Unable to contact slurm controller")

    svc.backend.node = down  # type: ignore[method-assign, assignment]
    v = svc.engine.release("gpu-node-012", manual=True, who="bob")
    assert (v.allow, v.guard) == (False, "ownership")
    assert v.reason == "node unknown to the scheduler (sinfo: Unable to contact slurm controller)"

    def bug(name: str) -> None:
        raise ValueError("bad json")

    svc.backend.node = bug  # type: ignore[method-assign, assignment]
    v = svc.engine.release("gpu-node-012", manual=True, who="bob")
    assert v.reason == "node unknown to the scheduler (ValueError: bad json)"
    assert svc.journal.epoch("gpu-node-012") == 0  # nothing superseded


# ---------------------------------------------------------------- failures re-driven
def test_a_repeat_for_a_failed_action_redrives_it_unless_paused(svc: Service) -> None:
    def refuse(node: str, reason: str, evict: bool) -> str:
        raise BackendError("no")

    real = svc.backend.take_out
    svc.backend.take_out = refuse  # type: ignore[method-assign, assignment]
    a = alert("gpu-node-013")
    [aid] = send(svc, a)
    assert aid is not None
    svc.executor.run({"id": aid})
    clock(svc).advance(10)
    assert svc.executor.run({"id": aid})[0] == "failed"
    svc.engine.set_paused(True, "op")
    assert send(svc, a) == [None]  # paused: not re-driven
    svc.engine.set_paused(False, "op")
    svc.backend.take_out = real  # type: ignore[method-assign, assignment]
    mark = top(svc)
    assert send(svc, a) == [aid]
    assert rows(svc, mark) == [
        ("gpu-node-013", "xid_fatal", "drain", "allow", "retry", f"action {aid} (drain) failed earlier; driven again")
    ]  # fmt: skip
    assert evidence(svc) == {"action_id": aid}
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    assert (row["state"], row["attempts"], row["next_at"]) == ("pending", 0, None)
    assert node(svc, "gpu-node-013")["state"] == "quarantined"


# ---------------------------------------------------------------- invalid alerts
def test_invalid_alerts_are_journaled_without_a_bad_node_name_and_counted_by_code(
    svc: Service,
) -> None:
    long_fc = "f" * 100
    send(
        svc,
        alert("bad node;", fp="b1"),
        alert("ghost-7", fp="b2"),
        alert("gpu-node-001", long_fc, fp="b3"),
    )
    got = rows(svc)
    assert [(r[0], r[1], r[2], r[3], r[4]) for r in got] == [
        ("", "xid_fatal", "notify", "deny", "invalid_alert"),
        ("ghost-7", "xid_fatal", "notify", "deny", "invalid_alert"),
        ("gpu-node-001", "f" * 64, "notify", "deny", "invalid_alert"),
    ]
    assert got[1][5] == "node 'ghost-7' is unknown"
    codes = [json.loads(r["evidence"])["code"] for r in svc.journal.rows("SELECT * FROM decisions")]
    assert codes[1] == "unknown_node"
    assert sample(svc, c.REMEDIATION_INVALID_ALERTS.name, reason="unknown_node") == 1
    assert svc.journal.flag_summary(0) == (0, None)  # none counted toward the storm


# ---------------------------------------------------------------- the situation
def test_the_decision_evidence_records_what_the_guards_saw(svc: Service) -> None:
    jobs = (Job("77", "RUNNING", ("gpu-node-014",)),)
    svc.backend.jobs_on = lambda n: jobs if n == "gpu-node-014" else ()  # type: ignore[method-assign, assignment]
    [aid] = send(svc, alert("gpu-node-014", "memory"))
    assert aid is not None
    ev = evidence(svc)
    assert ev["occurrence"] == 1 and ev["incident"] is not None and ev["flapped"] is False
    assert ev["labels"]["fault_class"] == "memory" and ev["jobs"] == ["77"]
    assert ev["node"]["name"] == "gpu-node-014" and ev["fleet"] == 20 and ev["held"] == 0
    assert ev["breaker_open"] is False and ev["silenced"] is False
    assert ev["recent_actions"] == 0
    rec = node(svc, "gpu-node-014")
    assert (rec["state"], rec["fault_class"], rec["action"], rec["since"]) == (
        "quarantined", "memory", "drain", svc.clock.now()
    )  # fmt: skip
    assert rec["probation_s"] == 60 and rec["flapped"] == 0 and rec["resolved_at"] is None


def test_a_notify_does_not_ask_the_scheduler(svc: Service) -> None:
    def boom() -> tuple:
        raise AssertionError("asked")

    svc.backend.fleet = boom  # type: ignore[method-assign, assignment]
    [aid] = send(svc, alert("gpu-node-015", "pcie", action="notify"))
    assert aid is None
    assert rows(svc)[-1][2:4] == ("notify", "allow")


def test_a_scheduler_error_is_a_denial_with_its_words(svc: Service) -> None:
    def down() -> tuple:
        raise OSError(5, "I/O error")

    svc.backend.fleet = down  # type: ignore[method-assign, assignment]
    assert send(svc, alert("gpu-node-016")) == [None]
    r = rows(svc)[-1]
    assert r[3:5] == ("deny", "scheduler") and "I/O error" in r[5]


# ---------------------------------------------------------------- budgets through decide
def test_the_per_job_budget_denies_a_second_node_of_one_job_through_the_engine(
    svc: Service,
) -> None:
    job = Job("88", "RUNNING", ("gpu-node-017", "gpu-node-018"))
    svc.backend.jobs_on = lambda n: (job,) if n in job.nodes else ()  # type: ignore[method-assign, assignment]
    first, second = send(svc, alert("gpu-node-017"), alert("gpu-node-018"))
    assert first is not None and second is None
    r = rows(svc)[-1]
    assert r[:5] == ("gpu-node-018", "xid_fatal", "drain", "deny", "budget_job"), r
    assert "88" in r[5]


def test_the_rate_limit_denies_once_max_actions_ran_in_the_window_through_the_engine(
    svc: Service,
) -> None:
    svc.engine.policy = dataclasses.replace(svc.policy, rate_max_actions=2, rate_window_s=60.0)
    got = send(svc, alert("gpu-node-001"), alert("gpu-node-009"), alert("gpu-node-017"))
    assert got[0] is not None and got[1] is not None and got[2] is None
    assert rows(svc)[-1][3:5] == ("deny", "rate_limit")
    clock(svc).advance(61)
    assert send(svc, alert("gpu-node-018")) != [None]  # the window moved on


# ---------------------------------------------------------------- the records themselves
def test_an_allowed_action_is_recorded_with_its_intent_reason_epoch_and_incident(
    svc: Service,
) -> None:
    a = alert("gpu-node-002", "memory", gpu="0")
    [aid] = send(svc, a)
    assert aid is not None
    [d] = svc.journal.rows("SELECT * FROM decisions")
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    [inc] = svc.journal.rows("SELECT * FROM incidents")
    assert (row["decision_id"], row["node"], row["action"], row["backend"], row["state"]) == (
        d["id"], "gpu-node-002", "drain", "dry-run", "pending"
    )  # fmt: skip
    assert row["reason"] == f"gpuwarden: drain memory d{d['id']}"
    assert (row["fault_class"], row["epoch"], row["incident_id"]) == ("memory", 0, inc["id"])
    assert row["started_at"] == svc.clock.now() and inc["acted"] == "drain"
    assert d["alert_key"] == a.key and d["at"] == svc.clock.now()
    assert svc.journal.todo() == []  # the alert is marked processed in the same commit
    labels = {"guard": d["guard"], "verdict": "allow", "action": "drain"}
    assert sample(svc, c.REMEDIATION_DECISIONS.name, **labels) == 1
    # a second alert of the same incident: a notify pointing at it, the ladder does not climb
    mark = top(svc)
    assert send(svc, alert("gpu-node-002", "memory", fp="other-gpu")) == [None]
    assert rows(svc, mark) == [
        (
            "gpu-node-002",
            "memory",
            "notify",
            "allow",
            "incident",
            f"same incident #{inc['id']} as an earlier alert, which got drain; the ladder "
            "climbs once per incident",
        )
    ]
    assert evidence(svc) == {"incident": inc["id"]}


def test_an_action_after_a_release_carries_the_new_epoch_and_a_flapping_node_longer_probation(
    svc: Service,
) -> None:
    [aid] = send(svc, alert("gpu-node-003", "memory"))
    assert aid is not None
    svc.executor.run({"id": aid})
    assert svc.engine.release("gpu-node-003", manual=True, who="bob").allow
    clock(svc).advance(300)
    [again] = send(svc, alert("gpu-node-003", "memory", fp="new", starts_at="2026-11-29T11:00Z"))
    assert again is not None
    [row] = svc.journal.rows("SELECT epoch FROM actions WHERE id=?", (again,))
    assert row["epoch"] == 1
    rec = node(svc, "gpu-node-003")
    assert (rec["probation_s"], rec["flapped"]) == (240.0, 1)  # 60 s x flap_multiplier 4
    assert evidence(svc)["flapped"] is True


def test_an_internal_error_while_deciding_is_a_recorded_denial(svc: Service) -> None:
    a = alert("gpu-node-004", "memory")
    svc.journal.accept([a], svc.clock.now())
    svc.engine.record_error(a, KeyError("labels"))
    assert rows(svc) == [
        ("gpu-node-004", "memory", "notify", "deny", "error", "internal error: KeyError: 'labels'")
    ]  # fmt: skip
    assert svc.journal.todo() == []
    labels = {"guard": "error", "verdict": "deny", "action": "notify"}
    assert sample(svc, c.REMEDIATION_DECISIONS.name, **labels) == 1


def test_a_notify_for_a_node_whose_action_failed_does_not_redrive_it(svc: Service) -> None:
    def refuse(node: str, reason: str, evict: bool) -> str:
        raise BackendError("no")

    svc.backend.take_out = refuse  # type: ignore[method-assign]
    [aid] = send(svc, alert("gpu-node-005"))
    assert aid is not None
    svc.executor.run({"id": aid})
    clock(svc).advance(10)
    assert svc.executor.run({"id": aid})[0] == "failed"
    assert send(svc, alert("gpu-node-005", "memory", action="notify", fp="n")) == [None]
    [row] = svc.journal.rows("SELECT state FROM actions WHERE id=?", (aid,))
    assert row["state"] == "failed" and rows(svc)[-1][2:5] == ("notify", "allow", "policy")


# ---------------------------------------------------------------- labels missing, defaults
def bare(node: str, fp: str, status: str = "firing", **labels: str) -> Alert:
    return Alert(fp, "2026-11-29T10:00:00Z", status, {"node": node, **labels})


def test_alerts_without_a_fault_class_or_alertname_are_recorded_with_empty_defaults(
    svc: Service,
) -> None:
    send(svc, bare("gpu-node-001", "h1", action="hold"))
    send(svc, bare("gpu-node-002", "x1", action="drain"))
    a = bare("gpu-node-003", "e1")
    svc.journal.accept([a], svc.clock.now())
    svc.engine.record_error(a, ValueError("x"))
    send(svc, bare("gpu-node-004", "r1", "resolved"))
    send(svc, bare("gpu-node-005", "h2", "resolved", action="hold"))
    got = rows(svc)
    assert [r[1] for r in got] == ["", "", "", "", ""]
    assert got[0][5].startswith("node unwatched (hold): state unknown kept")
    assert [json.loads(r["evidence"]) for r in svc.journal.rows("SELECT * FROM decisions")][2:] == [
        {},
        {},
        {},
    ]
    assert svc.journal.todo() == []  # every one marked processed with its decision


def test_a_resolve_without_a_node_counts_no_garbage_as_firing(svc: Service) -> None:
    send(svc, bare("", "g1", fault_class="xid_fatal", action="drain"))  # garbage, firing
    send(svc, bare("", "g2", "resolved", fault_class="xid_fatal", action="drain"))
    assert rows(svc)[-1][5] == "resolved; node state None, 0 firing"


def test_probation_and_redrive_records_carry_empty_evidence_and_the_right_state(
    svc: Service,
) -> None:
    [aid] = send(svc, alert("gpu-node-006", "memory", action="inspect"))
    assert aid is not None
    with svc.journal.tx() as db:
        db.execute("UPDATE actions SET state='failed' WHERE id=?", (aid,))
        db.execute("UPDATE nodes SET state='action_failed' WHERE node='gpu-node-006'")
    assert send(svc, alert("gpu-node-006", "memory", action="inspect", fp="again")) == [aid]
    assert node(svc, "gpu-node-006")["state"] == "inspection"  # as the failed action wanted
    assert svc.journal.todo() == []


def test_a_failing_probation_label_does_not_stop_the_probation(svc: Service) -> None:
    [aid] = send(svc, alert("gpu-node-007", "memory"))
    assert aid is not None
    svc.executor.run({"id": aid})

    def broken(node: str, state: str) -> None:
        raise OSError("label write failed")

    svc.backend.mark = broken  # type: ignore[method-assign]
    send(svc, alert("gpu-node-007", "memory", status="resolved"))
    assert node(svc, "gpu-node-007")["state"] == "probation" and evidence(svc) == {}


def test_the_tick_prunes_flags_after_twice_the_longest_window_and_keeps_an_open_breaker(
    svc: Service,
) -> None:
    send(svc, *(alert(f"gpu-node-{i:03d}") for i in range(1, 5)))
    svc.engine.tick()
    assert svc.engine.breaker_open()  # flags inside the window are kept
    assert svc.journal.flag_summary(0)[0] == 4
    clock(svc).advance(239)
    svc.engine.tick()  # closes the breaker (quiet), keeps the flags: 2 x 120 s not passed
    assert svc.journal.flag_summary(0)[0] == 4
    clock(svc).advance(2)
    svc.engine.tick()
    assert svc.journal.flag_summary(0) == (0, None)


def test_the_tick_releases_every_node_due_whatever_the_order(svc: Service) -> None:
    nodes = ["gpu-node-008", "gpu-node-009", "gpu-node-010"]
    for n in nodes:
        [aid] = send(svc, alert(n, "memory"))
        assert aid is not None
        svc.executor.run({"id": aid})
    send(svc, alert("gpu-node-008", "memory", status="resolved"))  # due last
    clock(svc).advance(30)
    send(svc, alert("gpu-node-009", "memory", status="resolved"))
    send(svc, alert("gpu-node-010", "memory", status="resolved"))
    with svc.journal.tx() as db:  # 009 fires again (not yet decided): it stays
        db.execute(
            "INSERT INTO alerts(key,fingerprint,node,status,labels,received_at,processed) "
            "VALUES('k9','f9','gpu-node-009','firing','{}',0,1)"
        )
    clock(svc).advance(30)
    assert svc.engine.tick() == ["gpu-node-008"]  # 009 firing, 010 not due: the loop goes on
    clock(svc).advance(30)
    assert svc.engine.tick() == ["gpu-node-010"]


def test_a_zero_probation_releases_at_the_next_tick(svc: Service) -> None:
    svc.engine.policy = dataclasses.replace(svc.policy, probation_s=0.0)
    [aid] = send(svc, alert("gpu-node-011", "memory"))
    assert aid is not None
    svc.executor.run({"id": aid})
    send(svc, alert("gpu-node-011", "memory", status="resolved"))
    assert svc.engine.tick() == ["gpu-node-011"]


def test_a_release_supersedes_with_who_and_when_and_closes_the_incident(svc: Service) -> None:
    [aid] = send(svc, alert("gpu-node-012", "memory"))
    t = clock(svc).advance(3)
    assert svc.engine.release("gpu-node-012", manual=True).allow
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    assert (row["state"], row["outcome"], row["finished_at"]) == (
        "superseded", "superseded: node released by api", t
    )  # fmt: skip
    assert rows(svc)[-1][5] == "released by api: would resume"
    [again] = send(svc, alert("gpu-node-012", "memory", fp="next"))  # inside the window
    assert again is not None  # a new incident, not "same incident"


def test_a_release_refused_by_ownership_says_why_without_an_error_suffix(svc: Service) -> None:
    send(svc, alert("gpu-node-013"))
    svc.backend.node = lambda n: NodeView(n, True, False, "fan")  # type: ignore[method-assign, assignment]
    v = svc.engine.release("gpu-node-013", manual=True, who="bob")
    assert (v.allow, v.guard, v.reason) == (
        False, "ownership", "drain reason not written by gpuwarden: 'fan'"
    )  # fmt: skip


def test_a_manual_breaker_reset_drops_the_gauge_at_once(svc: Service) -> None:
    send(svc, *(alert(f"gpu-node-{i:03d}") for i in range(1, 5)))
    assert sample(svc, c.REMEDIATION_BREAKER_OPEN.name) == 1
    svc.engine.reset_breaker("erin")
    assert sample(svc, c.REMEDIATION_BREAKER_OPEN.name) == 0


def test_every_tick_record_has_empty_evidence_and_its_alert_processed(svc: Service) -> None:
    [aid] = send(svc, alert("gpu-node-002", "memory", fp="a"))
    assert aid is not None
    svc.executor.run({"id": aid})
    send(svc, bare("gpu-node-002", "h", action="hold"))
    send(svc, alert("gpu-node-002", "memory", fp="a", status="resolved"))
    assert svc.journal.todo() == []
    send(svc, bare("gpu-node-002", "h", "resolved", action="hold"))
    with svc.journal.tx() as db:  # the tick sees every alert resolved
        db.execute("UPDATE alerts SET status='resolved' WHERE node='gpu-node-002'")
    svc.engine.tick()
    assert rows(svc)[-1][2] == "probation" and evidence(svc) == {}
    svc.engine.policy = dataclasses.replace(svc.policy, validate_command=("false",))
    clock(svc).advance(61)
    svc.engine.tick()
    assert rows(svc)[-1][3:5] == ("deny", "validation") and evidence(svc) == {}
    first = svc.journal.rows("SELECT evidence FROM decisions WHERE action='hold' ORDER BY id")
    assert [json.loads(r["evidence"]) for r in first] == [{}, {}]


def test_the_tick_goes_on_past_a_node_not_due_and_one_failing_validation(
    svc: Service,
) -> None:
    nodes = ["gpu-node-003", "gpu-node-004", "gpu-node-005"]
    for n in nodes:
        [aid] = send(svc, alert(n, "memory"))
        assert aid is not None
        svc.executor.run({"id": aid})
    send(svc, alert("gpu-node-004", "memory", status="resolved"))
    send(svc, alert("gpu-node-005", "memory", status="resolved"))
    clock(svc).advance(30)
    send(svc, alert("gpu-node-003", "memory", status="resolved"))  # first row, not due
    clock(svc).advance(31)
    check = "import sys; sys.exit(sys.argv[1] == 'gpu-node-004')"
    svc.engine.policy = dataclasses.replace(
        svc.policy, validate_command=(sys.executable, "-c", check, "{node}")
    )
    assert svc.engine.tick() == ["gpu-node-005"]
