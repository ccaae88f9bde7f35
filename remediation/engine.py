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
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from remediation import guards, nvlink, ordering
from remediation import storage as storage_mod
from remediation.backends.base import Backend, BackendError, Unavailable
from remediation.clock import Clock
from remediation.executor import OPEN_SAGA, validate
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import DISRUPTIVE, REASON_PREFIX, Alert, NodeView, Verdict, deny
from remediation.pager import NoPager, Pager
from remediation.placement.manager import Event, Placement
from remediation.policy import Policy
from remediation.silences import NoSilences, Silences

# Node states a re-fired alert holds again (action_failed: its repeat drives the action)
REFIRE_HOLDS = ("quarantined", "probation", "validating", "inspection")


@dataclass
class Engine:
    journal: Journal
    backend: Backend
    policy: Policy
    clock: Clock
    metrics: Metrics
    silences: Silences = field(default_factory=NoSilences)
    pager: Pager = field(default_factory=NoPager)
    validator: Any = None  # remediation.validation.release.Validator: suites before release
    # nodes out for maintenance that a fault may take the budget of (remediation/maintenance)
    yielding: Callable[[], frozenset[str]] = frozenset
    placement: Placement | None = None  # soft tiers (avoid); None: avoid is recorded, denied
    # why a node may not go back into service now (a GPU reset job still runs on it:
    # remediation.gpureset.release.blocked); None: nothing blocks. Wired by the service.
    release_blocked: Callable[[str], str | None] | None = None
    # the last fleet read and its nodes by name: a backend that keeps its fleet (the dry run's)
    # hands the same tuple back until it changes, so a decision finds its node without a scan
    _index: tuple[tuple[NodeView, ...], dict[str, NodeView]] = field(
        default_factory=lambda: ((), {}), init=False, repr=False, compare=False
    )

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

    def breaker_open(self, flag: str | None = None) -> bool:
        """Re-evaluate the storm breaker; ``flag``: a validated alert's node, counted *after*
        the close check (so that it cannot make the silence look zero). Runs every tick."""
        p, now = self.policy, self.clock.now()
        prev = self.journal.get("breaker_opened_at")
        reset_at = float(self.journal.get("breaker_reset_at") or 0.0)
        opened = float(prev) if prev else None
        if opened is not None:
            _, last = self.journal.flag_summary(max(now - p.storm_window_s, reset_at))
            if guards.breaker_quiet(max(last or 0.0, opened), now, p):
                self._breaker_closed(f"no valid flag for {p.storm_quiet_s:.0f}s", "quiet")
                opened, reset_at = None, now + 1e-6
        if flag is not None:
            with self.journal.tx() as db:
                self.journal.add_flag(db, flag, now)
        if opened is None:
            distinct, _ = self.journal.flag_summary(max(now - p.storm_window_s, reset_at))
            if guards.breaker_trips(distinct, p):
                opened = now
                self.journal.put("breaker_opened_at", repr(now))
                why = (
                    f"storm breaker open: {distinct} nodes flagged in {p.storm_window_s:.0f}s "
                    f"(limit {p.storm_max_nodes})"
                )
                self._record(None, "", "", "breaker_open", deny("storm_breaker", why), {})
                self.pager.page(why, p.storm_quiet_s)
        self.metrics.breaker.set(0 if opened is None else 1)
        return opened is not None

    def _breaker_closed(self, why: str, cause: str) -> None:
        now = self.clock.now()
        self.journal.put("breaker_opened_at", None)
        # flags up to now no longer count (a flag of the same instant included)
        self.journal.put("breaker_reset_at", repr(now + 1e-6))
        v = Verdict(True, "storm_breaker", f"storm breaker closed: {why}")
        self._record(None, "", "", "breaker_close", v, {"cause": cause})
        self.metrics.breaker.set(0)

    def reset_breaker(self, who: str) -> None:
        """Manual reset: close the breaker now; flags before the reset no longer count."""
        self._breaker_closed(f"reset by {who}", "manual")

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
                epoch = db.execute("SELECT epoch FROM nodes WHERE node=?", (node,)).fetchone()
                aid = db.execute(
                    "INSERT INTO actions(decision_id,node,action,backend,state,started_at,"
                    "alert_started,reason,fault_class,epoch,incident_id) "
                    "VALUES(?,?,?,?,?,?,?,?,?,?,?)",
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
                        epoch[0] if epoch else 0,
                        intent.get("incident_id"),
                    ),
                ).lastrowid
                if intent.get("incident_id") is not None:
                    db.execute(
                        "UPDATE incidents SET acted=? WHERE id=?", (action, intent["incident_id"])
                    )
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

    def decide(
        self, alert: Alert, alert_started: float | None = None, min_occurrence: int = 0
    ) -> int | None:
        """Decide one accepted alert; returns the id of the action to execute, if any.
        ``min_occurrence``: climb at least that far (a node failing validation too often).

        One function per kind of alert, tried in this order: storage, resolved (avoid's
        own), invalid, hold, avoid (a placement tier), then a firing alert (redrive, same
        incident, the ladder's climb)."""
        recommended = alert.labels.get("action", "notify")
        if alert.labels.get("fault_class") == storage_mod.STORAGE_CLASS:
            self._storage_alert(alert)  # shared storage: recorded, never a node action
            return None
        if nvlink.domain_of(alert.labels):
            self._domain_alert(alert)  # a whole NVLink domain: one incident, notify only
            return None
        if alert.status == "resolved" and recommended == "avoid":
            self._avoid_resolved(alert)
            return None
        if alert.status == "resolved":
            self._resolved(alert)
            return None
        bad = guards.invalid_alert(alert, self.policy)
        if bad is not None:
            self._invalid(alert, *bad)
            return None
        if recommended == "hold":
            self._hold(alert)
            return None
        if recommended == "avoid":
            self._avoid(alert)
            return None
        return self._firing(alert, alert_started, min_occurrence)

    # ------------------------------------------------------------------ placement (soft)
    def _avoid(self, alert: Alert) -> None:
        """De-prefer the node (a placement tier): its own budget; never the drain budgets,
        the rate limit or the storm breaker; nothing taken out of service."""
        node, fc = alert.node, alert.labels.get("fault_class", "")
        rule = self.policy.rule_for(alert.labels)
        events: list[Event] = []
        ev: dict[str, Any] = {}
        if self.placement is None:
            v = deny("placement", "placement tiers are not configured")
        elif self.paused:
            v = deny("paused", "remediation is paused")
        elif rule is None or "avoid" not in rule.allow:
            v = deny("policy", "no policy rule allows avoid for these labels")
        else:
            v, ev, events = self.placement.avoid(alert)
        self._record(alert, node, fc, "avoid", v, ev)
        self._record_events(events)

    def _avoid_resolved(self, alert: Alert) -> None:
        v = self.placement.resolved(alert) if self.placement is not None else None
        v = v or Verdict(True, "resolve", "avoid resolved; no placement tier of this alert")
        self._record(alert, alert.node, alert.labels.get("fault_class", ""), "avoid", v, {})

    def _record_events(self, events: list[Event]) -> None:
        for e in events:
            self._record(None, e.node, "", e.action, e.verdict, dict(e.evidence))

    def _firing(self, alert: Alert, alert_started: float | None, min_occurrence: int) -> int | None:
        """A valid firing alert: redrive a failed action, fold into an acted incident, or
        climb the ladder."""
        node, fc, now = alert.node, alert.labels.get("fault_class", ""), self.clock.now()
        rec = self.journal.node(node) or {}
        if alert.labels.get("action", "notify") == "notify":
            return self._climb(alert, rec, now, None, alert_started, min_occurrence)
        if rec.get("state") in REFIRE_HOLDS and self.journal.refired(alert):
            self._held_again(alert, rec)
            return None
        if rec.get("state") == "action_failed":
            redriven = self._redrive(alert, node, fc, rec)
            if redriven is not None:
                return redriven
        incident = self.journal.incident(node, fc, now, self.policy.incident_window_s)
        if incident["acted"]:
            return self._same_incident(alert, incident)
        try:
            return self._climb(alert, rec, now, incident, alert_started, min_occurrence)
        except Unavailable:  # no answer, nothing decided: the incident it opened goes too
            if incident["created"]:
                self.journal.forget_incident(incident["id"])
            raise

    def _held_again(self, alert: Alert, rec: dict[str, Any]) -> None:
        """The alert instance fired again after its resolve (``ordering.refired``): the fault
        it was, not a new one (no incident, no action, no climb); the node it holds is held
        again, and the instance's next resolve starts probation again."""
        state = str(rec["state"])
        back: dict[str, Any] = {"resolved_at": None}
        if state in ("probation", "validating"):
            back["state"] = "quarantined"
        why = (
            f"the same alert (startsAt {alert.starts_at[:40]}) fires again after its resolve "
            "(Alertmanager resolved it while its source still fired): the fault it was, not "
            f"a new one; node {state} -> {back.get('state', state)}, held until it resolves"
        )
        fc = alert.labels.get("fault_class", "")
        self._record(alert, alert.node, fc, "notify", Verdict(True, "refire", why), {},
                     node_state=back)  # fmt: skip

    def _same_incident(self, alert: Alert, incident: dict[str, Any]) -> int | None:
        """A second alert of an incident that already got an action: notify only."""
        v = Verdict(
            True,
            "incident",
            f"same incident #{incident['id']} as an earlier alert, which got "
            f"{incident['acted']}; the ladder climbs once per incident",
        )
        fc = alert.labels.get("fault_class", "")
        return self._record(alert, alert.node, fc, "notify", v, {"incident": incident["id"]})

    def _climb(
        self,
        alert: Alert,
        rec: dict[str, Any],
        now: float,
        incident: dict[str, Any] | None,
        alert_started: float | None,
        min_occurrence: int,
    ) -> int | None:
        """Pick the ladder's rung, run the guards, record the decision (and its intent)."""
        p = self.policy
        node, fc = alert.node, alert.labels.get("fault_class", "")
        occurrence = self.journal.occurrences(node, fc, now - p.recurrence_window_s) + 1
        occurrence = max(occurrence, min_occurrence)
        action = self._reset_rung(alert, guards.choose_action(p, alert, occurrence), now)
        s = self._situation(alert, action, now)
        dom = self._node_domain(alert, s.node.domains if s.node is not None else {})
        if action in DISRUPTIVE and s.node is not None and self._node_held(alert, action, dom, now):
            return None
        held_back = self._checkpoint_held_back(s) if action == "checkpoint_restart" else None
        if held_back is not None and p.checkpoint.on_storage_unhealthy == "hold":
            return self._storage_hold(alert, action, held_back)
        if held_back is not None:
            action = p.checkpoint.on_storage_unhealthy
            s = dataclasses.replace(s, action=action)
        if action in DISRUPTIVE and not s.scheduler_error and s.node is None:
            self._invalid(alert, "unknown_node", f"node {node!r} is unknown")
            return None
        if action in DISRUPTIVE and not s.scheduler_error and guards.policy_rule(s, p) is None:
            s = dataclasses.replace(s, breaker_open=self.breaker_open(flag=node))
        verdict = guards.decide(s, p)
        if held_back is not None:
            why = f"{held_back}; {action} instead (policy checkpoint.on_storage_unhealthy)"
            verdict = dataclasses.replace(verdict, reason=f"{why}; {verdict.reason}")
        probation, flapped = guards.probation_for(p, rec.get("released_at"), now)
        evidence = self._evidence(s, occurrence, incident, flapped)
        if held_back is not None:
            evidence["checkpoint_held_back"] = held_back
        if not verdict.allow or action not in DISRUPTIVE:
            return self._record(alert, node, fc, action, verdict, evidence)
        held_for_inspection = rec.get("state") == "inspection"  # left only by hand
        state = {
            "state": "inspection" if action == "inspect" or held_for_inspection else "quarantined",
            "fault_class": fc,
            "action": action,
            "since": now,
            "resolved_at": None,
            "probation_s": probation,
            "flapped": int(flapped),
            "reason": verdict.reason,
        }
        intent = {"alert_started": alert_started, "incident_id": incident and incident["id"]}
        return self._record(alert, node, fc, action, verdict, evidence, intent, state)

    def _reset_rung(self, alert: Alert, action: str, now: float) -> str:
        """reboot -> reset_gpu where a GPU reset suffices (the alert's ``reset_suffices``
        label, from the XID catalogue's resolution), the alert names the GPU and a policy
        rule allows it; after a reset of this node within the recurrence window the ladder
        climbs to reboot."""
        labels = alert.labels
        if action != "reboot" or labels.get("reset_suffices") != "true":
            return action
        rule = self.policy.rule_for(labels)
        if not labels.get("gpu", "").isdigit() or rule is None or "reset_gpu" not in rule.allow:
            return action
        tried = self.journal.scalar(
            "SELECT COUNT(*) FROM actions WHERE node=? AND action='reset_gpu' AND started_at>=?",
            (alert.node, now - self.policy.recurrence_window_s),
        )
        return action if tried else "reset_gpu"

    def _storage_hold(self, alert: Alert, action: str, held_back: str) -> int | None:
        """A checkpoint held back while its storage is unhealthy, and policy says hold."""
        v = deny("storage", f"{held_back}; no action until it recovers (policy: hold)")
        fc = alert.labels.get("fault_class", "")
        return self._record(alert, alert.node, fc, action, v, {"checkpoint_held_back": held_back})

    @staticmethod
    def _evidence(
        s: guards.Situation, occurrence: int, incident: dict[str, Any] | None, flapped: bool
    ) -> dict[str, Any]:
        return {
            "occurrence": occurrence,
            "incident": incident["id"] if incident else None,
            "labels": dict(s.alert.labels),
            "flapped": flapped,
            "node": s.node.__dict__ if s.node else None,
            "held": len(s.held),
            "fleet": len(s.fleet),
            "breaker_open": s.breaker_open,
            "silenced": s.silenced,
            "jobs": [j.job_id for j in s.jobs],
            "recent_actions": s.recent_actions,
        }

    def _storage_alert(self, alert: Alert) -> None:
        """A checkpoint-storage alert updates StorageHealth (kept in the journal) and is
        journaled as one incident per mount; it never drains, never flags the breaker."""
        health = storage_mod.load(self.journal)
        health.observe(alert.status, alert.labels, alert.annotations.get("summary", ""))
        storage_mod.save(self.journal, health)
        mount, node = storage_mod.normalize(alert.labels.get("mount", "")), alert.node
        node = node if guards.NODE_NAME.fullmatch(node) else ""
        cluster = alert.labels.get("scope") == "cluster" or not node
        incident = None
        if mount and cluster:
            still = health.unhealthy_mount(mount)
            incident = self.journal.cluster_incident(
                "storage", mount, self.clock.now(), still, self.policy.incident_window_s
            )
        why = storage_mod.alert_reason(alert.status, alert.labels, incident)
        evidence = {"mount": mount, "scope": "cluster" if cluster else "node", "incident": incident}
        self._record(
            alert,
            "" if cluster else node,
            "storage",
            "notify",
            Verdict(True, "storage", why),
            evidence,
        )

    def _domain_alert(self, alert: Alert) -> None:
        """A domain-scope alert (its NVLink fabric or IMEX down) is one cluster-level
        incident per NVLink domain, like a storage mount: opened by the first firing alert,
        closed when no domain alert of it fires any more; its one action is a notification.
        While it is open every disruptive action on the domain's nodes is held."""
        dom, now = nvlink.domain_of(alert.labels), self.clock.now()
        still = alert.status == "firing" or bool(self._domain_firing(dom) - {alert.fingerprint})
        incident = self.journal.cluster_incident(
            nvlink.INCIDENT_CLASS, dom, now, still, self.policy.incident_window_s
        )
        if incident is not None and still:
            with self.journal.tx() as db:
                db.execute("UPDATE incidents SET acted='notify' WHERE id=?", (incident,))
        why = nvlink.alert_reason(alert.status, alert.labels, incident, still)
        evidence = {"scope": "domain", "nvlink_domain": dom, "incident": incident}
        fc = alert.labels.get("fault_class", "")[:64]
        self._record(alert, "", fc, "notify", Verdict(True, "domain", why), evidence)

    def _domain_firing(self, dom: str) -> set[str]:
        """Fingerprints of the domain-scope alerts about ``dom`` still firing."""
        rows = self.journal.rows(
            "SELECT fingerprint, starts_at, status, labels FROM alerts WHERE node='' AND stale=0 "
            "ORDER BY seq"
        )
        mine = (r for r in rows if nvlink.domain_of(json.loads(r["labels"] or "{}")) == dom)
        return ordering.firing((r["fingerprint"], r["starts_at"], r["status"]) for r in mine)

    def _node_domain(self, alert: Alert, domains: Any) -> str:
        """The node's NVLink domain: topology or node labels, else the alert's own
        ``nvlink_domain`` (remembered for the node's later alerts), else an earlier alert's."""
        key, named = nvlink.MEMBER_KEY + alert.node, nvlink.node_domain(alert.labels)
        if named and self.journal.get(key) != named:
            self.journal.put(key, named)
        return str(domains.get(nvlink.DOMAIN_KIND, "")) or named or (self.journal.get(key) or "")

    def _node_held(self, alert: Alert, action: str, dom: str, now: float) -> bool:
        """Held by the node's NVLink domain: its open incident, or the settle window."""
        return self._domain_held(alert, action, dom) or self._settling(alert, action, dom, now)

    def _settling(self, alert: Alert, action: str, dom: str, now: float) -> bool:
        """Hold an NVLink-class disruptive action on a node of a multi-node NVLink domain for
        nvlink.SETTLE_S after the alert arrived, so that a domain-wide fault's domain alert can
        arrive first (``tick`` decides it again after the window). True when held."""
        if not dom or not nvlink.link_class(alert.labels):
            return False
        arrived = self.journal.scalar(
            "SELECT MIN(received_at) FROM alerts WHERE fingerprint=? AND starts_at=? "
            "AND status='firing'",
            (alert.fingerprint, alert.starts_at),
        )
        left = float(arrived if arrived is not None else now) + nvlink.SETTLE_S - now
        if left <= 0:
            return False
        why = nvlink.settle_reason(action, dom, left)
        evidence = {"nvlink_domain": dom, "settle_until": now + left, "held_action": action}
        fc = alert.labels.get("fault_class", "")
        self._record(alert, alert.node, fc, action, deny(nvlink.SETTLE_GUARD, why), evidence)
        settling = json.loads(self.journal.get(nvlink.SETTLING_KEY) or "{}")
        settling[alert.key] = now + left
        self.journal.put(nvlink.SETTLING_KEY, json.dumps(settling, sort_keys=True))
        return True

    def _settled(self, now: float) -> None:
        """Alerts held for the settle window (listed in the journal, so a tick reads one row)
        that still fire are decided again once it has passed: then held as part of a domain
        incident, or acted on as the node's own fault."""
        settling = json.loads(self.journal.get(nvlink.SETTLING_KEY) or "{}")
        due = sorted(k for k, until in settling.items() if until <= now)
        if not due:
            return
        again = [k for k in due if self._still_settling(k)]
        with self.journal.tx() as db:
            db.executemany("UPDATE alerts SET processed=0 WHERE key=?", [(k,) for k in again])
        rest = {k: u for k, u in settling.items() if k not in due}
        self.journal.put(nvlink.SETTLING_KEY, json.dumps(rest, sort_keys=True) if rest else None)

    def _still_settling(self, key: str) -> bool:
        """The alert is still firing and still decided only as held for the settle window."""
        rows = self.journal.rows("SELECT * FROM alerts WHERE key=? AND processed=1", (key,))
        last = self.journal.scalar(
            "SELECT guard FROM decisions WHERE alert_key=? ORDER BY id DESC LIMIT 1", (key,)
        )
        if not rows or rows[0]["stale"] or last != nvlink.SETTLE_GUARD:
            return False
        return rows[0]["fingerprint"] in self.journal.firing_fingerprints(rows[0]["node"])

    def _domain_held(self, alert: Alert, action: str, dom: str) -> bool:
        """Hold a disruptive action on a node whose NVLink domain has an open domain
        incident: journaled as part of it (a transient denial; a repeat after the domain
        recovers is decided again). True when held."""
        incident = self.journal.open_cluster_incident(nvlink.INCIDENT_CLASS, dom) if dom else None
        if incident is None:
            return False
        why = (
            f"{action} held: NVLink domain {dom} is down (incident #{incident}); the domain is "
            "one incident with one action, its nodes are not drained one by one"
        )
        evidence = {"nvlink_domain": dom, "domain_incident": incident, "held_action": action}
        self._record(alert, alert.node, alert.labels.get("fault_class", ""), action,
                     deny("domain", why), evidence)  # fmt: skip
        return True

    def _checkpoint_held_back(self, s: guards.Situation) -> str | None:
        """Why no checkpoint may be asked of the jobs on this node now (their storage is
        unhealthy), or None."""
        nodes = {s.alert.node}.union(*(j.nodes for j in s.jobs))
        return storage_mod.held_back(self.journal, self.policy.checkpoint.mount, nodes)

    def _invalid(self, alert: Alert, code: str, why: str) -> None:
        """Garbage is recorded and counted, and never counts toward the storm breaker."""
        node = alert.node if guards.NODE_NAME.fullmatch(alert.node) else ""
        fc = alert.labels.get("fault_class", "")[:64]
        self._record(alert, node, fc, "notify", deny("invalid_alert", why), {"code": code})
        self.metrics.invalid.labels(code).inc()

    def _hold(self, alert: Alert) -> None:
        """The node is unwatched: keep its state as it is; never healthy, never released."""
        rec = self.journal.node(alert.node)
        state = rec["state"] if rec else "unknown"
        v = Verdict(
            True,
            "hold",
            f"node unwatched ({alert.labels.get('alertname', 'hold')}): state {state} kept; "
            "no probation or release while this fires",
        )
        self._record(alert, alert.node, alert.labels.get("fault_class", ""), "hold", v, {})

    def _redrive(self, alert: Alert, node: str, fc: str, rec: dict[str, Any]) -> int | None:
        """An alert (or Alertmanager's repeat) for a node whose action failed drives it again."""
        rows = self.journal.rows(
            "SELECT id, action FROM actions WHERE node=? AND state='failed' ORDER BY id DESC "
            "LIMIT 1",
            (node,),
        )
        if not rows or self.paused:
            return None
        aid, action = rows[0]["id"], rows[0]["action"]
        v = Verdict(True, "retry", f"action {aid} ({action}) failed earlier; driven again")
        self._record(alert, node, fc, action, v, {"action_id": aid})
        with self.journal.tx() as db:
            db.execute(
                "UPDATE actions SET state='pending', attempts=0, next_at=NULL, "
                "epoch=(SELECT epoch FROM nodes WHERE node=?) WHERE id=?",
                (node, aid),
            )
            state = "inspection" if action == "inspect" else "quarantined"
            self.journal.set_node(db, node, state=state)
        return int(aid)

    def _situation(self, alert: Alert, action: str, now: float) -> guards.Situation:
        p, disruptive = self.policy, action in DISRUPTIVE
        error = ""
        try:
            fleet = self.backend.fleet() if disruptive else ()
            jobs = self.backend.jobs_on(alert.node) if disruptive else ()
        except Unavailable:
            raise  # no answer: nothing decided, the alert waits (worker.drain_until_unreachable)
        except (BackendError, OSError) as e:  # an answer we cannot use: denied (fail closed)
            fleet, jobs, error = (), (), str(e)
        node = self._find(fleet, alert.node)
        return guards.Situation(
            alert=alert,
            action=action,
            now=now,
            paused=self.paused,
            silenced=self.silences.silenced(alert.labels) if disruptive else False,
            node=node,
            fleet=fleet,
            held=self.journal.held_nodes(),
            yielding=self.yielding(),
            jobs=jobs,
            recent_actions=self.journal.actions_since(now - p.rate_window_s),
            scheduler_error=error,
        )

    def _find(self, fleet: tuple[NodeView, ...], name: str) -> NodeView | None:
        seen, index = self._index
        if seen is not fleet:
            index = {}
            for n in fleet:
                index.setdefault(n.name, n)  # the first of a name, as a scan would find
            self._index = (fleet, index)
        return index.get(name)

    def _resolved(self, alert: Alert) -> None:
        node, rec = alert.node, self.journal.node(alert.node) if alert.node else None
        still = self.journal.holding_fingerprints(node) - {alert.fingerprint} if node else set()
        fc = alert.labels.get("fault_class", "")
        if alert.labels.get("action") == "hold":
            v = Verdict(True, "hold", "hold resolved: watched again; no change to the node")
            self._record(alert, node, fc, "hold", v, {})
        elif rec and rec["state"] == "quarantined" and not still:
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
            with contextlib.suppress(Exception):  # the label is informative only
                self.backend.mark(node, "probation")
        else:
            state = rec and rec["state"]
            v = Verdict(True, "resolve", f"resolved; node state {state}, {len(still)} firing")
            pending = {"resolved_at": self.clock.now()} if state == "quarantined" else None
            self._record(alert, node, fc, "notify", v, {}, node_state=pending)
        return None

    # ------------------------------------------------------------------ release
    def release_placement(self, node: str, who: str) -> bool:
        """End the node's placement tier now (an operator's release); True if it had one."""
        events = self.placement.release(node, who) if self.placement is not None else []
        self._record_events(events)
        return bool(events)

    def release(self, node: str, manual: bool, who: str = "api") -> Verdict:
        try:
            view = self.backend.node(node)
        except Exception as e:  # any failure to ask is "unknown": fail closed
            view, err = None, f"{'' if isinstance(e, BackendError) else type(e).__name__ + ': '}{e}"
        else:
            err = ""
        v = guards.release_verdict(view, manual)
        known = self.journal.node(node) is not None
        if v.allow and known:
            # the new epoch first: a step in flight now sees it and undoes its drain, whether
            # it lands before or after the scheduler call below
            self._supersede(node, who)
        if v.allow:
            try:
                outcome = self.backend.release(node)
            except BackendError as e:
                v = deny("ownership" if "not ours" in str(e) else "backend", str(e))
            except Exception as e:  # a runner bug is a failed release, never a 500
                v = deny("backend", f"{type(e).__name__}: {e}")
            else:
                v = Verdict(True, v.guard, f"released by {who}: {outcome}")
        elif err:
            v = deny(v.guard, f"{v.reason} ({err})")
        state = {"state": "released", "released_at": self.clock.now()} if v.allow else None
        self._record(
            None,
            node,
            "",
            "release",
            v,
            {"manual": manual, "who": who},
            node_state=state if known else None,
        )
        self.metrics.actions.labels(
            self.backend.name, "release", "done" if v.allow else "denied"
        ).inc()
        return v

    def _supersede(self, node: str, who: str) -> None:
        """The operator wins: a new epoch for the node; its queued and waiting actions (and
        the steps of one in flight) are dropped and recorded as superseded."""
        now = self.clock.now()
        with self.journal.tx() as db:
            db.execute("UPDATE nodes SET epoch=epoch+1 WHERE node=?", (node,))
            live = "node=? AND state IN ('pending','waiting','paused','retry','deferred','failed')"
            # an action holding a job (an open saga) is run once more: it releases the job
            db.execute(
                f"UPDATE actions SET state='pending', next_at=NULL WHERE {live} AND {OPEN_SAGA}",
                (node,),
            )
            db.execute(
                "UPDATE actions SET state='superseded', outcome=?, finished_at=? WHERE "
                f"{live} AND NOT {OPEN_SAGA}",
                (f"superseded: node released by {who}", now, node),
            )
            self.journal.close_incidents(db, node)
            db.execute("DELETE FROM evacuations WHERE node=?", (node,))  # nothing to evacuate

    def tick(self) -> list[str]:
        """Re-evaluate the breaker; start deferred probations; release nodes whose probation
        passed (if the policy allows); returns them. Inspection is left only by hand."""
        p, now, released = self.policy, self.clock.now(), []
        self.breaker_open()
        self._settled(now)
        if self.placement is not None:
            self._record_events(self.placement.tick())  # expiry, drift repair, restores
        if self.validator is not None:
            self.validator.tick()  # running validations: pass -> release, fail -> escalate
        self.journal.prune_flags(now - 2 * max(p.storm_window_s, p.storm_quiet_s))
        for r in self.journal.rows(
            "SELECT * FROM nodes WHERE state='quarantined' AND resolved_at IS NOT NULL"
        ):
            if not self.journal.holding_fingerprints(r["node"]):  # e.g. a hold resolved
                v = Verdict(True, "resolve", "every alert resolved; probation starts")
                probation = {"state": "probation", "resolved_at": now}
                self._record(
                    None, r["node"], r["fault_class"] or "", "probation", v, {}, None, probation
                )
        if not p.auto_release or self.paused:  # paused: no release, no validation starts
            return []
        for r in self.journal.rows("SELECT * FROM nodes WHERE state='probation'"):
            if now - (r["resolved_at"] or now) < (r["probation_s"] or 0):
                continue
            if self.journal.holding_fingerprints(r["node"]):
                continue
            if self.release_blocked is not None and self.release_blocked(r["node"]):
                continue  # a reset job runs there: its saga concludes it, then probation goes on
            if self.validator is not None and self.validator.gate(r, "probation", "probation"):
                continue  # the suite runs first; the validator releases the node if it passes
            ok, why = validate(self.policy.validate_command, r["node"])
            if not ok:
                self._record(None, r["node"], "", "release", deny("validation", why), {})
                continue
            if self.release(r["node"], manual=False, who="probation").allow:
                released.append(r["node"])
        return released
