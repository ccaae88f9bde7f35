"""Placement: the node tiers remediation keeps (``avoid`` alerts in, projected tiers out).

Decides once (budget, ttl, recurrence) and lets a Projection show it; every tick refreshes
firing evidence, ends expired tiers and reconciles the scheduler against the table (drift
after a reconfigure or restart is re-applied and reported). A scheduler that does not
answer is retried next tick; nothing here ever takes capacity out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from remediation.backends.base import BackendError
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Alert, NodeView, Verdict, allow, deny
from remediation.placement import budget, tiers
from remediation.placement.config import TIERS, PlacementPolicy
from remediation.placement.projection import Projection, Reconciled, Repair
from remediation.placement.store import Store
from remediation.placement.tiers import Entry

PREVIEWS_KEY = "placement_previews"  # journal kv: node -> the dry-run preview journaled last
EVIDENCE_KEYS = ("metric", "value", "peer_percentile", "group_size", "promql", "window")


@dataclass(frozen=True)
class Event:
    """Something the tick did, for the journal: action is placement_<kind>."""

    node: str
    action: str
    verdict: Verdict
    evidence: Mapping[str, Any] = field(default_factory=dict)


def evidence_of(alert: Alert) -> dict[str, Any]:
    """The marginal evidence an alert carries (labels or annotations). A number that does
    not read as a finite one ("NaN%", what humanizePercentage renders for a NaN; "+Inf") is
    left out, never an error and never a made-up value."""
    got = {k: alert.annotations.get(k) or alert.labels.get(k) for k in EVIDENCE_KEYS}
    out: dict[str, Any] = {k: v for k, v in got.items() if v}
    for k in ("value", "peer_percentile", "group_size"):
        if k in out:
            n = _number(out[k])
            if n is None:
                del out[k]
            else:
                out[k] = int(n) if k == "group_size" else n
    out["alertname"] = alert.labels.get("alertname", "")
    return out


def _number(v: Any) -> float | None:
    """A finite number ("99.5%" is 99.5), else None."""
    try:
        n = float(str(v).strip().rstrip("%"))
    except (TypeError, ValueError):
        return None
    return n if math.isfinite(n) else None


def score_of(alert: Alert) -> float:
    """How bad the evidence is (the budget keeps the worst): the ``score`` label or
    annotation, else the peer percentile; 0 when unusable."""
    raw = alert.labels.get("score") or alert.annotations.get("score")
    n = _number(raw if raw is not None else alert.annotations.get("peer_percentile", 0))
    return 0.0 if n is None else n


class Placement:
    def __init__(
        self,
        journal: Journal,
        policy: PlacementPolicy,
        projection: Projection,
        now: Callable[[], float],
        metrics: Metrics,
        fleet: Callable[[], Sequence[NodeView]] = tuple,
        dry_run: bool = False,
    ) -> None:
        self.store, self.policy, self.projection = Store(journal), policy, projection
        self.journal, self.now, self.metrics, self.fleet = journal, now, metrics, fleet
        self.dry_run = dry_run
        self.skipped: dict[str, str] = {}  # node -> why the projection left it alone
        # the scheduler showed no tier of ours at the last reconcile and none is wanted: an
        # idle tick need not read the node table (once after start-up it always does)
        self.neutral = False

    # ------------------------------------------------------------------ decisions
    def avoid(self, alert: Alert) -> tuple[Verdict, dict[str, Any], list[Event]]:
        """A firing ``avoid`` alert: (verdict, evidence, events such as a displacement)."""
        node, now = alert.node, self.now()
        ev = evidence_of(alert)
        old = self.store.get(node)
        if old is not None:
            e = replace(
                old,
                firing=True,
                last_evidence=now,
                fingerprint=alert.fingerprint,
                evidence=ev or old.evidence,
                score=max(old.score, score_of(alert)),
            )
            self.store.put(e, new_episode=False)
            return allow("placement", f"still {e.tier}; evidence refreshed"), ev, self._sync()
        try:
            members, caps = self._members()
        except Exception as err:  # soft: not de-preferred is the safe side
            return deny("scheduler", f"placement groups unreadable: {err}"), ev, []
        if node not in {m for g in caps if not g.startswith("domain:") for m in members[g]}:
            return deny("placement", f"node {node!r} is in no partition or node pool"), ev, []
        rec = self.store.recurrences(node, now - self.policy.recurrence_window_s)
        tier = tiers.tier_for(self.policy, rec)
        if alert.labels.get("tier") in TIERS and alert.labels["tier"] == "suspect":
            tier = "suspect"
        cand = budget.Member(node, score_of(alert), self._groups_of(node, members))
        held = [
            budget.Member(e.node, e.score, self._groups_of(e.node, members))
            for e in self.store.entries()
        ]
        adm = budget.admit(cand, held, caps)
        if not adm.allow:
            self.metrics.placement_clips.labels("denied").inc()
            return deny("placement_budget", adm.reason), ev, []
        ttl = tiers.ttl_for(self.policy, rec)
        reason = alert.annotations.get("summary") or alert.labels.get("alertname", "avoid")
        e = Entry(
            node,
            tier,
            reason[:200],
            now,
            now,
            ttl,
            True,
            cand.score,
            alert.labels.get("gpu") or None,
            alert.fingerprint,
            ev,
        )
        events = []
        if adm.displace is None:
            self.store.put(e, new_episode=True)
        else:  # the new tier and the end of the one it displaces commit together
            self.metrics.placement_clips.labels("displaced").inc()
            self.store.displace(adm.displace, e, f"displaced by {node}")
            events.append(
                Event(
                    adm.displace,
                    "placement_displace",
                    allow("placement_budget", f"displaced by {node}: {adm.reason}"),
                )
            )
        why = f"{tier} for {ttl:.0f}s after the last evidence ({rec} recurrence(s)); {adm.reason}"
        return (
            allow("placement", why),
            {**ev, "ttl_s": ttl, "recurrences": rec},
            events + self._sync(),
        )

    def resolved(self, alert: Alert) -> Verdict | None:
        """The avoid alert resolved: the ttl's clock starts now."""
        e = self.store.get(alert.node)
        if e is None or e.fingerprint != alert.fingerprint:
            return None
        e = tiers.resolved(e, self.now())
        self.store.put(e, new_episode=False)
        return allow("placement", f"evidence resolved; {e.tier} until {e.until(self.policy):.0f}")

    def release(self, node: str, who: str) -> list[Event]:
        """An operator's release ends the tier at once (and restores the scheduler)."""
        if not self.store.end(node, self.now(), f"released by {who}"):
            return []
        v = allow("manual", f"placement tier ended by {who}")
        self._room_freed()
        return [Event(node, "placement_release", v), *self._sync()]

    def _room_freed(self) -> None:
        """A tier ended: the alerts the budget denied, still firing, are decided again now
        (the worker's next pass), not only at Alertmanager's next repeat."""
        waiting = [k for k, node, fp in self.store.budget_denied()
                   if fp in self.journal.firing_fingerprints(node)]  # fmt: skip
        if waiting:
            self.store.redecide(waiting)

    def tick(self) -> list[Event]:
        now, events, freed = self.now(), [], False
        for e in self.store.entries():
            if e.firing and e.fingerprint and not self._still_firing(e):
                e = tiers.resolved(e, now)  # a missed resolution: the clock starts now
                self.store.put(e, new_episode=False)
            if tiers.expired(e, self.policy, now):
                self.store.end(e.node, now, "expired")
                v = allow("placement", f"{e.tier} expired (ttl {e.ttl_s:.0f}s)")
                events.append(Event(e.node, "placement_expire", v))
                freed = True
            elif e.firing:
                self.store.put(tiers.refreshed(e, now), new_episode=False)
        if freed:
            self._room_freed()
        if self.neutral and not self.store.entries():
            return events
        return events + self._sync()

    # ------------------------------------------------------------------ projection
    def _sync(self) -> list[Event]:
        wanted = {e.node: e.tier for e in self.store.entries()}
        try:
            done: Reconciled = self.projection.reconcile(wanted, self.dry_run)
        except Exception as err:  # any API error (ApiException too): retried, never a drain;
            # soft actions fail open, and must never stall the tick that releases nodes
            self.metrics.placement_errors.labels(self.projection.name).inc()
            kind = "" if isinstance(err, (BackendError, OSError)) else f"{type(err).__name__}: "
            v = deny("scheduler", f"placement projection failed: {kind}{err}")
            return [Event("", "placement_error", v)] if not self.dry_run else []
        self.skipped = dict(done.skipped)
        self.neutral = not wanted and not done.changes
        self.refresh_gauges()
        changes = self._unseen(done.changes) if self.dry_run else done.changes
        out = []
        for c in changes:
            self.metrics.placement_repairs.labels(self.projection.name, c.kind).inc()
            v = allow("placement", ("dry-run: would " if self.dry_run else "") + c.detail)
            out.append(Event(c.node, f"placement_{c.kind}", v, {"kind": c.kind}))
        return out

    def _unseen(self, changes: Sequence[Repair]) -> list[Repair]:
        """Dry-run: nothing is applied, so the projection reports the same change every
        tick; journal each preview once per change (as the live path journals a change
        once), remembered in the journal so that a restart does not repeat it."""
        seen = json.loads(self.journal.get(PREVIEWS_KEY) or "{}")
        now = {c.node: f"{c.kind}: {c.detail}" for c in changes}
        if now != seen:
            self.journal.put(PREVIEWS_KEY, json.dumps(now, sort_keys=True) if now else None)
        return [c for c in changes if seen.get(c.node) != now[c.node]]

    def _members(self) -> tuple[dict[str, frozenset[str]], dict[str, int]]:
        members = dict(self.projection.groups())
        for v in self.fleet():
            for key, value in v.domains.items():
                g = f"domain:{key}={value}"
                members[g] = members.get(g, frozenset()) | {v.name}
        sizes = {g: len(m) for g, m in members.items()}
        p = self.policy
        return members, budget.limits(sizes, p.max_fraction, p.max_domain_fraction)

    @staticmethod
    def _groups_of(node: str, members: Mapping[str, frozenset[str]]) -> frozenset[str]:
        return frozenset(g for g, m in members.items() if node in m)

    def _still_firing(self, e: Entry) -> bool:
        return e.fingerprint in self.journal.firing_fingerprints(e.node)

    # ------------------------------------------------------------------ reading
    def refresh_gauges(self) -> None:
        counts = dict.fromkeys(TIERS, 0)
        for e in self.store.read_entries():
            counts[e.tier] = counts.get(e.tier, 0) + 1
        for t, n in counts.items():
            self.metrics.placement_nodes.labels(t).set(n)

    def listing(self) -> list[dict[str, Any]]:
        """``GET /api/v1/placement``'s nodes (times in Unix seconds)."""
        return [
            {
                "node": e.node,
                "gpu": e.gpu,
                "tier": e.tier,
                "reason": e.reason,
                "since": e.since,
                "until": e.until(self.policy),
                "firing": e.firing,
                "evidence": dict(e.evidence),
                "projection": self.skipped.get(e.node, "dry-run" if self.dry_run else "applied"),
            }
            for e in self.store.read_entries()
        ]
