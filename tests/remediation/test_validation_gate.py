"""The validator's gate before a release (dry-run, paused, already running, no suite) and
the consequences of a verdict: a pass whose release a pause parked is not made once an
alert fires for the node again; a manual release's pass names who asked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from remediation.clock import FakeClock
from remediation.service import Service
from tests.remediation.helpers import alert
from tests.remediation.test_validation_release import (
    NODE,
    fault_then_resolve,
    make,
    process,
    state,
    stop_suites,
    until_concluded,
)


def rec(svc: Service) -> dict[str, Any]:
    r = svc.journal.node(NODE)
    assert r is not None
    return dict(r)


def runs(svc: Service) -> int:
    return int(svc.journal.scalar("SELECT COUNT(*) FROM validations"))


def test_in_dry_run_without_a_runner_the_gate_records_what_would_run_and_lets_the_release_go(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    svc.validator.runner = None
    svc.engine.policy = dataclasses.replace(svc.engine.policy, dry_run=True)
    assert svc.validator.gate(rec(svc), "probation", "probation") is False
    [d] = svc.journal.rows(
        "SELECT node, fault_class, action, verdict, guard, reason FROM decisions "
        "WHERE action='validate'"
    )
    assert dict(d) == {
        "node": NODE, "fault_class": "nvlink", "action": "validate", "verdict": "allow",
        "guard": "dry_run", "reason": "dry-run: suite nvlink-check would run first; not run",
    }  # fmt: skip
    assert runs(svc) == 0


def test_with_a_runner_the_gate_starts_the_suite_with_its_trigger_and_who(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"], delay=5)
    fault_then_resolve(svc, clock)
    try:
        assert svc.validator.gate(rec(svc), "manual", "alice") is True
        [run] = svc.validator.list(NODE, 5)
        assert (run["trigger"], run["who"], run["suite"]) == ("manual", "alice", "nvlink-check")
        # already running: the release waits for it, no second run
        assert svc.validator.gate(rec(svc), "probation", "probation") is True
        assert runs(svc) == 1
    finally:
        stop_suites(svc)


def test_while_paused_the_gate_holds_the_release_and_starts_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    svc.engine.set_paused(True, "op")
    assert svc.validator.gate(rec(svc), "probation", "probation") is True
    assert runs(svc) == 0


def test_a_fault_class_without_a_suite_is_released_without_one(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    assert svc.validator.gate({**rec(svc), "fault_class": "memory"}, "probation", "p") is False
    assert runs(svc) == 0


def test_a_parked_pass_is_not_released_when_the_fault_fires_again_before_resume(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    svc.engine.set_paused(True, "op")
    vid = int(until_concluded(svc)["id"])
    svc.engine.tick()
    again = alert(NODE, "nvlink", "drain", starts_at="2026-11-29T11:00:00Z", fp="fp-again")
    svc.journal.accept([again], clock.now())
    process(svc)
    svc.engine.set_paused(False, "op")
    svc.engine.tick()
    assert state(svc) == "quarantined" and rec(svc)["resolved_at"] is None
    [d] = svc.journal.rows(
        "SELECT fault_class, verdict, guard, reason, evidence FROM decisions "
        "WHERE reason LIKE '%not released%'"
    )
    assert (d["fault_class"], d["verdict"], d["guard"]) == ("nvlink", "deny", "validation")
    assert d["reason"] == (
        f"validation {vid} passed, but 1 alert(s) fire for {NODE} now: not released; their "
        "resolve starts probation again"
    )
    assert json.loads(d["evidence"]) == {"validation": vid, "firing": ["fp-again"]}
    assert (
        svc.journal.scalar("SELECT COUNT(*) FROM decisions WHERE reason LIKE 'released by%'") == 0
    )


def test_a_manual_releases_pass_names_who_asked_and_a_probations_does_not(tmp_path: Path) -> None:
    for trigger, who, expected in (("manual", "alice", "validation 1 (alice)"),
                                   ("probation", "probation", "validation 1")):  # fmt: skip
        clock = FakeClock()
        d = tmp_path / trigger
        d.mkdir()
        svc = make(d, clock, ["all_reduce_perf-8gpu.txt"])
        fault_then_resolve(svc, clock)
        svc.validator.gate(rec(svc), trigger, who)
        assert until_concluded(svc)["state"] == "passed"
        assert state(svc) == "released"
        reasons = [r["reason"] for r in svc.journal.rows("SELECT reason FROM decisions")]
        assert any(r.startswith(f"released by {expected}:") for r in reasons), reasons
