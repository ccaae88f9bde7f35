"""Validation before release: the suite a quarantined node must pass before it goes back.

Sits between the engine's probation/release path and the validation runners (Slurm job in a
gpuwarden reservation, Kubernetes Job pinned to the node). The engine asks :meth:`Validator.gate`
before an automatic release (and the API before a manual one, when the policy says so): with a
suite for the node's fault class, the run is started and the node goes to ``validating`` (held,
counted against the budgets as before). Nothing waits in a thread: each run is a row of the
``validations`` table with a persisted deadline, and every tick (:meth:`Validator.tick`) polls
the running ones:

- passed: the node is released through the normal release path (ownership, epoch, journal);
- failed, timed out, not startable, runner error, unreadable output: failed (fail closed), the
  evidence (the parsed suite results) journaled with a ``validate`` decision, and the node
  escalates one rung up its fault class's ladder (the engine's own decision path: guards,
  incidents, ladder), then starts probation again; the ``max_attempts``-th failure since the
  last release sends it to inspection (a human);
- on demand (``gpuwarden quarantine validate NODE``): the verdict is journaled and the node's
  state left as it was.

A new alert for the node, or a release by hand, while the suite runs cancels the run.

Every conclusion (pass, fail, timeout, runner error, a lost handle, a cancel) first moves
the run to ``stopping``: the suite stopped and the node out of service by gpuwarden again,
retried each tick until the scheduler confirms (a scheduler that does not answer is never a
run that ended); only then is the verdict acted on (release, escalation). A run that cannot
be stopped after ``PAGE_AFTER`` tries pages (``GpuwardenRemediationActionFailed`` reads
the node's action-failed gauge) and keeps being retried, journaled once, never in a loop.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import threading
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from remediation.backends.base import BackendError, Unavailable
from remediation.journal import HELD_STATES
from remediation.model import Alert, NodeView, Verdict, deny
from remediation.validation import slurm as vslurm
from remediation.validation.slurm import SchedulerUnknown, SuiteCancelled
from remediation.validation.suite import StepRun, StepVerdict, Suite, SuiteVerdict, judge_suite

if TYPE_CHECKING:
    from remediation.engine import Engine

SCHEMA = """
CREATE TABLE IF NOT EXISTS validations(id INTEGER PRIMARY KEY AUTOINCREMENT, node TEXT,
  suite TEXT, fault_class TEXT, trigger TEXT, who TEXT, state TEXT, prev_state TEXT,
  epoch INTEGER, started_at REAL, deadline REAL, finished_at REAL, handle TEXT, reason TEXT,
  evidence TEXT);
