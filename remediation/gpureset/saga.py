"""The ``reset_gpu`` action as a saga of persisted steps, driven by the executor's tick.

take_out (the node's drain, done by the executor) -> requeue the jobs on the GPU (Slurm: the
jobs whose GRES allocation holds it or cannot be read, the others keep running; Kubernetes:
the pods whose DRA claims hold the GPU, else the node's GPU pods) -> ``reset_start`` (the
reset suite submitted in gpuwarden's reservation, or a privileged Job bound to the node on
Kubernetes; its run recorded) -> ``reset_done`` (a persisted deadline: no thread waits) -> ``reset_verdict``
(the evidence journaled) -> ``reset_finish`` (re-drained with the verdict) -> on success the
node stays quarantined for the normal probation, validation and release; on failure or
timeout the next rung (``reboot``) in the same action, the reset's evidence in its outcome.
A restart finds every step where it was: a ``reset_start`` found ``started`` looks for the
submitted job by name instead of submitting a second one (Kubernetes: the Job's name is the
action's, so creating it again adopts the one there).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from typing import Any, Protocol

from remediation.backends.base import BackendError
from remediation.gpureset.amd import is_amd
from remediation.gpureset.job import suite
from remediation.gpureset.verdict import judge
from remediation.interrupts import Deferred, Superseded
from remediation.journal import Journal
from remediation.model import Job
from remediation.policy import Policy
from remediation.validation.slurm import ValidationRun, reservation_name


class Executor(Protocol):
    """What the saga needs of the executor that drives it (``remediation.executor``, which
    imports this module: the saga never imports the executor back)."""

    journal: Journal
    backend: Any
    policy: Policy
    resetter: Any

    def _step(self, a: dict[str, Any], name: str, do: Callable[[], str],
              observed: Callable[[], bool] | None, gated: bool = True) -> str: ...  # fmt: skip

    def _wait(self, a: dict[str, Any], name: str, pred: Callable[[], bool],
              timeout: float) -> bool: ...  # fmt: skip

    def _jobs(self, a: dict[str, Any], node: str) -> list[Job]: ...

    def _requeue(self, a: dict[str, Any], job: Job, node: str) -> str: ...


def _labels(ex: Executor, a: dict[str, Any]) -> dict[str, str]:
    """The deciding alert's labels (kept in the decision's evidence)."""
    raw = ex.journal.scalar("SELECT evidence FROM decisions WHERE id=?", (a.get("decision_id"),))
    return dict((json.loads(raw) if raw else {}).get("labels") or {})


def gpu_of(ex: Executor, a: dict[str, Any]) -> str | None:
    """The GPU index from the deciding alert's labels (kept in the decision's evidence)."""
    gpu = str(_labels(ex, a).get("gpu", ""))
    return gpu if gpu.isdigit() else None


def amd_node(ex: Executor, a: dict[str, Any], node: str) -> bool:
    """An AMD node: the alert says ``vendor="amd"`` or the topology's ``gpu_model`` is AMD's
    (then amd-smi resets and verifies, :mod:`remediation.gpureset.amd`). Decided once per
    action and journaled (step ``reset_vendor``): the saga runs every tick."""
    aid = int(a["id"])
    if ex.journal.step_state(aid, "reset_vendor") == "done":
        return ex.journal.step_detail(aid, "reset_vendor") == "amd"
    view = getattr(ex.backend, "node", lambda _n: None)(node)
    domains = getattr(view, "domains", None) or {}
    amd = is_amd(_labels(ex, a), domains.get("gpu_model"))
    ex.journal.set_step(aid, "reset_vendor", "done", "amd" if amd else "nvidia")
    return amd


def _found(ex: Executor, node: str, run_id: str) -> ValidationRun | None:
    """After a crash mid-submit: the job already submitted for this node, if any (Slurm)."""
    runner = getattr(ex.resetter, "runner", None)
    if runner is None:
        return None
    r = runner.run(["squeue", "-h", "-n", f"gpuwarden-validate-{node}", "-o", "%i"])
    ids = r.stdout.split() if r.rc == 0 else []
    out = ex.resetter.out_dir / run_id  # type: ignore[union-attr]
    if not ids and not (out / "0.rc").exists():
        return None  # never submitted (or nothing ran): submitting is safe
    # running, or already ended: its results are on disk either way
    return ValidationRun(node, run_id, ids[0] if ids else "", reservation_name(node), str(out), 2)


def _jobs(ex: Executor, a: dict[str, Any], node: str, gpu: str | None) -> list[Job]:
    """The jobs the reset must move, listed once and journaled (step ``jobs``, the
    executor's format; ``jobs_scope`` says how they were found): where the backend tells
    which jobs use the GPU (Slurm: GRES IDX; Kubernetes: DRA claims, else the node's GPU
    pods) only those, else every job of the node."""
    aid = int(a["id"])
    on_gpu = getattr(ex.backend, "jobs_on_gpu", None)
    if on_gpu is None or gpu is None or ex.journal.step_state(aid, "jobs") == "done":
        return ex._jobs(a, node)
    jobs, scope = on_gpu(node, gpu)
    ex.journal.set_step(aid, "jobs_scope", "done", scope)
    detail = json.dumps([[j.job_id, j.state, list(j.nodes), j.restarts] for j in jobs])
    ex.journal.set_step(aid, "jobs", "done", detail)
    return list(jobs)


def _run(ex: Executor, detail: str) -> Any:
    """The journaled handle of the reset job, back (each runner knows its own)."""
    load = getattr(ex.resetter, "run_from", None)
    return load(json.loads(detail)) if load is not None else ValidationRun(**json.loads(detail))


def reset_gpu(ex: Executor, a: dict[str, Any], node: str) -> str:
    aid, p = int(a["id"]), ex.policy.reset_gpu
    gpu = gpu_of(ex, a)
    amd = amd_node(ex, a, node)
    notes = [ex._requeue(a, job, node) for job in _jobs(ex, a, node, gpu)]
    if ex.backend.name == "dry-run":
        argv = " ".join(p.argv(p.amd_command if amd else p.command, gpu or "?"))
        return "; ".join([*notes, f"dry-run: would reset GPU {gpu} on {node} ({argv})"])
    if gpu is None or ex.resetter is None:
        why = (
            "no GPU index in the alert"
            if gpu is None
            else ("no way to run a job on the node (Kubernetes: validation.kubernetes.image)")
        )
        return fall_back(ex, a, node, notes, {"why": why})
    run_id = f"reset-{aid}"
    if ex.journal.step_state(aid, "reset_start") == "started":
        found = _found(ex, node, run_id)
        if found is not None:
            ex.journal.set_step(aid, "reset_start", "done", json.dumps(dataclasses.asdict(found)))

    def start() -> str:
        run = ex.resetter.start(node, suite(p, gpu, amd=amd), run_id, str(a["reason"]))  # type: ignore[union-attr]
        if ex.journal.epoch(node) != int(a.get("epoch") or 0):
            # released while the job was being submitted: the operator wins, the job goes
            ex.resetter.finish(run, None)  # type: ignore[union-attr]
            raise Superseded(f"superseded: {node} released during the reset's submit; "
                             "reset job cancelled")  # fmt: skip
        return json.dumps(dataclasses.asdict(run))

    ex._step(a, "reset_start", start, None)
    run = _run(ex, ex.journal.step_detail(aid, "reset_start"))
    got: dict[str, Any] = {}

    def ended() -> bool:
        got["runs"] = ex.resetter.poll(run)  # type: ignore[union-attr]
        return got["runs"] is not None

    if ex.journal.step_state(aid, "reset_verdict") != "done":
        if ex._wait(a, "reset_done", ended, p.deadline_s):
            runs = got.get("runs") or ex.resetter.poll(run) or []  # type: ignore[union-attr]
            passed, ev = judge(runs, amd=amd)
        else:
            ex.resetter.cancel(run)  # type: ignore[union-attr]
            passed, ev = False, {"why": f"no result within {p.deadline_s:.0f}s (job cancelled)"}
        ev["vendor"] = "amd" if amd else "nvidia"
        verdict = json.dumps({"passed": passed, "gpu": gpu, **ev}, sort_keys=True)
        ex._step(a, "reset_verdict", lambda: verdict, None, gated=False)
    ev = json.loads(ex.journal.step_detail(aid, "reset_verdict"))
    word = "gpu reset passed" if ev["passed"] else "gpu reset failed"

    def finish() -> str:
        ex.resetter.finish(run, word)  # type: ignore[union-attr]
        return f"re-drained: {word}"

    ex._step(a, "reset_finish", finish, None, gated=False)
    if ev["passed"]:
        return "; ".join([*notes, f"GPU {gpu} reset and verified: {ev['why']}; validation and "
                          "release follow through probation"])  # fmt: skip
    return fall_back(ex, a, node, notes, ev)


def fall_back(ex: Executor, a: dict[str, Any], node: str, notes: list[str],
              ev: dict[str, Any]) -> str:  # fmt: skip
    """The next rung (reboot) in the same action; deferred while the node is busy."""
    head = f"GPU reset failed: {ev.get('why')}; fell back to reboot"
    ex._step(a, "fallback", lambda: head, None, gated=False)  # the evidence, before the reboot
    if ex.journal.step_state(int(a["id"]), "reboot") != "done":
        busy = ex.backend.jobs_on(node)
        if busy:
            raise Deferred(f"{head}; reboot deferred: node busy ({len(busy)} jobs)")
    try:
        out = ex._step(a, "reboot", lambda: ex.backend.reboot(node, f"{a['reason']} (reset failed)"),
                       None)  # fmt: skip
    except BackendError as e:  # retried by the executor; the outcome keeps the reset's evidence
        raise BackendError(f"{head}; reboot: {e}") from e
    return "; ".join([*notes, f"{head}: {out}"])
