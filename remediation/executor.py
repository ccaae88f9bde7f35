"""Carries out one allowed action on a backend, step by step, each step journaled.

Sits after the engine's decision. A step's intent is committed before it runs and its
result after; after a crash a step found ``started`` is checked against the scheduler
(drained already? job already moved?) instead of being repeated. Checkpoint-then-restart:
signal the job, wait for its ack file, requeue it without the bad node, verify it runs
elsewhere; without an ack by the deadline, the policy's fallback applies and is recorded.

Nothing here sleeps. A wait is a persisted deadline: the step returns ``waiting`` and the
worker's tick runs the action again (done steps are skipped) until the condition holds or
the deadline passes. Before every side-effecting step the pause switch and the node's
epoch are read: a pause parks the action (``paused``), a release since the action was
decided drops it (``superseded``). Any exception is a failed attempt with its reason; the
policy's bounded retries with backoff follow, then ``failed`` and the node ``action_failed``.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediation import storage
from remediation.backends.base import Backend, BackendError
from remediation.journal import Journal
from remediation.model import Job
from remediation.policy import Policy

TERMINAL = ("done", "failed", "superseded")


class Deferred(Exception):
    """The action waits for a condition (an idle node); it stays in the journal as deferred."""


class Waiting(Exception):
    """A wait step's condition does not hold yet and its deadline has not passed."""


class Paused(Exception):
    """The pause switch is on: no side effect now; the action resumes after ``resume``."""


class Superseded(Exception):
    """The node was released (a new epoch) after this action was decided."""


def ack_path(ack_dir: str, job_id: str) -> Path:
    return Path(ack_dir) / f"{job_id.replace('/', '_')}.ack"