CREATE INDEX IF NOT EXISTS validations_node ON validations(node, id);
CREATE INDEX IF NOT EXISTS validations_state ON validations(state);
"""
# Added since the first schema: the verdict waiting for its stop, and the stop's retries.
COLUMNS = ("final TEXT", "stop_as TEXT", "stop_tries INTEGER DEFAULT 0", "stop_error TEXT",
           "parked INTEGER DEFAULT 0")  # fmt: skip
TRIGGERS = ("probation", "manual", "on_demand")
log = logging.getLogger("gpuwarden.remediation")
LIVE = ("running", "stopping")  # a run that still holds the node
PAGE_AFTER = 5  # failed tries to stop a concluded run before it pages a human


class ValidationError(Exception):
    """A validation cannot be started (unknown node, not ours, no suite, one running)."""


class SchedulerSilent(ValidationError):
    """The scheduler did not answer: nothing started, nothing failed; asked again later."""


class SuiteRunner(Protocol):
    """Runs a suite on one node without blocking; the handle is JSON-able (persisted)."""

    def start(self, node: str, suite: Suite, run_id: str, view: NodeView) -> dict[str, Any]: ...

    def poll(self, handle: dict[str, Any]) -> list[StepRun] | None:
        """None while it runs; then one StepRun per step (exit code None: no result)."""
        ...

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        """Cancel it if running and clean up; ``verdict`` None: the node was released, so it
        is not taken out again. Raises until the scheduler confirmed it (retried)."""
        ...

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        """A run whose handle was never saved (a crash while starting): stop what it may
        have left, found by name, and take the node out again."""
        ...


class SlurmSuiteRunner:
    def __init__(self, v: vslurm.SlurmValidation) -> None:
        self.v = v

    def start(self, node: str, suite: Suite, run_id: str, view: NodeView) -> dict[str, Any]:
        return asdict(self.v.start(node, suite, run_id, view.reason))

    def poll(self, handle: dict[str, Any]) -> list[StepRun] | None:
        return self.v.poll(vslurm.ValidationRun(**handle), gone_is_cancel=True)

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        self.v.finish(vslurm.ValidationRun(**handle), verdict)

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        self.v.finish_lost(node, verdict)


class KubernetesSuiteRunner:
    def __init__(self, v: Any) -> None:  # remediation.validation.kubernetes.KubernetesValidation
        self.v = v

    def start(self, node: str, suite: Suite, run_id: str, view: NodeView) -> dict[str, Any]:
        if not view.ours:
            raise BackendError(f"node {node} is not cordoned by gpuwarden ({view.reason!r})")
        return asdict(self.v.start(node, suite, run_id))

    def poll(self, handle: dict[str, Any]) -> list[StepRun] | None:
        from remediation.validation.kubernetes import KubeValidationRun

        return self.v.poll(KubeValidationRun(**handle))  # type: ignore[no-any-return]

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        from remediation.validation.kubernetes import KubeValidationRun

        self.v.finish(KubeValidationRun(**handle), verdict)  # confirmed, or raises

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        from remediation.validation.kubernetes import KubeValidationRun

        name = f"gpuwarden-validate-{run_id}"[:63].rstrip("-")
        self.v.finish(KubeValidationRun(node, self.v.namespace, name, 0), verdict)


class LocalSuiteRunner:
    """Runs the suite on this host, in the background (a single-node lab, and the tests):
    the Slurm batch script, then a ``done`` marker; no node is pinned."""

    def __init__(self, out_dir: str) -> None:
        self.out_dir = Path(out_dir)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self, node: str, suite: Suite, run_id: str, view: NodeView) -> dict[str, Any]:
        out = self.out_dir / run_id
        out.mkdir(parents=True, exist_ok=True)
        script = out / "suite.sh"
        done = str(out / "done")
        script.write_text(vslurm.batch_script(suite, out) + f"touch '{done}'\n")
        p = subprocess.Popen(
            ["/bin/sh", str(script)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.procs[p.pid] = p
        return {"out_dir": str(out), "pid": p.pid, "steps": len(suite.steps)}

    def poll(self, handle: dict[str, Any]) -> list[StepRun] | None:
        out = Path(handle["out_dir"])
        p = self.procs.get(int(handle["pid"]))
        if not (out / "done").exists() and p is not None and p.poll() is None:
            return None
        if p is not None:
            p.wait(5)
            self.procs.pop(p.pid, None)
        runs = []
        for i in range(int(handle["steps"])):
            try:
                rc = int((out / f"{i}.rc").read_text().strip())
                text = (out / f"{i}.out").read_text(errors="replace")
            except (OSError, ValueError):
                runs.append(StepRun.no_result())
                continue
            runs.append(StepRun.exited(rc, text))
        return runs

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        p = self.procs.pop(int(handle["pid"]), None)
        if p is not None and p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(5)

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        return None  # nothing of a run on this host outlives the process that started it


def run_id(vid: int, node: str) -> str:
    """A name Slurm and Kubernetes both accept (DNS label characters)."""
    return f"v{vid}-" + re.sub(r"[^a-z0-9-]", "-", node.lower())


def _failed(suite: str, reason: str) -> SuiteVerdict:
    return SuiteVerdict(suite, (StepVerdict("runner", False, (reason,)),))


def summary(verdict: SuiteVerdict) -> str:
    if verdict.passed:
        return f"suite {verdict.suite} passed ({len(verdict.steps)} steps)"
    why = [f"{s.step}: {'; '.join(s.reasons)}" for s in verdict.steps if not s.passed]
    return f"suite {verdict.suite} failed: " + " | ".join(why)


class Validator:
    def __init__(self, engine: Engine, runner: SuiteRunner | None) -> None:
        self.engine, self.runner = engine, runner
        self.lock = threading.RLock()
        with engine.journal.tx() as db:
            for stmt in SCHEMA.strip().split(";"):
                if stmt.strip():
                    db.execute(stmt)
            have = {r[1] for r in db.execute("PRAGMA table_info(validations)")}
            for col in COLUMNS:
                if col.split()[0] not in have:
                    db.execute(f"ALTER TABLE validations ADD COLUMN {col}")

    @property
    def vp(self) -> Any:
        return self.engine.policy.validation

    # ------------------------------------------------------------------ reading
    def get(self, vid: int) -> dict[str, Any] | None:
        rows = self.engine.journal.read("SELECT * FROM validations WHERE id=?", (vid,))
        return _public(rows[0]) if rows else None

    def list(self, node: str | None, limit: int) -> list[dict[str, Any]]:
        if node:
            rows = self.engine.journal.read(
                "SELECT * FROM validations WHERE node=? ORDER BY id DESC LIMIT ?", (node, limit)
            )
        else:
            rows = self.engine.journal.read(
                "SELECT * FROM validations ORDER BY id DESC LIMIT ?", (limit,)
            )
        return [_public(r) for r in rows]

    def latest(self) -> dict[str, dict[str, Any]]:
        """Each node's last validation (for /api/v1/nodes and ``quarantine list``)."""
        rows = self.engine.journal.read(
            "SELECT * FROM validations WHERE id IN (SELECT MAX(id) FROM validations GROUP BY node)"
        )
        return {r["node"]: _public(r) for r in rows}

    # ------------------------------------------------------------------ starting
    def gate(self, rec: dict[str, Any], trigger: str, who: str) -> bool:
        """Called before a release of ``rec`` (a nodes row). False: no validation is required
        (release now). True: a validation was started or runs (the release waits for it)."""
        suite = self.vp.suite_for(rec.get("fault_class"))
        if suite is None:
            return False
        with self.lock:
            if self._running(rec["node"]) or self.engine.paused:
                return True  # (paused: nothing starts; the release waits for resume)
            e = self.engine
            try:
                gpus = self.gpus_only(rec["node"])
            except Exception as ex:  # the DRA rules unreadable: held, asked again next tick
                log.warning("validation of %s waits: DRA device taints unreadable: %s",
                            rec["node"], ex)  # fmt: skip
                return True
            if gpus:  # one GPU out, the node in service: never cordoned to run the suite
                why = (f"suite {suite.name} not run: only GPU(s) {', '.join(gpus)} of "
                       f"{rec['node']} out (DRA device taints) and the suite needs the whole "
                       "node, which stays in service; released after probation")  # fmt: skip
                e._record(None, rec["node"], rec.get("fault_class") or "", "validate",
                          Verdict(True, "validation", why), {"gpus": list(gpus)})  # fmt: skip
                return False
            if self.runner is None and (e.policy.dry_run or e.backend.name == "dry-run"):
                v = Verdict(
                    True, "dry_run", f"dry-run: suite {suite.name} would run first; not run"
                )
                e._record(None, rec["node"], rec.get("fault_class") or "", "validate", v, {})
                return False
            try:
                self.start(rec["node"], trigger, who, suite.name)
            except SchedulerSilent as ex:  # held, asked again next tick
                log.warning("validation of %s waits: %s", rec["node"], ex)
        return True

    def start(
        self, node: str, trigger: str, who: str, suite_name: str | None = None
    ) -> dict[str, Any]:
        """Start a run (ValidationError when it cannot be); a runner failure to start is a
        failed validation, recorded and acted on like any other (fail closed)."""
        e, now = self.engine, self.engine.clock.now()
        rec = e.journal.node(node)
        with self.lock:
            if rec is None or rec["state"] not in HELD_STATES:
                state = f" (state {rec['state']})" if rec else ""
                raise ValidationError(f"node {node} is not held by gpuwarden{state}")
            if self._running(node):
                raise ValidationError(f"a validation of {node} is already running")
            if e.paused:  # a run lifts the drain into our reservation: a change of service
                raise ValidationError("remediation is paused: no validation starts until resume")
            try:
                gpus = self.gpus_only(node)
            except Exception as ex:  # fail closed: nothing starts on what cannot be read
                raise ValidationError(f"DRA device taints of {node} unreadable: {ex}") from ex
            if gpus:
                raise ValidationError(
                    f"only GPU(s) {', '.join(gpus)} of {node} are out (DRA device taints): "
                    "a validation suite needs the whole node, which stays in service"
                )
            name = suite_name or (s.name if (s := self.vp.suite_for(rec["fault_class"])) else None)
            if name is None and len(self.vp.suites) == 1:
                name = next(iter(self.vp.suites))
            if name is None or name not in self.vp.suites:
                raise ValidationError(
                    f"no validation suite {name or ''} in the policy"
                    + (f" (suites: {', '.join(sorted(self.vp.suites))})" if self.vp.suites else "")
                )
            suite = self.vp.suites[name]
            try:  # before anything is recorded: no answer is no verdict (an answer we
                view = e.backend.node(node)  # cannot use still fails closed, below)
            except Unavailable as ex:
                raise SchedulerSilent(f"the scheduler did not answer about {node}: {ex}") from ex
            except Exception:
                view = None
            deadline = now + self.vp.deadline_s(suite)
            with e.journal.tx() as db:
                vid = int(
                    db.execute(
                        "INSERT INTO validations(node,suite,fault_class,trigger,who,state,"
                        "prev_state,epoch,started_at,deadline) VALUES(?,?,?,?,?,?,?,?,?,?)",
                        (
                            node,
                            name,
                            rec["fault_class"],
                            trigger,
                            who,
                            "running",
                            rec["state"],
                            rec.get("epoch") or 0,
                            now,
                            deadline,
                        ),
                    ).lastrowid
                    or 0
                )
                if trigger != "on_demand":
                    e.journal.set_node(db, node, state="validating")
            v = Verdict(True, "validation", f"suite {name} started on {node} ({trigger} by {who})")
            e._record(None, node, rec["fault_class"] or "", "validate", v, {"validation": vid})
            try:
                if self.runner is None:
                    raise BackendError(f"no validation runner for backend {e.backend.name}")
                view = view or e.backend.node(node)
                if view is None:
                    raise BackendError(f"node {node} unknown to the scheduler")
                handle = self.runner.start(node, suite, run_id(vid, node), view)
            except Exception as ex:  # fail closed: a suite that cannot start is a failure
                kind = "" if isinstance(ex, BackendError) else f"{type(ex).__name__}: "
                self._conclude(vid, _failed(name, f"could not start: {kind}{ex}"), None)
            else:
                with e.journal.tx() as db:
                    db.execute(
                        "UPDATE validations SET handle=? WHERE id=?", (json.dumps(handle), vid)
                    )
            got = self.get(vid)
            assert got is not None
            return got

    def gpus_only(self, node: str) -> tuple[str, ...]:
        """The GPUs gpuwarden holds out of ``node`` through DRA device taints when that is
        all it holds (the node itself not cordoned by gpuwarden); () otherwise. A suite
        needs the whole node: running one there would cordon it for a one-GPU fault."""
        b = self.engine.backend
        dra = getattr(b, "dra", None)
        if dra is None or not hasattr(dra, "listing"):  # (read whatever the policy says now,
            return ()  # as the release does: rules made before dra_isolation was turned off)
        live = ("NoSchedule", "NoExecute")  # a dry-run's preview (None) holds nothing
        rows = [r for r in dra.listing() if (r.get("evidence") or {}).get("effect") in live]
        gpus = tuple(sorted({str(r["gpu"]) for r in rows if r.get("node") == node}))
        if not gpus:
            return ()
        view = b.node(node)
        return () if view is None or view.ours else gpus

    def _running(self, node: str) -> bool:
        return self.running(node) is not None

    def running(self, node: str, gating: bool = False) -> int | None:
        """The id of the node's running validation (``gating``: one a release waits for)."""
        extra = " AND trigger!='on_demand'" if gating else ""
        got = self.engine.journal.scalar(
            f"SELECT id FROM validations WHERE node=? AND state IN ('running','stopping'){extra}",
            (node,),
        )
        return None if got is None else int(got)

    # ------------------------------------------------------------------ the tick
    def tick(self) -> None:
        """Poll every running validation; conclude the finished and the overdue ones; retry
        the stop of every concluded one the scheduler has not confirmed yet."""
        e = self.engine
        for row in e.journal.rows(
            "SELECT id FROM validations WHERE state IN ('running','stopping')"
        ):
            vid = int(row["id"])
            with self.lock:  # read inside the lock: a start may have just saved its handle
                rows = e.journal.rows("SELECT * FROM validations WHERE id=?", (vid,))
                if not rows or rows[0]["state"] not in LIVE:
                    continue
                if rows[0]["state"] == "stopping":
                    self._settle(vid)
                    continue
                try:
                    self._poll(rows[0])
                except Unavailable as ex:  # no answer is no verdict: polled again next tick
                    log.warning("validation %s of %s waits: %s", vid, rows[0]["node"], ex)
                except Exception as ex:  # a bug or runner error: fail closed, never stuck
                    reason = f"runner error: {type(ex).__name__}: {ex}"
                    self._conclude(vid, _failed(rows[0]["suite"], reason), rows[0])
        if not e.paused:  # consequences parked by a pause or a silent scheduler: again now
            for r in e.journal.rows("SELECT * FROM validations WHERE parked=1 ORDER BY id"):
                with self.lock:
                    with e.journal.tx() as db:
                        db.execute("UPDATE validations SET parked=0 WHERE id=?", (r["id"],))
                    self._consequences(r, str(r["state"]))
        with self.lock:  # a crash between a verdict and its consequence: validate again
            for r in e.journal.rows(
                "SELECT node FROM nodes WHERE state='validating' AND node NOT IN "
                "(SELECT node FROM validations WHERE state IN ('running','stopping') OR parked=1)"
            ):
                with e.journal.tx() as db:
                    db.execute("UPDATE nodes SET state='probation' WHERE node=?", (r["node"],))

    def _poll(self, r: dict[str, Any]) -> None:
        e, vid, now = self.engine, int(r["id"]), self.engine.clock.now()
        rec = e.journal.node(r["node"]) or {}
        handle = json.loads(r["handle"]) if r["handle"] else None
        released = (rec.get("epoch") or 0) != (r["epoch"] or 0) or rec.get("state") == "released"
        firing = bool(e.journal.holding_fingerprints(r["node"]))
        moved_on = r["trigger"] != "on_demand" and (rec.get("state") != "validating" or firing)
        if released or moved_on:
            why = "node released" if released else "a new alert fires for the node"
            with e.journal.tx() as db:  # out again; the alert's resolve starts probation
                db.execute(
                    "UPDATE nodes SET state='quarantined', resolved_at=NULL WHERE node=? AND "
                    "state='validating'",
                    (r["node"],),
                )
            e._record(None, r["node"], r["fault_class"] or "", "validate",
                      Verdict(True, "validation", f"validation {vid} cancelled: {why}"),
                      {"validation": vid})  # fmt: skip
            e.metrics.actions.labels(e.backend.name, "validate", "cancelled").inc()
            self._stopping(vid, "cancelled", None if released else "cancelled",
                           f"cancelled: {why}", None)  # fmt: skip
            self._settle(vid)
            return
        if handle is None:  # started by a process that died before saving the handle
            self._conclude(vid, _failed(r["suite"], "run lost (no handle recorded)"), r)
            return
        suite = self.vp.suites.get(r["suite"])
        if self.runner is None or suite is None:
            why = "no validation runner now" if suite else "suite no longer in the policy"
            self._conclude(vid, _failed(r["suite"], why), r)
            return
        try:
            runs = self.runner.poll(handle)
        except SchedulerUnknown as ex:  # never "ended": wait for an answer, up to the deadline
            if now < float(r["deadline"]):
                return
            limit = float(r["deadline"]) - float(r["started_at"])
            why = f"timed out after {limit:g} s (the scheduler does not answer: {ex})"
            self._conclude(vid, _failed(suite.name, why), r)
            return
        except SuiteCancelled as ex:
            self._conclude(vid, _failed(suite.name, f"cancelled: {ex}"), r, final="cancelled")
            return
        if runs is None:
            if now < float(r["deadline"]):
                return
            limit = float(r["deadline"]) - float(r["started_at"])
            self._conclude(vid, _failed(suite.name, f"timed out after {limit:g} s"), r)
            return
        view = e.backend.node(r["node"])
        gpu_model = view.domains.get("gpu_model") if view is not None else None
        self._conclude(vid, judge_suite(suite, runs, gpu_model), r)

    # ------------------------------------------------------------------ concluding
    def _finish(self, vid: int, state: str, reason: str, evidence: dict[str, Any] | None) -> None:
        with self.engine.journal.tx() as db:
            db.execute(
                "UPDATE validations SET state=?, reason=?, evidence=?, finished_at=? WHERE id=?",
                (state, reason, json.dumps(evidence) if evidence else None,
                 self.engine.clock.now(), vid),
            )  # fmt: skip

    def _stopping(
        self, vid: int, final: str, stop_as: str | None, reason: str, ev: dict[str, Any] | None
    ) -> None:
        """The verdict is in; the run waits for its stop to be confirmed before it counts."""
        with self.engine.journal.tx() as db:
            db.execute(
                "UPDATE validations SET state='stopping', final=?, stop_as=?, reason=?, "
                "evidence=?, stop_tries=0 WHERE id=?",
                (final, stop_as, reason, json.dumps(ev) if ev else None, vid),
            )

    def _conclude(
        self, vid: int, verdict: SuiteVerdict, r: dict[str, Any] | None, final: str = ""
    ) -> None:
        """Journal and count the verdict (once), then stop the run (see :meth:`_settle`)."""
        e = self.engine
        if r is None:
            r = e.journal.rows("SELECT * FROM validations WHERE id=?", (vid,))[0]
        node, fc, trigger = str(r["node"]), str(r["fault_class"] or ""), str(r["trigger"])
        why = summary(verdict)
        evidence = {**verdict.evidence(), "validation": vid, "trigger": trigger}
        final = final or ("passed" if verdict.passed else "failed")
        v = Verdict(True, "validation", why) if verdict.passed else deny("validation", why)
        e._record(None, node, fc, "validate", v, evidence)
        outcome = {"passed": "done"}.get(final, final)
        e.metrics.actions.labels(e.backend.name, "validate", outcome).inc()
        self._stopping(vid, final, "passed" if verdict.passed else final, why, evidence)
        self._settle(vid)

    def _settle(self, vid: int) -> None:
        """Stop a concluded run; once the scheduler confirmed it, act on the verdict."""
        e = self.engine
        r = e.journal.rows("SELECT * FROM validations WHERE id=?", (vid,))[0]
        handle = json.loads(r["handle"]) if r["handle"] else None
        stop_as = r["stop_as"]
        try:
            if self.runner is None:
                pass  # nothing was started through a runner
            elif handle is not None:
                self.runner.stop(handle, stop_as)
            elif stop_as is not None:
                self.runner.stop_lost(str(r["node"]), run_id(vid, str(r["node"])), stop_as)
        except Exception as ex:  # the scheduler has not confirmed: again next tick
            self._stop_failed(r, f"{type(ex).__name__}: {ex}")
            return
        final = str(r["final"] or "failed")
        evidence = json.loads(r["evidence"]) if r["evidence"] else None
        self._finish(vid, final, str(r["reason"] or ""), evidence)
        if e.paused and r["trigger"] != "on_demand" and (final != "cancelled" or r["stop_as"]):
            with e.journal.tx() as db:  # the node is out again; what follows waits for resume
                db.execute("UPDATE validations SET parked=1 WHERE id=?", (vid,))
            return
        if int(r["stop_tries"] or 0) >= PAGE_AFTER:
            why = f"validation {vid} of {r['node']} stopped after {r['stop_tries']} tries"
            e._record(None, str(r["node"]), str(r["fault_class"] or ""), "validate",
                      Verdict(True, "validation", why), {"validation": vid})  # fmt: skip
        self._consequences(r, final)

    def _stop_failed(self, r: dict[str, Any], err: str) -> None:
        vid, tries = int(r["id"]), int(r["stop_tries"] or 0) + 1
        with self.engine.journal.tx() as db:
            db.execute(
                "UPDATE validations SET stop_tries=?, stop_error=? WHERE id=?",
                (tries, err[:500], vid),
            )
        if tries == PAGE_AFTER:  # once: a human must look; the retries go on
            e, node = self.engine, str(r["node"])
            why = (
                f"validation {vid} of {node} could not be stopped after {tries} tries (the "
                f"node may be in service with a fault): {err}"
            )
            e._record(None, node, str(r["fault_class"] or ""), "validate",
                      deny("validation", why), {"validation": vid, "stop_error": err})  # fmt: skip
            e.metrics.actions.labels(e.backend.name, "validate_stop", "failed").inc()
            log.error("%s", why)  # the node's action-failed gauge pages (see module doc)

    def parked(self, node: str) -> str | None:
        """What a pause holds back for this node (None: nothing), for the API."""
        if not self.engine.paused:
            return None
        rec = self.engine.journal.node(node) or {}
        last = self.latest().get(node)
        if last and last.get("parked"):
            what = "release" if last["state"] == "passed" else "escalation"
            return f"validation {last['id']} {last['state']}; its {what} waits for resume (paused)"
        if last and last["state"] in LIVE:
            return (
                f"validation {last['id']} {last['state']}; what follows waits for resume (paused)"
            )
        if rec.get("state") == "probation":
            return "probation: the validation and the release wait for resume (paused)"
        return None

    def stuck(self) -> tuple[str, ...]:
        """Nodes whose concluded validation could not be stopped (they page)."""
        rows = self.engine.journal.read(
            "SELECT DISTINCT node FROM validations WHERE state='stopping' AND stop_tries>=?",
            (PAGE_AFTER,),
        )
        return tuple(str(r["node"]) for r in rows)

    def _consequences(self, r: dict[str, Any], final: str) -> None:
        e, vid = self.engine, int(r["id"])
        node, fc, trigger = str(r["node"]), str(r["fault_class"] or ""), str(r["trigger"])
        if trigger == "on_demand" or (final == "cancelled" and r["stop_as"] != "cancelled"):
            return  # the operator asked for a verdict, not for a change; or a cancel
        if final == "cancelled":
            rec = e.journal.node(node) or {}
            if rec.get("state") == "validating":  # an admin's scancel: out, probation again
                self._again(node, "quarantined")
            return
        if final == "passed":
            if firing := e.journal.holding_fingerprints(node):  # fired since the verdict (a
                # pause parked its release, or it raced the conclusion): out, and the
                # alert's own resolve starts probation again
                with e.journal.tx() as db:
                    db.execute(
                        "UPDATE nodes SET state='quarantined', resolved_at=NULL WHERE node=? "
                        "AND state IN ('validating','probation')",
                        (node,),
                    )
                why = (
                    f"validation {vid} passed, but {len(firing)} alert(s) fire for {node} now: "
                    "not released; their resolve starts probation again"
                )
                e._record(None, node, fc, "validate", deny("validation", why),
                          {"validation": vid, "firing": sorted(firing)})  # fmt: skip
                return
            who = f"validation {vid}" + (f" ({r['who']})" if trigger == "manual" else "")
            if not e.release(node, manual=trigger == "manual", who=who).allow:
                self._again(node, "quarantined")
            return
        self._escalate(node, fc, vid, str(r["reason"] or ""))

    def _again(self, node: str, state: str) -> None:
        """Probation starts over (the node's alerts have resolved): validated again after it."""
        with self.engine.journal.tx() as db:
            db.execute(
                "UPDATE nodes SET resolved_at=?, state=CASE WHEN state IN ('validating',"
                "'probation') THEN ? ELSE state END WHERE node=?",
                (self.engine.clock.now(), state, node),
            )

    def _escalate(self, node: str, fc: str, vid: int, why: str) -> None:
        """One rung up the fault class's ladder, through the engine's own decision path (a
        new incident); inspection once ``max_attempts`` validations failed since the last
        release. The node stays out whatever the guards say."""
        e = self.engine
        rec = e.journal.node(node) or {}
        failures = int(
            e.journal.scalar(
                "SELECT COUNT(*) FROM validations WHERE node=? AND state='failed' AND "
                "trigger!='on_demand' AND started_at>=?",
                (node, rec.get("released_at") or 0.0),
            )
        )
        labels = self._labels(node, fc)
        labels.update({"validation_failed": str(vid)})
        a = Alert(f"validation-{vid}", f"validation-{vid}", "firing", labels, {"summary": why})
        with e.journal.tx() as db:
            e.journal.close_incidents(db, node)  # the failed validation is a new incident
        floor = e.policy.inspect_after if failures >= self.vp.max_attempts else 0
        try:
            e.decide(a, e.clock.now(), min_occurrence=floor)  # the worker runs the action
        except Unavailable as ex:  # parked: the node stays out, decided again next tick
            log.warning("escalation of %s after validation %s waits: %s", node, vid, ex)
            with e.journal.tx() as db:
                db.execute("UPDATE validations SET parked=1 WHERE id=?", (vid,))
            return
        with e.journal.tx() as db:  # only now: "validating" until the action is queued
            db.execute(
                "UPDATE nodes SET state='quarantined' WHERE node=? AND state='validating'", (node,)
            )
        self._again(node, "quarantined")

    def _labels(self, node: str, fc: str) -> dict[str, str]:
        """The labels of the alert that took the node out (its recommended action, severity):
        the escalation climbs the same ladder from the same start."""
        for d in self.engine.journal.rows(
            "SELECT evidence FROM decisions WHERE node=? AND verdict='allow' AND guard IN "
            "('policy','dry_run') AND fault_class=? ORDER BY id DESC LIMIT 20",
            (node, fc),
        ):
            labels = json.loads(d["evidence"] or "{}").get("labels")
            if isinstance(labels, dict) and labels.get("action"):
                return {str(k): str(v) for k, v in labels.items()}
        rec = self.engine.journal.node(node) or {}
        return {"node": node, "fault_class": fc, "action": str(rec.get("action") or "drain"),
                "severity": "critical", "alertname": "GpuwardenValidationFailed"}  # fmt: skip


def _public(r: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in r.items() if k not in ("handle", "evidence", "epoch")}
    out["evidence"] = json.loads(r["evidence"]) if r.get("evidence") else None
    return out
