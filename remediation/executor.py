"""Carries out one allowed action on a backend, step by step, each step journaled.

Sits after the engine's decision. A step's intent is committed before it runs and its
result after; after a crash a step found ``started`` is checked against the scheduler
(drained already? job already moved?) instead of being repeated. Checkpoint-then-restart:
signal the job, wait for its ack file, requeue it without the bad node, verify it runs
elsewhere; without an ack by the deadline, the policy's fallback applies and is recorded.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediation.backends.base import Backend, BackendError
from remediation.journal import Journal
from remediation.model import Job
from remediation.policy import Policy

Sleep = Callable[[float], None]


class Deferred(Exception):
    """The action waits for a condition (an idle node); it stays in the journal as deferred."""


def ack_path(ack_dir: str, job_id: str) -> Path:
    return Path(ack_dir) / f"{job_id.replace('/', '_')}.ack"


class Executor:
    def __init__(
        self,
        journal: Journal,
        backend: Backend,
        policy: Policy,
        clock: Callable[[], float] = time.time,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.journal, self.backend, self.policy = journal, backend, policy
        self.clock, self.sleep = clock, sleep

    def run(self, action: dict[str, Any]) -> tuple[str, str]:
        """Execute (or finish, after a restart) one journaled action; returns (state, outcome)."""
        if hasattr(self.backend, "action_id"):
            self.backend.action_id = action["id"]
        try:
            state, outcome = "done", self._plan(action)
        except Deferred as e:
            state, outcome = "deferred", str(e)
        except BackendError as e:
            state, outcome = "failed", str(e)
        self.journal.finish_action(action["id"], state, outcome, self.clock())
        return state, outcome

    def retry_deferred(self, held: frozenset[str]) -> list[tuple[str, str]]:
        """Run deferred actions again, for nodes still held; returns (state, outcome) each."""
        rows = self.journal.rows("SELECT * FROM actions WHERE state='deferred' ORDER BY id")
        return [self.run(r) for r in rows if r["node"] in held]

    def _step(
        self, aid: int, name: str, do: Callable[[], str], observed: Callable[[], bool] | None
    ) -> str:
        state = self.journal.step_state(aid, name)
        if state == "done":
            return "done before restart"
        # Interrupted mid-step: look, don't repeat. An unobservable step (a signal) is not
        # sent twice.
        if state == "started" and (observed is None or observed()):
            self.journal.set_step(aid, name, "done", "reconciled after restart")
            return "reconciled after restart"
        self.journal.set_step(aid, name, "started")
        out = do()
        self.journal.set_step(aid, name, "done", out)
        return out

    def _plan(self, a: dict[str, Any]) -> str:
        aid, node, act = int(a["id"]), str(a["node"]), str(a["action"])
        out = self._step(
            aid,
            "take_out",
            # jobs are moved one by one below (checkpoint first), so only drain/inspect evict
            lambda: self.backend.take_out(node, str(a["reason"]), act in ("drain", "inspect")),
            lambda: self.backend.is_taken_out(node),
        )
        if act in ("cordon", "drain", "inspect"):
            state = "inspection" if act == "inspect" else "quarantined"

            def mark() -> str:
                self.backend.mark(node, state)
                return f"marked {state}"

            self._step(aid, "mark", mark, None)  # journaled like every write: never twice
            return out
        jobs = self.backend.jobs_on(node)
        if act == "reboot":
            if jobs:  # reboot when idle: the worker retries deferred actions each tick
                raise Deferred(f"{out}; reboot deferred: node busy ({len(jobs)} jobs)")
            return self._step(
                aid, "reboot", lambda: self.backend.reboot(node, str(a["reason"])), None
            )
        results = []
        for job in jobs:
            if act == "checkpoint_restart":
                results.append(self._checkpoint_restart(aid, job, node))
            else:
                results.append(self._requeue(aid, job, node))
        return f"{out}; " + ("; ".join(results) if results else "no jobs on node")

    def _requeue(self, aid: int, job: Job, node: str) -> str:
        def requeue() -> str:
            self.backend.requeue(job, node)
            return "requeued"

        self._step(aid, f"requeue:{job.job_id}", requeue, lambda: self._moved(job, node))
        if self._wait(
            lambda: self._running_elsewhere(job, node), self.policy.checkpoint.restart_deadline_s
        ):
            return f"job {job.job_id} requeued and running elsewhere"
        raise BackendError(f"job {job.job_id} requeued but not running elsewhere in time")

    def _checkpoint_restart(self, aid: int, job: Job, node: str) -> str:
        ck = self.policy.checkpoint
        ack = ack_path(ck.ack_dir, job.job_id)

        def signal() -> str:
            ack.unlink(missing_ok=True)  # a stale ack must not count
            self.backend.request_checkpoint(job)
            return "checkpoint requested"

        self._step(aid, f"signal:{job.job_id}", signal, None)
        if self._wait(ack.exists, ck.deadline_s):
            note = "ack received"
        elif ck.on_timeout == "wait":
            ended = self._wait(lambda: self.backend.job(job.job_id) is None, ck.restart_deadline_s)
            return f"job {job.job_id}: no ack by deadline; waited for job end ({ended=})"
        else:
            note = "no ack by deadline; requeued anyway (policy)"
        return f"job {job.job_id}: {note}; " + self._requeue(aid, job, node)

    def _moved(self, job: Job, node: str) -> bool:
        now = self.backend.job(job.job_id)
        return now is None or now.restarts > job.restarts or node not in now.nodes

    def _running_elsewhere(self, job: Job, node: str) -> bool:
        now = self.backend.job(job.job_id)
        return now is not None and now.state == "RUNNING" and node not in now.nodes

    def _wait(self, pred: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if pred():
                return True
            if time.monotonic() >= deadline:
                return False
            self.sleep(min(0.2, max(0.0, deadline - time.monotonic())))


def validate(argv: tuple[str, ...], node: str, timeout: float = 120.0) -> tuple[bool, str]:
    """Run the policy's optional validation command before an automatic release."""
    if not argv:
        return True, "no validation command"
    cmd = [a.replace("{node}", node) for a in argv]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        return False, f"validation failed to run: {e}"
    return p.returncode == 0, f"validation rc {p.returncode}: {p.stdout.strip()[-200:]}"