class Executor:
    def __init__(
        self,
        journal: Journal,
        backend: Backend,
        policy: Policy,
        clock: Callable[[], float] = time.time,
        paused: Callable[[], bool] = lambda: False,
    ) -> None:
        self.journal, self.backend, self.policy = journal, backend, policy
        self.clock, self.paused = clock, paused

    def run(self, action: dict[str, Any]) -> tuple[str, str]:
        """Execute (or continue, after a wait or a restart) one journaled action; returns
        (state, outcome). States: done, waiting, paused, deferred, retry, failed, superseded."""
        rows = self.journal.rows("SELECT * FROM actions WHERE id=?", (action["id"],))
        a = rows[0] if rows else action
        if a["state"] in TERMINAL:
            return str(a["state"]), str(a.get("outcome") or "")
        if hasattr(self.backend, "action_id"):
            self.backend.action_id = a["id"]
        next_at, node_state = None, None
        try:
            state, outcome = "done", self._plan(a)
        except Deferred as e:
            state, outcome = "deferred", str(e)
        except Waiting as e:
            state, outcome = "waiting", str(e)
        except Paused as e:
            state, outcome = "paused", str(e)
        except Superseded as e:
            state, outcome = "superseded", str(e)
        except Exception as e:  # any exception is a failed attempt, never a pending action
            kind = "" if isinstance(e, BackendError) else f"{type(e).__name__}: "
            attempts = int(a.get("attempts") or 0) + 1
            if attempts < self.policy.action_retries:
                backoff = self.policy.retry_backoff_s * 2 ** (attempts - 1)
                state, next_at = "retry", self.clock() + backoff
                outcome = f"attempt {attempts} failed: {kind}{e}; retry in {backoff:.0f}s"
            else:
                state, node_state = "failed", "action_failed"
                outcome = f"failed after {attempts} attempts: {kind}{e}"
        self.journal.finish_action(int(a["id"]), state, outcome, self.clock(), next_at, node_state)
        return state, outcome

    def _check(self, a: dict[str, Any]) -> None:
        """Before any side effect: the operator's pause and release win."""
        if self.journal.epoch(str(a["node"])) != int(a.get("epoch") or 0):
            raise Superseded(f"superseded: {a['node']} was released after this was decided")
        if self.paused():
            raise Paused("paused before a side-effecting step; resumes with /api/v1/resume")

    def _step(
        self,
        a: dict[str, Any],
        name: str,
        do: Callable[[], str],
        observed: Callable[[], bool] | None,
    ) -> str:
        aid = int(a["id"])
        state = self.journal.step_state(aid, name)
        if state == "done":
            return "done before restart"
        # Interrupted mid-step: look, don't repeat what the scheduler shows happened. An
        # unobservable step (a signal) has no evidence: it is not "done", it is done again.
        if state == "started" and observed is not None and observed():
            self.journal.set_step(aid, name, "done", "reconciled after restart")
            return "reconciled after restart"
        self._check(a)
        self.journal.set_step(aid, name, "started")
        out = do()
        self.journal.set_step(aid, name, "done", out)
        return out

    def _wait(self, a: dict[str, Any], name: str, pred: Callable[[], bool], timeout: float) -> bool:
        """True once ``pred`` holds, False once the persisted deadline passed; else Waiting."""
        aid = int(a["id"])
        state = self.journal.step_state(aid, name)
        if state in ("done", "timeout"):
            return state == "done"
        deadline = self.journal.step_deadline(aid, name, self.clock() + timeout)
        if pred():
            self.journal.set_step(aid, name, "done", "condition met")
            return True
        if self.clock() >= deadline:
            self.journal.set_step(aid, name, "timeout", f"deadline {deadline:.0f} passed")
            return False
        raise Waiting(f"{name}: waiting until {deadline:.0f}")

    def _plan(self, a: dict[str, Any]) -> str:
        node, act = str(a["node"]), str(a["action"])
        out = self._step(
            a,
            "take_out",
            # jobs are moved one by one below (checkpoint first), so only drain/inspect evict
            lambda: self.backend.take_out(node, str(a["reason"]), act in ("drain", "inspect")),
            lambda: self.backend.is_taken_out(node),
        )
        if self.journal.epoch(node) != int(a.get("epoch") or 0):
            # released while the drain was in flight: the operator wins, the drain is undone
            self.backend.release(node)
            raise Superseded(f"superseded: {node} released during the drain; drain undone")
        if act in ("cordon", "drain", "inspect"):
            state = "inspection" if act == "inspect" else "quarantined"

            def mark() -> str:
                self.backend.mark(node, state)
                return f"marked {state}"

            self._step(a, "mark", mark, None)  # idempotent: repeated after a crash
            return out
        if act == "reboot":
            busy = self.backend.jobs_on(node)  # read fresh: the reboot waits for an idle node
            if busy:  # the worker runs deferred actions again each tick
                raise Deferred(f"{out}; reboot deferred: node busy ({len(busy)} jobs)")
            return self._step(
                a, "reboot", lambda: self.backend.reboot(node, str(a["reason"])), None
            )
        jobs = self._jobs(a, node)
        results = []
        for job in jobs:
            if act == "checkpoint_restart":
                results.append(self._checkpoint_restart(a, job, node))
            else:
                results.append(self._requeue(a, job, node))
        return f"{out}; " + ("; ".join(results) if results else "no jobs on node")

    def _requeue(self, a: dict[str, Any], job: Job, node: str) -> str:
        def requeue() -> str:
            self.backend.requeue(job, node)
            return "requeued"

        self._step(a, f"requeue:{job.job_id}", requeue, lambda: self._moved(job, node))
        if self._wait(
            a,
            f"running:{job.job_id}",
            lambda: self._running_elsewhere(job, node),
            self.policy.checkpoint.restart_deadline_s,
        ):
            return f"job {job.job_id} requeued and running elsewhere"
        raise BackendError(f"job {job.job_id} requeued but not running elsewhere in time")

    def _checkpoint_restart(self, a: dict[str, Any], job: Job, node: str) -> str:
        ck = self.policy.checkpoint
        ack = ack_path(ck.ack_dir, job.job_id)

        def signal() -> str:
            now = self.backend.job(job.job_id)
            if now is None or now.state != "RUNNING":
                return "job no longer running: not signalled"
            # the storage may have failed since the decision: never a checkpoint into it
            held = storage.held_back(self.journal, ck.mount, (node, *job.nodes))
            if held is not None:
                return held
            ack.unlink(missing_ok=True)  # a stale ack must not count
            self.backend.request_checkpoint(job)
            return "checkpoint requested"

        self._step(a, f"signal:{job.job_id}", signal, None)
        held = self.journal.step_detail(int(a["id"]), f"signal:{job.job_id}")
        if held.startswith(storage.HELD_BACK):
            if ck.on_storage_unhealthy in ("cordon", "hold"):
                return f"job {job.job_id}: {held}; left running (policy)"
            return f"job {job.job_id}: {held}; requeued without one; " + self._requeue(a, job, node)
        if self._wait(a, f"ack:{job.job_id}", ack.exists, ck.deadline_s):
            note = "ack received"
        elif ck.on_timeout == "wait":
            ended = self._wait(
                a,
                f"end:{job.job_id}",
                lambda: self.backend.job(job.job_id) is None,
                ck.restart_deadline_s,
            )
            return f"job {job.job_id}: no ack by deadline; waited for job end ({ended=})"
        else:
            note = "no ack by deadline; requeued anyway (policy)"
        return f"job {job.job_id}: {note}; " + self._requeue(a, job, node)

    def _jobs(self, a: dict[str, Any], node: str) -> list[Job]:
        """The jobs on the node when the action first looked (persisted: a requeued job has
        left the node by the next tick, and its restart must still be verified)."""
        aid = int(a["id"])
        if self.journal.step_state(aid, "jobs") == "done":
            return [
                Job(j[0], j[1], tuple(j[2]), j[3])
                for j in json.loads(self.journal.step_detail(aid, "jobs"))
            ]
        jobs = list(self.backend.jobs_on(node))
        detail = json.dumps([[j.job_id, j.state, list(j.nodes), j.restarts] for j in jobs])
        self.journal.set_step(aid, "jobs", "done", detail)
        return jobs

    def _moved(self, job: Job, node: str) -> bool:
        """Evidence that the requeue happened: gone, or restarted/off the node and not left
        held (a requeue interrupted between hold and release is finished, not trusted)."""
        now = self.backend.job(job.job_id)
        if now is None:
            return True
        return (now.restarts > job.restarts or node not in now.nodes) and not now.held

    def _running_elsewhere(self, job: Job, node: str) -> bool:
        now = self.backend.job(job.job_id)
        return now is not None and now.state == "RUNNING" and node not in now.nodes


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
