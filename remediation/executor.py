"""Carries out one allowed action on a backend, step by step, each step journaled.

Sits after the engine's decision. A step's intent is committed before it runs and its
result after; after a crash a step found ``started`` is checked against the scheduler
(drained already? job already moved?) instead of being repeated. Checkpoint-then-restart:
signal the job, wait for its ack file, requeue it without the bad node, verify it runs
elsewhere; without an ack by the deadline, the policy's fallback applies and is recorded.

Nothing here sleeps. A wait is a persisted deadline: the step returns ``waiting`` and the
worker's tick runs the action again (done steps are skipped) until the condition holds or
the deadline passes. Before every side-effecting step the node's epoch, the pause switch
and the intake are read: a release since the action was decided drops it (``superseded``),
a pause parks it (``paused``), and so does closed intake (the storm breaker open, or the
service shutting down): parked actions keep their reason in the journal and resume on a
later tick or after a restart. Steps that end a saga already begun (the exclusion and the
release of a job we hold) are not gated: a pause must not leave a job held. Any exception
is a failed attempt with its reason; the policy's bounded retries with backoff follow,
then ``failed`` and the node ``action_failed``. A step that raised is journaled ``failed``
(not left ``started``), so its retry does it again instead of taking the scheduler's state as
proof: a Kubernetes cordon whose evictions a PodDisruptionBudget refused is no drain. A
failed ``hold`` still counts as an open saga (the job may be held): compensation reads it.

The Slurm requeue is a saga of journaled steps (``hold`` -> wait ``pending`` -> ``requeue``:
exclude, StartTime, release, read back): the wait for PENDING is a persisted deadline like
the others; when it passes, the attempt fails and the retry waits afresh. A job we hold is
released (compensation) when its action is superseded by a manual release or fails for
good, so no job is left held without a live saga.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from remediation import storage
from remediation.backends.base import Backend, BackendError, EvacuationBlocked, NodePath
from remediation.gpureset.saga import gpu_of, reset_gpu
from remediation.interrupts import Deferred, IntakeClosed, Paused, Superseded, Waiting
from remediation.journal import Journal
from remediation.model import Job
from remediation.policy import Policy

log = logging.getLogger("gpuwarden.remediation")
TERMINAL = ("done", "failed", "superseded")
__all__ = ["Deferred", "Executor", "IntakeClosed", "Paused", "Superseded", "Waiting"]

# An action with an open saga: a job held by a ``hold`` step whose ``requeue`` step (the
# release) has not happened. A manual release must not drop it (the job would stay held for
# ever); the executor compensates it instead (engine._supersede, Executor.run).
OPEN_SAGA = (
    "EXISTS (SELECT 1 FROM steps h WHERE h.action_id=actions.id AND h.step LIKE 'hold:%' "
    "AND h.state IN ('started','done','failed') AND NOT EXISTS (SELECT 1 FROM steps r WHERE "
    "r.action_id=h.action_id AND r.step='requeue:'||substr(h.step,6) AND r.state='done'))"
)


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
        # runs the reset_gpu job on a node (a validation suite runner: SlurmValidation or
        # KubernetesValidation); None: reset_gpu falls back to reboot (dry-run: recorded)
        self.resetter: Any = None
        # set by the worker on SIGTERM: no new side effect, in-flight actions stay resumable
        self.stopping = ""

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
            try:
                state, outcome = "superseded", str(e) + self._compensate_sagas(a)
            except Exception as c:  # the job is still held: the action stays live, retried
                state, next_at = "retry", self.clock() + self.policy.retry_backoff_s
                outcome = f"{e}; compensation failed, retried: {type(c).__name__}: {c}"
        except Exception as e:  # any exception is a failed attempt, never a pending action
            if isinstance(e, EvacuationBlocked):
                self._blocked(a, e)
            kind = "" if isinstance(e, BackendError) else f"{type(e).__name__}: "
            attempts = int(a.get("attempts") or 0) + 1
            if attempts < self.policy.action_retries:
                backoff = self.policy.retry_backoff_s * 2 ** (attempts - 1)
                state, next_at = "retry", self.clock() + backoff
                outcome = f"attempt {attempts} failed: {kind}{e}; retry in {backoff:.0f}s"
            else:
                state, node_state = "failed", "action_failed"
                outcome = f"failed after {attempts} attempts: {kind}{e}"
                try:  # a job we hold is released (compensation), else held for ever
                    outcome += self._compensate_sagas(a)
                except Exception as c:
                    outcome += f"; compensation failed, job still held: {type(c).__name__}: {c}"
        health = getattr(self.backend, "health", None)  # Kubernetes: an Event on the Node
        if health is not None and a["action"] == "reset_gpu" and state in ("done", "failed"):
            ok = state == "done"
            health.event(str(a["node"]), "Normal" if ok else "Warning",
                         "GpuReset" if ok else "GpuResetFailed", outcome)  # fmt: skip
        if state in ("done", "superseded"):  # evacuated (or no longer wanted): not blocked
            self.journal.clear_evacuation(str(a["node"]), int(a["id"]))
        self.journal.finish_action(int(a["id"]), state, outcome, self.clock(), next_at, node_state)
        return state, outcome

    def _blocked(self, a: dict[str, Any], e: EvacuationBlocked) -> None:
        """Record a blocked evacuation where the node API and metrics read it, and log the
        server's own reason for each pod (not a guess: a budget not yet computed, a 403 and
        a server without policy/v1 all answer differently)."""
        pods = [{"pod": p.pod, "status": p.status, "reason": p.reason, "message": p.message}
                for p in e.pods]  # fmt: skip
        self.journal.block_evacuation(str(a["node"]), e.scope, int(a["id"]), pods, self.clock())
        for p in e.pods:
            log.warning(
                "evacuation of %s %s blocked (action %s): pod %s not evicted: HTTP %s %s: %s",
                e.scope, a["node"], a["id"], p.pod, p.status, p.reason, p.message or "-",
            )  # fmt: skip

    def _check(self, a: dict[str, Any]) -> None:
        """Before any side effect: the operator's release and pause win, then the intake."""
        if self.journal.epoch(str(a["node"])) != int(a.get("epoch") or 0):
            raise Superseded(f"superseded: {a['node']} was released after this was decided")
        if self.paused():
            raise Paused("paused before a side-effecting step; resumes with /api/v1/resume")
        if self.journal.get("breaker_opened_at"):
            raise IntakeClosed(
                "storm breaker open: parked before a side-effecting step; resumes once it closes"
            )
        if self.stopping:
            raise IntakeClosed(f"{self.stopping}: parked before a side-effecting step")

    def _compensate_sagas(self, a: dict[str, Any]) -> str:
        """A superseded action releases the jobs its open sagas hold (else: held for ever).
        A failure here is a retry: the action stays live until the job is released."""
        aid, notes = int(a["id"]), []
        for r in self.journal.rows(
            "SELECT step FROM steps WHERE action_id=? AND step LIKE 'hold:%' "
            "AND state IN ('started','done','failed')",
            (aid,),
        ):
            jid = str(r["step"])[5:]
            if self.journal.step_state(aid, f"requeue:{jid}") == "done":
                continue
            now = self.backend.job(jid)
            if now is not None and now.state not in ("PENDING", "RUNNING"):  # completing
                raise BackendError(f"job {jid} not yet pending: its hold cannot be released")
            if now is not None and now.held:
                self.backend.release_job(jid)  # type: ignore[attr-defined]
            self.journal.set_step(aid, f"hold:{jid}", "compensated", "job released")
            notes.append(f"; job {jid} released (compensation)")
        return "".join(notes)

    def _step(
        self,
        a: dict[str, Any],
        name: str,
        do: Callable[[], str],
        observed: Callable[[], bool] | None,
        gated: bool = True,
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
        if gated:
            self._check(a)
        self.journal.set_step(aid, name, "started")
        try:
            out = do()
        except Exception as e:
            # Failed, not interrupted: the retry does the step again rather than taking what
            # the scheduler shows as proof (a cordon with its evictions refused is no drain).
            self.journal.set_step(aid, name, "failed", f"{type(e).__name__}: {e}")
            raise
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

    def _gpu_only(self, a: dict[str, Any], node: str) -> str | None:
        """Kubernetes with DRA: a GPU-scoped cordon/drain taints that one device (its pods
        evicted) instead of the node; None where the node path applies."""
        if not self.policy.dra_isolation or str(a["action"]) not in ("cordon", "drain"):
            return None
        if not hasattr(self.backend, "isolate_gpu"):
            return None
        gpu = gpu_of(self, a)
        if gpu is None or self.journal.step_state(int(a["id"]), "take_out") is not None:
            return None
        b, reason, effect = self.backend, str(a["reason"]), self.policy.dra_effect
        self._check(a)
        try:
            out = b.isolate_gpu(node, gpu, reason, effect)  # type: ignore[attr-defined]
        except NodePath as e:  # e.g. no DeviceTaintRule API: the node goes, and says why
            self.journal.set_step(int(a["id"]), "isolate_gpu", "node_path", str(e))
            log.warning("GPU %s of %s not taken out alone: %s", gpu, node, e)
            return None
        if out is None:
            return None
        self.journal.set_step(int(a["id"]), "isolate_gpu", "done", out)
        return f"GPU {gpu} only: {out}"

    def _plan(self, a: dict[str, Any]) -> str:
        node, act = str(a["node"]), str(a["action"])
        if self.journal.step_state(int(a["id"]), "isolate_gpu") == "done":
            return "GPU only: " + self.journal.step_detail(int(a["id"]), "isolate_gpu")
        gpu_only = self._gpu_only(a, node)
        if gpu_only is not None:
            return gpu_only
        if self.journal.step_state(int(a["id"]), "isolate_gpu") == "node_path":
            why = self.journal.step_detail(int(a["id"]), "isolate_gpu")
            return f"GPU not taken out alone ({why}); whole node: " + self._node_path(a, node, act)
        return self._node_path(a, node, act)

    def _node_path(self, a: dict[str, Any], node: str, act: str) -> str:
        # jobs are moved one by one below (checkpoint first), so only drain/inspect evict
        evict = act in ("drain", "inspect")
        out = self._step(
            a,
            "take_out",
            lambda: self.backend.take_out(node, str(a["reason"]), evict),
            lambda: self._taken_out(node, evict),
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
        if act == "reset_gpu":
            return f"{out}; " + reset_gpu(self, a, node)
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

    def _taken_out(self, node: str, evict: bool) -> bool:
        """What a take-out interrupted by a crash shows it did: the node out of service by
        gpuwarden and, where the take-out also evicts (a backend with ``is_evacuated``:
        Kubernetes), no pod left that it evicts. A cordon whose pods still run is no drain:
        the step is done again (the cordon is kept, the evictions made)."""
        b = self.backend
        if not b.is_taken_out(node):
            return False
        return not evict or not hasattr(b, "is_evacuated") or bool(b.is_evacuated(node))

    def _requeue(self, a: dict[str, Any], job: Job, node: str) -> str:
        def requeue() -> str:
            self.backend.requeue(job, node)
            return "requeued"

        if hasattr(self.backend, "requeue_hold"):
            self._requeue_saga(a, job, node)
        else:
            self._step(a, f"requeue:{job.job_id}", requeue, lambda: self._moved(job, node))
        if self._wait(
            a,
            f"running:{job.job_id}",
            lambda: self._running_elsewhere(job, node),
            self.policy.checkpoint.restart_deadline_s,
        ):
            return f"job {job.job_id} requeued and running elsewhere"
        raise BackendError(f"job {job.job_id} requeued but not running elsewhere in time")

    def _requeue_saga(self, a: dict[str, Any], job: Job, node: str) -> None:
        """hold -> wait for PENDING (a persisted deadline, no thread sleeps) -> exclude the
        node and release (``requeue``, not gated: it ends the hold). A hold not followed by
        PENDING in time fails the attempt; the retry waits again with a fresh deadline."""
        b, jid, aid = self.backend, job.job_id, int(a["id"])

        def hold() -> str:
            return str(b.requeue_hold(job))  # type: ignore[attr-defined]

        def finish() -> str:
            return str(b.requeue_finish(job, node))  # type: ignore[attr-defined]

        # a saga found finished skips these at once (done steps are not run again)
        self._step(a, f"hold:{jid}", hold, lambda: self._held_or_moved(job, node))
        wait_s = float(b.requeue_wait_s)  # type: ignore[attr-defined]
        if not self._wait(a, f"pending:{jid}", lambda: b.requeue_pending(jid), wait_s):  # type: ignore[attr-defined]
            with self.journal.tx() as db:  # kept, renamed: the retry waits afresh
                db.execute(
                    "UPDATE steps SET step=step||? WHERE action_id=? AND step=?",
                    (f"@{self.clock():.0f}", aid, f"pending:{jid}"),
                )
            raise BackendError(
                f"job {jid} not pending {wait_s:.0f}s after requeuehold (held; the retry "
                "waits again, a failed action releases it)"
            )
        self._step(a, f"requeue:{jid}", finish, lambda: self._moved(job, node), gated=False)

    def _held_or_moved(self, job: Job, node: str) -> bool:
        """Evidence that requeuehold happened: held, or already requeued (or gone)."""
        now = self.backend.job(job.job_id)
        return now is None or now.held or now.restarts > job.restarts or node not in now.nodes

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
