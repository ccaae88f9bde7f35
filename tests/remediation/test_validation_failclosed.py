"""Validation rails that fail closed, on fakes: gpuwarden's own reservation is gpuwarden's,
the reservation has no end of its own (deleted explicitly), and a run whose stop the
scheduler never confirms pages once (the action-failed gauge) and is retried, never
looped on."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from remediation.backends.base import BackendError
from remediation.backends.runner import Result
from remediation.backends.slurm import SlurmBackend
from remediation.clock import FakeClock
from remediation.validation.release import PAGE_AFTER, LocalSuiteRunner
from remediation.validation.slurm import (
    SchedulerUnknown,
    SlurmValidation,
    SuiteCancelled,
    ValidationRun,
)
from remediation.validation.suite import load_suites
from tests.remediation.test_validation_release import NODE, fault_then_resolve, make, state


class Replay:
    """Answers sinfo --json with the given nodes; records every other command (rc 0)."""

    def __init__(self, nodes: list[dict[str, Any]], reservations: str = "") -> None:
        self.nodes, self.reservations = nodes, reservations
        self.calls: list[list[str]] = []
        self.squeue = Result(0, "", "")

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        if argv[:2] == ["sinfo", "--json"]:
            return Result(0, json.dumps({"nodes": self.nodes}), "")
        if argv[:4] == ["scontrol", "show", "-o", "reservation"]:
            return Result(0, self.reservations, "")
        if argv[0] == "squeue":
            return self.squeue
        if argv[:3] == ["scontrol", "update", "NodeName=n1"] and "State=DRAIN" in argv:
            self.nodes[0] = {**self.nodes[0], "state": ["IDLE", "DRAIN"],
                             "reason": argv[-1].split("=", 1)[1]}  # fmt: skip
        return Result(0, "", "")


def test_a_node_in_gpuwardens_validation_reservation_is_out_of_service_by_gpuwarden() -> None:
    r = Replay([{"name": "n1", "state": ["IDLE", "MAINTENANCE", "RESERVED"], "reason": "",
                 "reservation": "gpuwarden-validate-n1"}])  # fmt: skip
    view = SlurmBackend(r).node("n1")
    assert view is not None and view.out_of_service and view.ours


def test_a_maint_node_without_a_reservation_name_is_looked_up_in_scontrol() -> None:
    line = "ReservationName=gpuwarden-validate-n1 Nodes=n1 Flags=MAINT,IGNORE_JOBS State=ACTIVE"
    r = Replay([{"name": "n1", "state": "idle", "state_flags": ["MAINT"], "reason": ""}], line)
    assert SlurmBackend(r).node("n1").ours  # type: ignore[union-attr]
    other = Replay([{"name": "n1", "state": "idle", "state_flags": ["MAINT"], "reason": ""}],
                   "ReservationName=admin-window Nodes=n1 Flags=MAINT")  # fmt: skip
    assert not SlurmBackend(other).node("n1").ours  # type: ignore[union-attr]


def test_a_node_only_in_our_reservation_is_drained_for_real_by_a_new_fault() -> None:
    r = Replay([{"name": "n1", "state": ["IDLE", "MAINTENANCE"], "reason": "",
                 "reservation": "gpuwarden-validate-n1"}])  # fmt: skip
    assert SlurmBackend(r).take_out("n1", "gpuwarden: drain nvlink d9", False) == "drained"
    assert [
        "scontrol",
        "update",
        "NodeName=n1",
        "State=DRAIN",
        "Reason=gpuwarden: drain nvlink d9",
    ] in r.calls


def test_the_reservation_has_no_end_of_its_own_and_is_deleted_only_by_the_stop(
    tmp_path: Path,
) -> None:
    """A slurmctld silent past the run's deadline, or a service down for hours after a kill
    -9, must never see the reservation lapse under a node whose drain is lifted."""
    suite = load_suites({"s": [{"name": "a", "command": ["x"], "timeout_s": 600,
                                "parser": "nccl-tests"}]})["s"]  # fmt: skip
    r = Replay([{"name": "n1", "state": ["IDLE", "DRAIN"], "reason": "gpuwarden: drain"}])
    v = SlurmValidation(r, str(tmp_path))
    run = v.start("n1", suite, "r1", "gpuwarden: drain nvlink d9")
    [create] = [c for c in r.calls if c[:3] == ["scontrol", "create", "reservation"]]
    assert "Duration=UNLIMITED" in create
    assert not [c for c in create if c.startswith(("EndTime=", "Duration=")) and "UNLIMITED"
                not in c]  # fmt: skip
    deletes = [c for c in r.calls if c[:2] == ["scontrol", "delete"]]
    assert create_index(r.calls) > r.calls.index(deletes[0])  # only a stale one, before
    r.calls.clear()
    with pytest.raises(BackendError, match="still there"):  # the Replay shows it still
        v.finish(run, "failed")
    assert ["scontrol", "delete", "ReservationName=gpuwarden-validate-n1"] in r.calls


def create_index(calls: list[list[str]]) -> int:
    return next(i for i, c in enumerate(calls) if c[:3] == ["scontrol", "create", "reservation"])


def test_a_failed_squeue_is_unknown_never_an_ended_job(tmp_path: Path) -> None:
    r = Replay([])
    r.squeue = Result(1, "", "squeue: error: Unable to contact slurm controller (connect failure)")
    v = SlurmValidation(r, str(tmp_path))
    run = ValidationRun("n1", "r1", "42", "gpuwarden-validate-n1", str(tmp_path), 1)
    try:
        v.poll(run)
    except SchedulerUnknown as e:
        assert "Unable to contact" in str(e)
    else:
        raise AssertionError("a failed squeue was read as an answer")
    r.squeue = Result(1, "", "slurm_load_jobs error: Invalid job id specified")
    (tmp_path / "0.rc").write_text("0\n")
    (tmp_path / "0.out").write_text("")
    assert v.poll(run) is not None  # slurmctld's own answer: the job is gone


def test_a_suite_job_gone_from_the_queue_without_its_results_is_cancelled_not_timed_out(
    tmp_path: Path,
) -> None:
    v = SlurmValidation(r := Replay([]), str(tmp_path))
    run = ValidationRun("n1", "r1", "42", "gpuwarden-validate-n1", str(tmp_path), 2)
    (tmp_path / "0.rc").write_text("0\n")
    (tmp_path / "0.out").write_text("")  # step 1 never ran: an admin's scancel, then purged
    for answer in (Result(0, "\n", ""), Result(1, "", "Invalid job id specified")):
        r.squeue = answer
        with pytest.raises(SuiteCancelled, match="left the queue without a result"):
            v.poll(run, gone_is_cancel=True)  # the validator's runner
        assert v.poll(run)[1].missing  # type: ignore[index]  # the GPU-reset saga: no result


def test_a_run_whose_stop_is_never_confirmed_pages_once_and_keeps_retrying(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt"])

    class StopFails(LocalSuiteRunner):
        tries = 0

        def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
            StopFails.tries += 1
            if StopFails.tries <= PAGE_AFTER + 2:
                raise OSError("scontrol: Socket timed out on send/recv")
            super().stop(handle, verdict)

    svc.validator.runner = StopFails(str(tmp_path / "runs"))
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    deadline = time.monotonic() + 15.0  # the suite runs for real: wait for it (a loaded
    while time.monotonic() < deadline:  # machine took longer than 200 quick ticks)
        svc.engine.tick()
        [last] = svc.validator.list(NODE, 1)
        if last["state"] != "running":
            break
        time.sleep(0.02)
    for _ in range(PAGE_AFTER + 1):
        svc.engine.tick()
    assert svc.validator.list(NODE, 1)[0]["state"] == "stopping"
    assert state(svc) == "validating"  # not escalated, not released, while unconfirmed
    svc.refresh_gauges()
    assert svc.metrics.node_failed.labels(NODE)._value.get() == 1  # pages
    pages = svc.journal.rows(
        "SELECT reason FROM decisions WHERE action='validate' AND reason LIKE '%could not be stopped%'"
    )
    assert len(pages) == 1  # journaled once, not each tick
    svc.engine.tick()  # the scheduler confirms at last
    assert svc.validator.list(NODE, 1)[0]["state"] == "failed"
    svc.refresh_gauges()
    assert NODE not in svc.validator.stuck()


def test_a_kubernetes_job_read_that_fails_is_unknown_never_an_ended_job() -> None:
    from remediation.validation.kubernetes import KubernetesValidation, KubeValidationRun

    class Down:
        def read_job(self, namespace: str, name: str) -> None:
            raise ConnectionRefusedError("connection refused")

    v = KubernetesValidation(Down(), "gpuwarden", "img")
    try:
        v.poll(KubeValidationRun("n1", "gpuwarden", "gpuwarden-validate-v1-n1", 1))
    except SchedulerUnknown as e:
        assert "connection refused" in str(e)
    else:
        raise AssertionError("a failed read was read as an answer")


def test_a_manual_release_that_needs_a_validation_waits_while_paused(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"], more="manual_release: true")
    fault_then_resolve(svc, clock)
    svc.engine.set_paused(True, "op")
    status, body = svc.request_release(NODE, "op")
    assert status == 409 and body["guard"] == "paused"
    assert svc.validator.list(NODE, 5) == []  # nothing started
    svc.engine.set_paused(False, "op")
    status, _ = svc.request_release(NODE, "op")
    assert status == 202  # the suite first, as the policy says
