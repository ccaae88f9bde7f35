"""The maintenance loop's edge: each tick, per live run, gather the World (scheduler,
journal, ack files, operations, validations), let the pure machine decide, carry out its
effects, and commit the new states (with their events) in one transaction.

Runs on the worker's tick (remediation/worker.py), beside the engine's. Every effect is
safe to repeat, so a kill -9 anywhere costs at most one repeated effect: a drain is read
back first, a checkpoint request is a signal (a second one is acknowledged again), a
requeue happens only to a job still on the node, an operation and a validation each have
a persisted handle (one without a handle is ``lost`` and started again, after whatever it
left is stopped), and a release is only of a node the scheduler shows drained by us.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from remediation.backends.base import Backend, BackendError
from remediation.executor import ack_path
from remediation.journal import Journal
from remediation.maintenance import machine, operations, planner, store
from remediation.maintenance.model import (
    DONE,
    FAILED,
    IN_FLIGHT,
    NODE_STATES,
    OPERATING,
    PENDING,
    SKIPPED,
    VALIDATING,
    Effect,
    NodeRun,
    Run,
    Spec,
    SpecError,
    World,
)
from remediation.model import REASON_PREFIX
from remediation.policy import Policy
from remediation.validation.release import SuiteRunner, summary
from remediation.validation.slurm import SchedulerUnknown, SuiteCancelled
from remediation.validation.suite import judge_suite

log = logging.getLogger("gpuwarden.remediation")
PREFIX = f"{REASON_PREFIX} maintenance"


class Maintenance:
    def __init__(
        self,
        journal: Journal,
        backend: Backend,
        policy: Policy,
        clock: Callable[[], float],
        paused: Callable[[], bool],
        suites: SuiteRunner | None,
        state_dir: Path,
        events_source: str | None = None,
        partition: Callable[[str], tuple[str, ...]] | None = None,
        runner: Any = None,  # the Slurm command runner (slurm_reboot), None elsewhere
        kube: Any = None,  # the Kubernetes API (kube_job), None elsewhere and under dry-run
        kube_namespace: str = "gpuwarden",  # a kube_job's namespace when its manifest has none
    ) -> None:
        self.journal, self.backend, self.policy = journal, backend, policy
        self.clock, self.paused, self.suites = clock, paused, suites
        self.state_dir, self.events_source = state_dir, events_source
        self.partition, self.runner = partition, runner
        self.kube, self.kube_namespace = kube, kube_namespace
        self.operators: dict[int, operations.Operator] = {}
        store.ensure(journal)

    # ------------------------------------------------------------------ the API's verbs
    def plan(self, raw: Any) -> tuple[Spec, tuple[tuple[str, ...], ...], dict[str, Any]]:
        """Resolve and check a request; the waves and today's budget room. Changes nothing."""
        if not isinstance(raw, dict):
            raise SpecError("expected a JSON object")
        fleet = self.backend.fleet()
        sel = raw.get("select") or {}
        members = None
        if isinstance(sel, dict) and "partition" in sel:
            if self.partition is None:
                raise SpecError("select.partition: this backend has no partitions")
            members = self.partition(str(sel["partition"]))
        nodes = planner.select(fleet, sel, members)
        spec = store_spec(raw, nodes, frozenset(self.policy.validation.suites))
        if spec.operation.kind == "slurm_reboot" and self.backend.name != "slurm":
            raise SpecError("operation slurm_reboot: only with --backend slurm")
        if spec.operation.kind == "kube_job":
            spec = self._kube_job(spec)
        waves = planner.waves(nodes, fleet, spec.wave_size, self.policy)
        out = planner.out_now(fleet, self.journal.held_nodes()) | store.out_for_maintenance(
            self.journal
        )
        room = {
            "out_now": sorted(out),
            "fleet_size": len(fleet),
            "headroom": planner.headroom(out, fleet, self.policy),
            "over_budget": planner.violations(out, fleet, self.policy),
            "skipped": sorted(n for n in nodes if n in out),
        }
        return spec, waves, room

    def _kube_job(self, spec: Spec) -> Spec:
        """The manifest with its namespace written in (what the run will use), checked by
        the API server with a dry-run create of the first node's Job: a manifest it would
        refuse stops the plan, nothing started."""
        if self.kube is None or self.backend.name != "kubernetes":
            raise SpecError(
                "operation kube_job: only with --backend kubernetes, live (not under dry-run)"
            )
        op = spec.operation
        meta = dict(op.job.get("metadata") or {})
        meta["namespace"] = meta.get("namespace") or self.kube_namespace
        op = replace(op, job={**op.job, "metadata": meta})
        problem = operations.KubeJob(self.kube, op.job, meta["namespace"], op.timeout_s).check(
            spec.nodes[0]
        )
        if problem:
            raise SpecError(f"operation.job: {problem}")
        return replace(spec, operation=op)

    def start(self, raw: Any, who: str) -> Run:
        spec, waves, _ = self.plan(raw)
        nodes = tuple(NodeRun(n, w) for w, wave in enumerate(waves) for n in wave)
        run = store.create(self.journal, spec, nodes, self.clock(), who)
        log.info("maintenance run %s started by %s: %d nodes in %d waves (%s)", run.id, who,
                 len(nodes), len(waves), spec.operation.describe())  # fmt: skip
        return run

    def get(self, run_id: int) -> Run | None:
        return store.load(self.journal, run_id, reader=True)

    def runs(self) -> list[Run]:
        return [r for i in store.ids(self.journal, reader=True) if (r := self.get(i))]

    def set_state(self, run_id: int, verb: str, who: str) -> Run:
        """pause / resume / abort; raises ValueError when the run cannot."""
        run = store.load(self.journal, run_id)
        if run is None:
            raise LookupError(f"no maintenance run {run_id}")
        if run.state in ("aborted", "done"):
            raise ValueError(f"run {run_id} is {run.state}")
        effects: list[Effect] = []
        if verb == "pause":
            new = replace(run, state="paused", reason=f"paused by {who}")
        elif verb == "resume":
            if run.state != "paused":
                raise ValueError(f"run {run_id} is {run.state}, not paused")
            new = replace(run, state="running", reason="")
        elif verb == "abort":
            new, effects = machine.abort(run, self.clock(), f"by {who}")
        else:
            raise ValueError(f"unknown verb {verb!r}")
        new = self._apply(new, effects)
        store.save(self.journal, run, new, self.clock(), self.events_source)
        return new

    def decide(self, run_id: int, node: str, choice: str, who: str) -> Run:
        run = store.load(self.journal, run_id)
        if run is None:
            raise LookupError(f"no maintenance run {run_id}")
        new, effects = machine.decide(run, node, choice, self.clock())
        new = self._apply(new, effects)
        store.save(self.journal, run, new, self.clock(), self.events_source)
        log.info("maintenance run %s: %s %s by %s", run_id, choice, node, who)
        return new

    # ------------------------------------------------------------------ the tick
    def tick(self) -> None:
        for rid in store.ids(self.journal, live_only=True):
            run = store.load(self.journal, rid)
            if run is None or run.state == "paused":
                continue
            world = self.world(run)
            self._reconcile_done(run, world)
            new, effects = machine.advance(run, world, self.policy)
            new = self._apply(new, effects, before=run)
            store.save(self.journal, run, new, world.now, self.events_source)

    def world(self, run: Run) -> World:
        now, fleet = self.clock(), self.backend.fleet()
        flying = [n for n in run.nodes if n.state in IN_FLIGHT]
        jobs = {n.node: self.backend.jobs_on(n.node) for n in flying if n.state not in
                (OPERATING, VALIDATING)}  # fmt: skip
        ack_dir = self.policy.checkpoint.ack_dir
        signalled = {j for n in flying for j in n.signalled}
        acked = frozenset(j for j in signalled if ack_path(ack_dir, j).exists())
        op = {n.node: self._op(run, n) for n in flying if n.state == OPERATING}
        val = {n.node: self._validation(run, n) for n in flying if n.state == VALIDATING}
        others = store.out_for_maintenance(self.journal) - run.in_flight()
        return World(now, self.paused(), fleet, self.journal.held_nodes(), jobs, acked, op,
                     val, others)  # fmt: skip

    def _operator(self, run: Run) -> operations.Operator:
        if run.id not in self.operators:
            reason = f"{PREFIX} {run.id}: {run.spec.operation.kind}"
            self.operators[run.id] = operations.make(
                run.spec.operation, self.state_dir, self.runner, reason, self.kube,
                self.kube_namespace,
            )  # fmt: skip
        return self.operators[run.id]

    def _op(self, run: Run, n: NodeRun) -> str:
        if not n.handle:
            return "lost"
        return self._operator(run).poll(json.loads(n.handle))

    def _validation(self, run: Run, n: NodeRun) -> str:
        """The suite's verdict once its run is stopped (the node drained by us again)."""
        if not n.handle or self.suites is None:
            return "lost" if self.suites is not None else "failed: no suite runner here"
        handle = json.loads(n.handle)
        verdict_text = store.kept_verdict(self.journal, n.handle)
        if verdict_text is None:
            try:
                runs = self.suites.poll(handle)
            except SuiteCancelled as e:
                verdict_text = f"failed: {e}"
            except (SchedulerUnknown, BackendError):
                return "running"  # the scheduler did not answer: not a verdict
            else:
                if runs is None:
                    return "running"
                suite = self.policy.validation.suites[run.spec.suite]
                verdict = judge_suite(suite, runs)
                verdict_text = "passed" if verdict.passed else f"failed: {summary(verdict)}"
            # the stop below deletes what the poll read (a Job): the verdict is journaled
            # first, and goes with the node's next state (store.save), after the stop
            store.keep_verdict(self.journal, run.id, n.node, n.handle, verdict_text,
                               self.clock())  # fmt: skip
        try:
            self.suites.stop(handle, "passed" if verdict_text == "passed" else "failed")
        except Exception as e:  # retried next tick: a verdict acts only once the node is ours
            log.warning("maintenance: stopping validation on %s: %s", n.node, e)
            return "running"
        return verdict_text

    def _reconcile_done(self, run: Run, world: World) -> None:
        """A node released (DONE) that the scheduler still shows drained by us (a crash
        before the release, a failed release): released again."""
        views = {v.name: v for v in world.fleet}
        for n in run.nodes:
            v = views.get(n.node)
            kept = "kept out" in n.reason
            if (
                n.state == DONE
                and not kept
                and v is not None
                and v.ours
                and n.node not in world.faulted
            ):
                self._effect(run, Effect("release", n.node, detail="reconcile"))

    # ------------------------------------------------------------------ effects
    def _apply(self, run: Run, effects: list[Effect], before: Run | None = None) -> Run:
        for e in effects:
            try:
                run = self._effect(run, e, before)
            except Exception as err:  # one node's failure never stops the others
                log.warning("maintenance run %s: %s %s failed: %s", run.id, e.kind, e.node, err)
                run = _undo(run, e, f"{e.kind} failed: {type(err).__name__}: {err}", self.clock())
                moved = run.node(e.node)
                if e.kind in ("operate", "validate") and moved is not None:
                    try:  # fails closed: kept out, in the fault path
                        self._keep_out(run, e.node, moved.reason)
                    except Exception as again:
                        log.warning("maintenance: keeping %s out: %s", e.node, again)
        return run

    def _effect(self, run: Run, e: Effect, before: Run | None = None) -> Run:
        b, node = self.backend, e.node
        if e.kind == "drain":
            b.take_out(node, f"{PREFIX} {run.id} {run.spec.reason}".strip()[:200], False)
        elif e.kind == "checkpoint":
            job = b.job(e.job)
            if job is not None and job.state == "RUNNING":
                n = before.node(node) if before is not None else None
                if n is None or e.job not in n.signalled:  # a stale ack must not count
                    ack_path(self.policy.checkpoint.ack_dir, e.job).unlink(missing_ok=True)
                b.request_checkpoint(job)
        elif e.kind == "requeue":
            job = b.job(e.job)
            if job is not None and node in job.nodes and job.state in ("RUNNING", "SUSPENDED"):
                b.requeue(job, node)
                log.info("maintenance run %s: job %s requeued off %s (%s)", run.id, e.job, node,
                         e.detail)  # fmt: skip
        elif e.kind == "operate":
            n = run.node(node)
            assert n is not None
            handle = self._operator(run).start(run.id, node, n.attempt)
            return _with(run, replace(n, handle=operations.dumps(handle)))
        elif e.kind == "validate":
            return self._validate(run, e, before)
        elif e.kind == "release":
            v = b.node(node)
            held = node in self.journal.held_nodes()  # faults win: never released here
            if v is not None and v.out_of_service and v.ours and not held:
                b.release(node)
        elif e.kind == "keep_out":
            self._keep_out(run, node, e.detail)
        return run

    def _validate(self, run: Run, e: Effect, before: Run | None) -> Run:
        n = run.node(e.node)
        assert n is not None
        if self.suites is None:
            raise BackendError("no suite runner: validation runs only with a live backend")
        # the intent first: a crash while the suite starts leaves a run found by name
        store.save(self.journal, before or run, run, self.clock(), self.events_source)
        rid = f"maint{run.id}-{e.node}-{n.attempt}"
        if e.detail == "restart":
            self.suites.stop_lost(e.node, rid, "lost")
        view = self.backend.node(e.node)
        if view is None:
            raise BackendError(f"node {e.node} unknown to the scheduler")
        suite = self.policy.validation.suites[run.spec.suite]
        handle = self.suites.start(e.node, suite, rid, view)
        moved = replace(n, handle=json.dumps(handle, sort_keys=True))
        new = _with(run, moved)
        store.save(self.journal, run, new, self.clock(), None)
        return new

    def _keep_out(self, run: Run, node: str, why: str) -> None:
        """A failed node stays out and enters the fault path: held (quarantined) in the
        journal with its reason and a decision, released like any fault (with validation)."""
        view = self.backend.node(node)
        if view is not None and not view.out_of_service:
            self.backend.take_out(node, f"{PREFIX} {run.id} failed: {why}"[:200], False)
        now = self.clock()
        with self.journal.tx() as db:
            self.journal.set_node(db, node, state="quarantined", fault_class="maintenance",
                                  action="drain", since=now, reason=f"maintenance {run.id}: {why}",
                                  resolved_at=None)  # fmt: skip
            db.execute(
                "INSERT INTO decisions(alert_key,node,fault_class,action,verdict,guard,reason,"
                "evidence,at) VALUES(?,?,?,?,?,?,?,?,?)",
                (f"maintenance-{run.id}-{node}", node, "maintenance", "drain", "allow",
                 "maintenance", f"run {run.id}: {why}", json.dumps({"run": run.id}), now),
            )  # fmt: skip

    def refresh(self, metrics: Any) -> None:
        """Progress gauges of the live runs (the read-only connection)."""
        for g in (metrics.maintenance_nodes, metrics.maintenance_progress, metrics.maintenance_eta):
            g.clear()
        now = self.clock()
        for rid in store.ids(self.journal, live_only=True, reader=True):
            run = self.get(rid)
            if run is None:
                continue
            for state in NODE_STATES:
                n = sum(1 for x in run.nodes if x.state == state)
                metrics.maintenance_nodes.labels(str(rid), state).set(n)
            done, eta = machine.progress(run, now)
            metrics.maintenance_progress.labels(str(rid)).set(done)
            metrics.maintenance_eta.labels(str(rid)).set(float("nan") if eta is None else eta)

    def out_for_faults(self) -> frozenset[str]:
        """Nodes a fault may take the budget of (the engine's guards do not count them)."""
        return store.out_for_maintenance(self.journal, yieldable_only=True)


def _with(run: Run, n: NodeRun) -> Run:
    return replace(run, nodes=tuple(n if x.node == n.node else x for x in run.nodes))


def _undo(run: Run, e: Effect, why: str, now: float) -> Run:
    """An effect that raised: what the node's state must say so that the next tick retries
    it (checkpoint, requeue, release: observation-driven) or so that it fails closed."""
    n = run.node(e.node)
    if n is None:
        return run
    if e.kind == "checkpoint":
        return _with(run, replace(n, signalled=tuple(j for j in n.signalled if j != e.job)))
    if e.kind == "requeue":
        return _with(run, replace(n, requeued=tuple(j for j in n.requeued if j != e.job)))
    if e.kind == "drain" and n.state != PENDING and "someone else" in why:
        return _with(run, n.to(SKIPPED, now, why, finished=now))
    if e.kind in ("operate", "validate"):
        return _with(run, n.to(FAILED, now, why, finished=now))
    return run


def store_spec(raw: Any, nodes: tuple[str, ...], suites: frozenset[str]) -> Spec:
    from remediation.maintenance.model import spec

    return spec(raw, nodes, suites)
