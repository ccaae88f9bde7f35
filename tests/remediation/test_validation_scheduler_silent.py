"""A scheduler that does not answer is no verdict: validation before release neither starts,
fails, nor escalates on it, and a decision that waits for it leaves no incident behind.

Found by the rails' state machine (test_invariants.py) with ``sinfo`` failing: a suite that
could not look the node up was failed and escalated, and the escalation's decision raised out
of the tick; every retry of a waiting alert past the incident window opened one more incident.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from remediation.backends.base import Backend, Unavailable
from remediation.clock import FakeClock
from remediation.model import NodeView
from remediation.service import Service
from tests.remediation.helpers import alert
from tests.remediation.test_validation_release import (
    NODE,
    actions,
    fault_then_resolve,
    make,
    process,
    state,
    stop_suites,
    until_concluded,
)

SILENT = "sinfo --json: rc 1: sinfo: Unable to contact slurm controller"


class SilentScheduler:
    """The service's backend, but reads of the fleet or of one node can be made to get no
    answer (as the Slurm backend raises for a timeout or an unreachable slurmctld)."""

    def __init__(self, inner: Backend) -> None:
        self.inner = inner
        self.fleet_silent = False
        self.node_silent = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def fleet(self) -> tuple[NodeView, ...]:
        if self.fleet_silent:
            raise Unavailable(SILENT)
        return self.inner.fleet()

    def node(self, name: str) -> NodeView | None:
        if self.node_silent:
            raise Unavailable(SILENT)
        return self.inner.node(name)


def silent(svc: Service) -> SilentScheduler:
    wrapper = SilentScheduler(svc.engine.backend)
    svc.engine.backend = wrapper  # type: ignore[assignment]
    return wrapper


def validations(svc: Service) -> list[dict[str, Any]]:
    return svc.journal.rows("SELECT * FROM validations ORDER BY id")


def incidents(svc: Service) -> int:
    return int(svc.journal.scalar("SELECT COUNT(*) FROM incidents"))


def test_probation_ending_while_the_scheduler_is_silent_starts_no_suite_and_fails_none(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    sched = silent(svc)
    sched.node_silent = True
    clock.advance(61)
    for _ in range(3):
        svc.engine.tick()
    assert validations(svc) == []
    assert state(svc) == "probation" and actions(svc) == ["drain"]
    sched.node_silent = False
    svc.engine.tick()
    try:
        assert state(svc) == "validating"
        assert until_concluded(svc)["state"] == "passed"
        assert state(svc) == "released"
    finally:
        stop_suites(svc)


def test_a_finished_suite_is_judged_only_once_the_scheduler_answers(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    assert state(svc) == "validating"
    sched = silent(svc)
    sched.node_silent = True
    try:
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # the stub finishes at once; its result waits
            svc.engine.tick()
            time.sleep(0.05)
        [run] = validations(svc)
        assert run["state"] == "running" and state(svc) == "validating"
        sched.node_silent = False
        assert until_concluded(svc)["state"] == "passed"
        assert state(svc) == "released" and actions(svc) == ["drain"]
    finally:
        stop_suites(svc)


def test_an_escalation_the_scheduler_cannot_decide_waits_with_the_node_out(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt", "all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    sched = silent(svc)
    sched.fleet_silent = True  # the suite is judged; the escalation's decision gets no answer
    try:
        assert until_concluded(svc)["state"] == "failed"
        for _ in range(3):
            clock.advance(61)
            svc.engine.tick()
        assert actions(svc) == ["drain"]  # nothing decided without the fleet
        assert len(validations(svc)) == 1  # not validated again around the escalation
        assert state(svc) == "validating"  # out, never released
        sched.fleet_silent = False
        svc.engine.tick()  # the parked escalation is decided
        process(svc)
        assert actions(svc) == ["drain", "checkpoint_restart"]  # one rung up, as without
        assert state(svc) in ("quarantined", "probation")  # the silence; probation over again
        [run] = validations(svc)
        assert run["parked"] == 0
    finally:
        stop_suites(svc)


def test_a_decision_that_waits_for_the_scheduler_leaves_no_incident_per_try(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    sched = silent(svc)
    sched.fleet_silent = True
    firing = alert(NODE, "nvlink", "drain", starts_at="2026-11-29T10:00:00Z")
    for _ in range(3):  # each try past the incident window (120 s) would open a new one
        with pytest.raises(Unavailable):
            svc.engine.decide(firing, clock.now())
        clock.advance(200)
    assert incidents(svc) == 0 and actions(svc) == []
    sched.fleet_silent = False
    assert svc.engine.decide(firing, clock.now()) is not None
    assert incidents(svc) == 1 and actions(svc) == ["drain"]
