"""What the validator tells people: the page for a run whose stop slurmctld never confirms
(its decision text, evidence, journal columns and counter, once), and what the API says a
pause holds back for a node (``parked``), in each state a node can be in."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from remediation.clock import FakeClock
from remediation.validation.release import PAGE_AFTER, LocalSuiteRunner
from tests.remediation.test_validation_release import (
    NODE,
    fault_then_resolve,
    make,
    stop_suites,
    until_concluded,
)


class StopFails(LocalSuiteRunner):
    tries = 0

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        StopFails.tries += 1
        raise OSError("scontrol: Socket timed out on send/recv")


def test_a_stop_never_confirmed_pages_once_with_its_error_and_counts_each_try(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt"])
    StopFails.tries = 0
    svc.validator.runner = StopFails(str(tmp_path / "runs"))
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    vid = int(until_concluded(svc)["id"])
    # the conclusion tried its stop once already
    assert svc.journal.scalar("SELECT stop_tries FROM validations") == 1 == StopFails.tries
    tries: list[int] = []  # the column after each tick: one more failed stop each time
    pages: list[int] = []
    for _ in range(PAGE_AFTER + 2):
        svc.engine.tick()
        tries.append(int(svc.journal.scalar("SELECT stop_tries FROM validations")))
        pages.append(
            int(
                svc.journal.scalar(
                    "SELECT COUNT(*) FROM decisions WHERE reason LIKE '%could not be stopped%'"
                )
            )
        )
    assert tries == list(range(2, PAGE_AFTER + 4))
    assert pages == [int(t >= PAGE_AFTER) for t in tries]  # on the PAGE_AFTER-th try, once
    row = svc.journal.rows("SELECT stop_tries, stop_error, state FROM validations")[0]
    assert row["state"] == "stopping" and row["stop_tries"] >= PAGE_AFTER + 1
    assert row["stop_error"] == "OSError: scontrol: Socket timed out on send/recv"
    [page] = svc.journal.rows(
        "SELECT verdict, guard, reason, evidence, fault_class FROM decisions "
        "WHERE reason LIKE '%could not be stopped%'"
    )
    assert page["verdict"] == "deny" and page["guard"] == "validation"
    assert page["fault_class"] == "nvlink"
    assert page["reason"] == (
        f"validation {vid} of {NODE} could not be stopped after {PAGE_AFTER} tries (the node may "
        "be in service with a fault): OSError: scontrol: Socket timed out on send/recv"
    )
    assert json.loads(page["evidence"]) == {
        "validation": vid,
        "stop_error": "OSError: scontrol: Socket timed out on send/recv",
    }
    failed = svc.metrics.actions.labels(svc.engine.backend.name, "validate_stop", "failed")
    assert failed._value.get() == 1  # the page, once
    assert svc.validator.stuck() == (NODE,)


def test_an_unknown_node_or_an_unpaused_service_parks_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    assert svc.validator.parked(NODE) is None  # not paused
    svc.engine.set_paused(True, "op")
    assert svc.validator.parked("gpu-node-004") is None  # nothing of ours there


def test_a_paused_node_on_probation_says_its_validation_and_release_wait(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    svc.engine.set_paused(True, "op")
    assert svc.validator.parked(NODE) == (
        "probation: the validation and the release wait for resume (paused)"
    )


def test_a_paused_running_validation_says_what_follows_waits(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"], delay=5)
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    [run] = svc.validator.list(NODE, 1)
    svc.engine.set_paused(True, "op")
    try:
        assert svc.validator.parked(NODE) == (
            f"validation {run['id']} running; what follows waits for resume (paused)"
        )
    finally:
        stop_suites(svc)


def test_a_paused_verdict_names_the_release_or_the_escalation_it_holds_back(
    tmp_path: Path,
) -> None:
    for fixture, state, what in (
        ("all_reduce_perf-8gpu.txt", "passed", "release"),
        ("all_reduce_perf-slow.txt", "failed", "escalation"),
    ):
        clock = FakeClock()
        d = tmp_path / state
        d.mkdir()
        svc = make(d, clock, [fixture])
        fault_then_resolve(svc, clock)
        clock.advance(61)
        svc.engine.tick()
        svc.engine.set_paused(True, "op")
        last = until_concluded(svc)
        for _ in range(3):
            svc.engine.tick()
        [last] = svc.validator.list(NODE, 1)
        assert last["state"] == state and last["parked"] == 1
        assert svc.validator.parked(NODE) == (
            f"validation {last['id']} {state}; its {what} waits for resume (paused)"
        )
        svc.engine.set_paused(False, "op")
        svc.engine.tick()
        assert svc.validator.parked(NODE) is None
