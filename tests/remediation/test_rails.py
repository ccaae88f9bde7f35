"""The safety rails under bursts, failures, operators and restarts: one test per bullet of
issue 18's "Why", each of which failed on the code before it (engine and executor driven
directly, on a fake clock and the dry-run backend with a 20-node topology)."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter import catalog
from remediation.backends.base import BackendError
from remediation.clock import FakeClock
from remediation.model import ACTIONS
from remediation.service import Service
from tests.remediation.helpers import LIVE_POLICY, alert, service, topology_file

POLICY = (
    LIVE_POLICY.replace(
        "storm: {max_nodes: 50, window_s: 60, quiet_s: 120}",
        "storm: {max_nodes: 3, window_s: 60, quiet_s: 120}",
    )
    .replace(
        "  - match: {}\n", "  - match: {fault_class: pcie}\n    allow: [notify]\n  - match: {}\n"
    )
    .replace("inspect_after: 4", "inspect_after: 4\nretry: {max_attempts: 3, backoff_s: 10}")
)


@pytest.fixture
def svc(tmp_path: Path) -> Service:
    return service(tmp_path, POLICY, clock=FakeClock(), topology=topology_file(tmp_path, 20))


def clock(svc: Service) -> FakeClock:
    assert isinstance(svc.clock, FakeClock)
    return svc.clock


def decide(svc: Service, *alerts: object) -> list[int | None]:
    out = []
    for a in alerts:
        svc.journal.accept([a], svc.clock.now())  # type: ignore[list-item]
        out.append(svc.engine.decide(a))  # type: ignore[arg-type]
    return out


def last(svc: Service, node: str | None = None) -> dict:
    where = "WHERE node=?" if node else ""
    return svc.journal.rows(
        f"SELECT * FROM decisions {where} ORDER BY id DESC LIMIT 1", (node,) if node else ()
    )[0]


def run(svc: Service, aid: int | None) -> tuple[str, str]:
    assert aid is not None
    return svc.executor.run({"id": aid})


def open_breaker(svc: Service) -> None:
    decide(svc, *(alert(f"gpu-node-{i:03d}") for i in range(1, 6)))
    assert svc.engine.breaker_open()


# ---------------------------------------------------------------- the storm breaker
def test_the_breaker_closes_by_itself_quiet_s_after_the_last_flag_without_new_alerts(
    svc: Service,
) -> None:
    open_breaker(svc)
    clock(svc).advance(119)
    svc.engine.tick()
    assert svc.journal.get("breaker_opened_at") is not None
    clock(svc).advance(1)
    svc.engine.tick()
    assert svc.journal.get("breaker_opened_at") is None
    closes = svc.journal.rows("SELECT * FROM decisions WHERE action='breaker_close'")
    assert len(closes) == 1 and '"cause": "quiet"' in closes[0]["evidence"]
    assert len(svc.journal.rows("SELECT * FROM decisions WHERE action='breaker_open'")) == 1


def test_a_new_alert_after_quiet_s_is_judged_on_the_silence_before_it(svc: Service) -> None:
    open_breaker(svc)
    clock(svc).advance(121)
    [aid] = decide(svc, alert("gpu-node-010"))
    assert aid is not None, last(svc)
    assert last(svc, "gpu-node-010")["verdict"] == "allow"


def test_garbage_unknown_nodes_and_policy_denied_alerts_never_open_the_breaker(
    svc: Service,
) -> None:
    garbage = [alert(f"ghost-{i}") for i in range(10)]  # nodes nobody knows
    garbage += [alert(f"gpu-node-{i:03d}", fault_class="cosmic") for i in range(1, 10)]
    garbage += [alert(f"gpu-node-{i:03d}", action="rm -rf") for i in range(1, 10)]
    garbage += [alert("bad node!; x"), alert("")]
    garbage += [alert(f"gpu-node-{i:03d}", fault_class="pcie") for i in range(1, 10)]
    decide(svc, *garbage)
    assert not svc.engine.breaker_open()
    guards = {r["guard"] for r in svc.journal.rows("SELECT guard FROM decisions")}
    assert guards == {"invalid_alert", "policy"}
    metrics = svc.metrics.render().decode()
    name = catalog.REMEDIATION_INVALID_ALERTS.name
    assert f'{name}{{reason="unknown_node"}} 10.0' in metrics
    assert f'{name}{{reason="bad_action"}} 9.0' in metrics
    [aid] = decide(svc, alert("gpu-node-019"))
    assert aid is not None  # remediation is still on


def test_a_manual_breaker_reset_closes_it_and_is_journaled(svc: Service) -> None:
    open_breaker(svc)
    svc.engine.reset_breaker("alice")
    assert not svc.engine.breaker_open()
    row = last(svc)
    assert (row["action"], row["guard"]) == ("breaker_close", "storm_breaker")
    assert "reset by alice" in row["reason"] and '"cause": "manual"' in row["evidence"]


# ---------------------------------------------------------------- incidents
def test_one_xid_on_four_gpus_of_a_node_is_one_incident_and_one_rung(svc: Service) -> None:
    per_gpu = [alert("gpu-node-001", fp=f"fp-gpu{g}", gpu=str(g)) for g in range(4)]
    aids = decide(svc, *per_gpu)
    assert [a is not None for a in aids] == [True, False, False, False]
    allowed = svc.journal.rows(
        "SELECT action FROM decisions WHERE verdict='allow' AND guard='policy'"
    )
    assert [r["action"] for r in allowed] == ["drain"]
    assert {r["guard"] for r in svc.journal.rows("SELECT guard FROM decisions")} == {
        "policy",
        "incident",
    }
    # a recurrence after the window is the next incident: one rung up
    svc.engine.release("gpu-node-001", manual=True, who="t")
    clock(svc).advance(600)
    [aid] = decide(svc, alert("gpu-node-001", fp="fp-later", starts_at="2026-11-29T11:00:00Z"))
    assert aid is not None and last(svc, "gpu-node-001")["action"] == "checkpoint_restart"


# ---------------------------------------------------------------- operator wins
def test_a_node_in_inspection_is_not_auto_released_when_another_class_fires_and_resolves(
    svc: Service,
) -> None:
    [aid] = decide(svc, alert("gpu-node-002", action="inspect", fp="x1"))
    run(svc, aid)
    assert svc.journal.node("gpu-node-002")["state"] == "inspection"  # type: ignore[index]
    [aid2] = decide(svc, alert("gpu-node-002", fault_class="memory", fp="m1"))
    run(svc, aid2)
    decide(
        svc,
        alert("gpu-node-002", action="inspect", fp="x1", status="resolved"),
        alert("gpu-node-002", fault_class="memory", fp="m1", status="resolved"),
    )
    clock(svc).advance(10_000)
    assert svc.engine.tick() == []
    assert svc.journal.node("gpu-node-002")["state"] == "inspection"  # type: ignore[index]


def test_a_manual_release_cancels_the_queued_action_and_the_drain_never_comes_back(
    svc: Service,
) -> None:
    [aid] = decide(svc, alert("gpu-node-003"))  # queued behind the node lock, not run yet
    assert svc.engine.release("gpu-node-003", manual=True, who="bob").allow
    state, outcome = run(svc, aid)
    assert state == "superseded", outcome
    assert not svc.backend.node("gpu-node-003").out_of_service  # type: ignore[union-attr]
    assert svc.journal.node("gpu-node-003")["state"] == "released"  # type: ignore[index]


def test_a_release_during_the_drain_undoes_it(svc: Service) -> None:
    [aid] = decide(svc, alert("gpu-node-004"))
    real = svc.backend.take_out

    def take_out_then_operator_releases(node: str, reason: str, evict: bool) -> str:
        out = real(node, reason, evict)
        svc.engine._supersede(node, "bob")  # the operator's release lands mid-step
        return out

    svc.backend.take_out = take_out_then_operator_releases  # type: ignore[method-assign]
    assert run(svc, aid)[0] == "superseded"
    assert not svc.backend.node("gpu-node-004").out_of_service  # type: ignore[union-attr]


def test_a_pause_parks_a_queued_action_before_its_first_side_effect(svc: Service) -> None:
    [aid] = decide(svc, alert("gpu-node-005"))
    svc.engine.set_paused(True, "carol")
    assert run(svc, aid)[0] == "paused"
    assert not svc.backend.node("gpu-node-005").out_of_service  # type: ignore[union-attr]
    svc.engine.set_paused(False, "carol")
    assert run(svc, aid)[0] == "done"
    assert svc.backend.node("gpu-node-005").out_of_service  # type: ignore[union-attr]


# ---------------------------------------------------------------- failures
def test_a_failing_drain_is_retried_with_backoff_then_shown_as_action_failed(
    svc: Service,
) -> None:
    def refuse(node: str, reason: str, evict: bool) -> str:
        raise BackendError("scontrol: Unable to contact slurm controller")

    svc.backend.take_out = refuse  # type: ignore[method-assign]
    a = alert("gpu-node-006")
    [aid] = decide(svc, a)
    assert run(svc, aid)[0] == "retry"
    assert svc.journal.due_retries(svc.clock.now()) == []  # backoff: not yet
    clock(svc).advance(10)
    assert [r["id"] for r in svc.journal.due_retries(svc.clock.now())] == [aid]
    assert run(svc, aid)[0] == "retry"
    clock(svc).advance(20)
    state, outcome = run(svc, aid)
    assert state == "failed" and "after 3 attempts" in outcome and "slurm controller" in outcome
    assert svc.journal.node("gpu-node-006")["state"] == "action_failed"  # type: ignore[index]
    assert "gpu-node-006" in svc.journal.held_nodes()  # may be half-drained: still counted
    # Alertmanager's repeat of the alert drives the action again
    svc.backend.take_out = type(svc.backend).take_out.__get__(svc.backend)  # type: ignore[method-assign]
    svc.journal.accept([a], svc.clock.now())
    [(_, again)] = svc.journal.todo()
    assert svc.engine.decide(again) == aid
    assert run(svc, aid)[0] == "done"
    assert svc.journal.node("gpu-node-006")["state"] == "quarantined"  # type: ignore[index]


def test_any_exception_is_a_failed_attempt_with_its_reason_never_pending(svc: Service) -> None:
    def erofs(node: str, reason: str, evict: bool) -> str:
        raise OSError(30, "Read-only file system")

    svc.backend.take_out = erofs  # type: ignore[method-assign]
    [aid] = decide(svc, alert("gpu-node-007"))
    state, outcome = run(svc, aid)
    assert state == "retry" and "OSError" in outcome and "Read-only" in outcome
    [row] = svc.journal.rows("SELECT state FROM actions WHERE id=?", (aid,))
    assert row["state"] == "retry"


# ---------------------------------------------------------------- hold (unwatched)
def test_a_hold_keeps_the_node_held_and_its_resolve_changes_nothing(svc: Service) -> None:
    [aid] = decide(svc, alert("gpu-node-008", fp="f1"))
    run(svc, aid)
    hold = alert("gpu-node-008", fault_class="unwatched", action="hold", fp="h1")
    decide(svc, hold)
    assert last(svc)["action"] == "hold"
    assert svc.journal.node("gpu-node-008")["state"] == "quarantined"  # type: ignore[index]
    decide(svc, alert("gpu-node-008", fp="f1", status="resolved"))
    clock(svc).advance(10_000)
    assert svc.engine.tick() == []  # no probation, no release while unwatched
    assert svc.journal.node("gpu-node-008")["state"] == "quarantined"  # type: ignore[index]
    decide(
        svc,
        alert("gpu-node-008", fault_class="unwatched", action="hold", fp="h1", status="resolved"),
    )
    assert svc.journal.node("gpu-node-008")["state"] == "quarantined"  # type: ignore[index]
    svc.engine.tick()  # watched again and nothing firing: probation starts only now
    assert svc.journal.node("gpu-node-008")["state"] == "probation"  # type: ignore[index]


def test_a_hold_on_an_unknown_node_records_unknown_and_acts_on_nothing(svc: Service) -> None:
    decide(svc, alert("gpu-node-009", fault_class="unwatched", action="hold"))
    row = last(svc)
    assert (row["action"], row["verdict"]) == ("hold", "allow") and "state unknown" in row["reason"]
    assert svc.journal.node("gpu-node-009") is None


# ---------------------------------------------------------------- labels, dry-run
def test_twenty_thousand_action_label_values_do_not_become_metric_labels(svc: Service) -> None:
    decide(
        svc,
        *(
            alert("gpu-node-010", fault_class="thermal", action=f"a{i}", fp=f"t{i}")
            for i in range(200)
        ),
    )
    text = svc.metrics.render().decode()
    actions = {
        line.split('action="')[1].split('"')[0]
        for line in text.splitlines()
        if 'action="' in line and not line.startswith("#")
    }
    assert actions <= set(ACTIONS) | {"probation", "release", "breaker_open", "breaker_close"}


def test_the_dry_run_backend_refuses_a_node_it_cannot_know(svc: Service) -> None:
    v = svc.engine.release("no-such-node", manual=True, who="t")
    assert not v.allow and v.guard == "ownership"
