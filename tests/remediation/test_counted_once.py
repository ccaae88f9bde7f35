"""Each action's outcome is counted once in actions_total, even when a stale copy of its row
is run again after it finished (a tick and a webhook racing); a suite job cancelled by an
admin is journaled as cancelled, not as timed out."""

from __future__ import annotations

import asyncio
from pathlib import Path

from aiohttp.test_utils import TestClient

from remediation.backends.runner import Result
from remediation.service import Service
from remediation.validation.slurm import SlurmValidation, SuiteCancelled, ValidationRun
from tests.remediation.helpers import AUTH, alert, payload
from tests.remediation.test_validation_failclosed import Replay


def counted(svc: Service, action: str, state: str) -> float:
    return svc.metrics.actions.labels(svc.backend.name, action, state)._value.get()


async def test_a_finished_action_run_again_from_a_stale_row_is_not_counted_twice(
    svc_client: tuple[Service, TestClient],
) -> None:
    svc, client = svc_client
    assert (await client.post("/alertmanager", data=payload(alert()), headers=AUTH)).ok
    await svc.worker.idle(20)
    [row] = svc.journal.rows("SELECT * FROM actions")
    assert row["state"] == "done" and counted(svc, "drain", "done") == 1
    svc.worker._spawn({**row, "state": "pending"})  # what an earlier read saw
    await asyncio.sleep(0)
    await svc.worker.idle(20)
    assert counted(svc, "drain", "done") == 1


def test_a_suite_job_cancelled_by_an_admin_is_cancelled_not_timed_out(tmp_path: Path) -> None:
    r = Replay([])
    r.squeue = Result(0, "CANCELLED\n", "")
    run = ValidationRun("n1", "r1", "42", "gpuwarden-validate-n1", str(tmp_path), 2)
    try:
        SlurmValidation(r, str(tmp_path)).poll(run)
    except SuiteCancelled as e:
        assert "cancelled outside gpuwarden" in str(e)
    else:
        raise AssertionError("an admin's scancel was judged as step results")


def test_the_validator_journals_an_admins_cancel_as_cancelled_and_keeps_the_node_out(
    tmp_path: Path,
) -> None:
    from typing import Any

    from remediation.clock import FakeClock
    from remediation.validation.release import LocalSuiteRunner
    from tests.remediation.test_validation_release import NODE, fault_then_resolve, make, state

    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])

    class AdminCancels(LocalSuiteRunner):
        def poll(self, handle: dict[str, Any]) -> Any:
            raise SuiteCancelled("suite job 42 was cancelled outside gpuwarden")

    svc.validator.runner = AdminCancels(str(tmp_path / "runs"))
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    svc.engine.tick()
    [last] = svc.validator.list(NODE, 1)
    assert last["state"] == "cancelled" and "timed out" not in last["reason"]
    assert state(svc) in ("quarantined", "probation")  # out; probation starts over
    assert counted(svc, "validate", "cancelled") == 1
