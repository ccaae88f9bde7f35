"""The decision engine: one journaled alert in, one recorded decision (and action intent) out.

Sits between the journal (accepted alerts) and the executor. For a firing alert it picks
the rung of the escalation ladder, gathers a Situation (scheduler view, journal counts,
silences, breaker state, the clock) and runs the guards; the decision, its evidence and the
action's intent commit in one transaction. Resolved alerts start probation; ``tick`` releases
nodes whose probation passed; ``release`` is the manual path. All calls are synchronous
(the worker runs them in a thread).
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from remediation import guards
from remediation.backends.base import Backend, BackendError
from remediation.clock import Clock
from remediation.executor import validate
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import DISRUPTIVE, REASON_PREFIX, Alert, Verdict, deny
from remediation.pager import NoPager, Pager
from remediation.policy import Policy
from remediation.silences import NoSilences, Silences


@dataclass
class Engine:
    journal: Journal
    backend: Backend
    policy: Policy
    clock: Clock
    metrics: Metrics
    silences: Silences = field(default_factory=NoSilences)
    pager: Pager = field(default_factory=NoPager)

    # ------------------------------------------------------------------ pause / breaker
    @property
    def paused(self) -> bool:
        return self.journal.get("paused", "1" if self.policy.paused else "0") == "1"

    def set_paused(self, paused: bool, who: str) -> None:
        self.journal.put("paused", "1" if paused else "0")
        self._record(
            None,
            "",
            "",
            "pause" if paused else "resume",
            Verdict(True, "manual", f"{'paused' if paused else 'resumed'} by {who}"),
            {},
        )
        self.metrics.paused.set(1 if paused else 0)

    def breaker_open(self) -> bool:
        p, now = self.policy, self.clock.now()
        prev = self.journal.get("breaker_opened_at")
        distinct, last = self.journal.flag_summary(now - p.storm_window_s)
        opened = guards.breaker_opened_at(distinct, last, now, p, float(prev) if prev else None)
        if (opened is None) != (prev is None):
            self.journal.put("breaker_opened_at", None if opened is None else repr(opened))
            if opened is not None:
                self.pager.page(
                    f"storm breaker open: {distinct} nodes flagged in {p.storm_window_s:.0f}s "
                    f"(limit {p.storm_max_nodes})",
                    p.storm_quiet_s,
                )
        self.metrics.breaker.set(0 if opened is None else 1)
        return opened is not None

    # ------------------------------------------------------------------ decisions
    def _record(
        self,
        alert: Alert | None,
        node: str,
        fault_class: str,
        action: str,
        v: Verdict,
        evidence: dict[str, Any],
        intent: dict[str, Any] | None = None,
        node_state: dict[str, Any] | None = None,
    ) -> int | None:
        now, aid = self.clock.now(), None
        with self.journal.tx() as db:
            cur = db.execute(
                "INSERT INTO decisions(alert_key,node,fault_class,action,verdict,guard,reason,"
                "evidence,at) VALUES(?,?,?,?,?,?,?,?,?)",
                (
                    alert.key if alert else None,
                    node,
                    fault_class,
                    action,
                    v.verdict,
                    v.guard,
                    v.reason,
                    json.dumps(evidence, sort_keys=True, default=str),
                    now,
                ),
            )
            if intent is not None:
                reason = f"{REASON_PREFIX} {action} {fault_class or 'alert'} d{cur.lastrowid}"
                aid = db.execute(
                    "INSERT INTO actions(decision_id,node,action,backend,state,started_at,"
                    "alert_started,reason,fault_class) VALUES(?,?,?,?,?,?,?,?,?)",
                    (
                        cur.lastrowid,
                        node,
                        action,
                        self.backend.name,
                        "pending",
                        now,
                        intent.get("alert_started"),
                        reason,
                        fault_class,
                    ),
                ).lastrowid
            if node_state is not None:
                self.journal.set_node(db, node, **node_state)
            if alert is not None:
                db.execute("UPDATE alerts SET processed=1 WHERE key=?", (alert.key,))
        self.metrics.decisions.labels(v.guard, v.verdict, action).inc()
        return aid

    def record_error(self, alert: Alert, error: Exception) -> None:
        """A bug while deciding: recorded as a denial, so the alert is still accounted for."""
        v = deny("error", f"internal error: {type(error).__name__}: {error}")
        self._record(alert, alert.node, alert.labels.get("fault_class", ""), "notify", v, {})

    def decide(self, alert: Alert, alert_started: float | None = None) -> int | None:
        """Decide one accepted alert; returns the id of the action to execute, if any."""
        if alert.status == "resolved":
            self._resolved(alert)
            return None
        node, fc = alert.node, alert.labels.get("fault_class", "")
        if not node:
            return self._record(alert, "", fc, "notify", deny("policy", "alert has no node"), {})
        p, now = self.policy, self.clock.now()
        occurrence = self.journal.occurrences(node, fc, now - p.recurrence_window_s) + 1
        action = guards.choose_action(p, alert, occurrence)
        if action in DISRUPTIVE:
            with self.journal.tx() as db:
                self.journal.add_flag(db, node, now)
        s = self._situation(alert, action, now)
        verdict = guards.decide(s, p)
        rec = self.journal.node(node) or {}
        probation, flapped = guards.probation_for(p, rec.get("released_at"), now)
        evidence = {
            "occurrence": occurrence,
            "labels": dict(alert.labels),
            "flapped": flapped,
            "node": s.node.__dict__ if s.node else None,
            "held": len(s.held),
            "fleet": len(s.fleet),
            "breaker_open": s.breaker_open,
            "silenced": s.silenced,
            "jobs": [j.job_id for j in s.jobs],
            "recent_actions": s.recent_actions,
        }
        if not verdict.allow or action not in DISRUPTIVE:
            return self._record(alert, node, fc, action, verdict, evidence)
        state = {
            "state": "inspection" if action == "inspect" else "quarantined",
            "fault_class": fc,
            "action": action,
            "since": now,
            "resolved_at": None,
            "probation_s": probation,
            "flapped": int(flapped),
            "reason": verdict.reason,
        }
        return self._record(
            alert, node, fc, action, verdict, evidence, {"alert_started": alert_started}, state
        )

    def _situation(self, alert: Alert, action: str, now: float) -> guards.Situation:
        p, disruptive = self.policy, action in DISRUPTIVE
        error = ""
        try:
            fleet = self.backend.fleet() if disruptive else ()
            jobs = self.backend.jobs_on(alert.node) if disruptive else ()
        except BackendError as e:
            fleet, jobs, error = (), (), str(e)  # the scheduler guard denies (fail closed)
        node = next((n for n in fleet if n.name == alert.node), None)
        return guards.Situation(
            alert=alert,
            action=action,
            now=now,
            paused=self.paused,
            silenced=self.silences.silenced(alert.labels) if disruptive else False,
            node=node,
            fleet=fleet,
            held=self.journal.held_nodes(),
            jobs=jobs,
            breaker_open=self.breaker_open() if disruptive else False,
            recent_actions=self.journal.actions_since(now - p.rate_window_s),
            scheduler_error=error,
        )

    def _resolved(self, alert: Alert) -> None:
        node, rec = alert.node, self.journal.node(alert.node) if alert.node else None
        still = self.journal.firing_fingerprints(node) - {alert.fingerprint} if node else set()
        if rec and rec["state"] == "quarantined" and not still:
            v = Verdict(True, "resolve", "alert resolved; probation starts")
            self._record(
                alert,
                node,
                rec["fault_class"] or "",
                "probation",
                v,
                {},
                node_state={"state": "probation", "resolved_at": self.clock.now()},
            )
            with contextlib.suppress(BackendError):  # the label is informative only
                self.backend.mark(node, "probation")
        else:
            v = Verdict(
                True,
                "resolve",
                f"resolved; node state {rec and rec['state']}, {len(still)} other alerts firing",
            )
            self._record(alert, node, alert.labels.get("fault_class", ""), "notify", v, {})
        return None

    # ------------------------------------------------------------------ release
    def release(self, node: str, manual: bool, who: str = "api") -> Verdict:
        try:
            view = self.backend.node(node)
        except BackendError as e:
            view, err = None, str(e)
        else:
            err = ""
        v = guards.release_verdict(view, manual)
        if v.allow:
            try:
                outcome = self.backend.release(node)
            except BackendError as e:
                v = deny("ownership" if "not ours" in str(e) else "backend", str(e))
            else:
                v = Verdict(True, v.guard, f"released by {who}: {outcome}")
        elif err:
            v = deny(v.guard, f"{v.reason} ({err})")
        state = {"state": "released", "released_at": self.clock.now()} if v.allow else None
        if state and self.journal.node(node) is None:
            state = None
        self._record(None, node, "", "release", v, {"manual": manual, "who": who}, node_state=state)
        self.metrics.actions.labels(
            self.backend.name, "release", "done" if v.allow else "denied"
        ).inc()
        return v

    def tick(self) -> list[str]:
        """Release nodes whose probation passed (if the policy allows); returns them."""
        p, now, released = self.policy, self.clock.now(), []
        self.journal.prune_flags(now - 2 * max(p.storm_window_s, p.storm_quiet_s))
        if not p.auto_release:
            return []
        for r in self.journal.rows("SELECT * FROM nodes WHERE state='probation'"):
            if now - (r["resolved_at"] or now) < (r["probation_s"] or 0):
                continue
            if self.journal.firing_fingerprints(r["node"]):
                continue
            ok, why = validate(self.policy.validate_command, r["node"])
            if not ok:
                self._record(None, r["node"], "", "release", deny("validation", why), {})
                continue
            if self.release(r["node"], manual=False, who="probation").allow:
                released.append(r["node"])
        return released
