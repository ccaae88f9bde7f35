"""The safety guards: pure functions from a frozen Situation to a denial (or None = pass).

Sits in the middle of the data flow: the engine gathers a Situation (alert, scheduler view,
journal counts, clock reading) and :func:`decide` runs the guards in order; the first denial
decides. Nothing here does I/O or reads a clock: ``now`` is part of the Situation.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from common import fabric
from remediation.model import (
    ACTIONS,
    DISRUPTIVE,
    REASON_PREFIX,
    Alert,
    Job,
    NodeView,
    Verdict,
    allow,
    deny,
)
from remediation.policy import Budget, Policy


@dataclass(frozen=True)
class Situation:
    alert: Alert
    action: str
    now: float
    paused: bool
    silenced: bool | None  # None: Alertmanager could not be asked
    node: NodeView | None  # None: the scheduler does not know this node
    fleet: tuple[NodeView, ...]
    held: frozenset[str]  # nodes gpuwarden holds out of service (journal, incl. in flight)
    jobs: tuple[Job, ...] = ()
    breaker_open: bool = False
    recent_actions: int = 0
    scheduler_error: str = ""  # the scheduler could not be asked
    # nodes out for rolling maintenance not yet operated on: faults win, so they are not
    # counted against a fault's budget (the maintenance run gives them back on its next
    # tick, remediation/maintenance/machine.py)
    yielding: frozenset[str] = frozenset()


Guard = Callable[[Situation, Policy], Verdict | None]


def policy_rule(s: Situation, p: Policy) -> Verdict | None:
    rule = p.rule_for(s.alert.labels)
    if rule is None:
        return deny("policy", "no policy rule matches this alert")
    if s.action not in rule.allow:
        return deny("policy", f"action {s.action} not allowed for this alert")
    return None


def paused(s: Situation, p: Policy) -> Verdict | None:
    return deny("paused", "remediation is paused") if s.paused else None


def silenced(s: Situation, p: Policy) -> Verdict | None:
    if s.silenced:
        return deny("silenced", f"an active Alertmanager silence matches node {s.alert.node}")
    if s.silenced is None and p.require_silence_check:
        return deny("silenced", "Alertmanager silences could not be checked (policy requires it)")
    return None


def scheduler(s: Situation, p: Policy) -> Verdict | None:
    if s.scheduler_error:
        return deny("scheduler", f"scheduler state unknown: {s.scheduler_error}")
    return None


def ownership(s: Situation, p: Policy) -> Verdict | None:
    if s.node is None:
        return deny("ownership", f"node {s.alert.node!r} is unknown to the scheduler")
    if s.node.out_of_service and not s.node.ours:
        return deny("ownership", f"node is out of service by someone else: {s.node.reason!r}")
    return None


def storm_breaker(s: Situation, p: Policy) -> Verdict | None:
    if s.breaker_open:
        return deny("storm_breaker", f"storm breaker open (> {p.storm_max_nodes} nodes flagged)")
    return None


def rate_limit(s: Situation, p: Policy) -> Verdict | None:
    if s.recent_actions >= p.rate_max_actions:
        return deny(
            "rate_limit",
            f"{s.recent_actions} actions in the last {p.rate_window_s:.0f}s "
            f"(limit {p.rate_max_actions})",
        )
    return None


def budget_limit(b: Budget, size: int) -> int:
    """How many of ``size`` nodes may be out at once under budget ``b``."""
    return min(b.max_nodes, math.floor(b.max_fraction * size + 1e-9))


def _already_out(s: Situation) -> bool:
    return s.alert.node in s.held or (s.node is not None and s.node.out_of_service)


def _out(s: Situation) -> set[str]:
    return ({n.name for n in s.fleet if n.out_of_service} | set(s.held)) - s.yielding


def budget_fleet(s: Situation, p: Policy) -> Verdict | None:
    if _already_out(s):
        return None
    if not s.fleet:
        return deny("budget_fleet", "fleet size unknown")
    after = len(_out(s) | {s.alert.node})
    limit = budget_limit(p.fleet_budget, len(s.fleet))
    if after > limit:
        return deny("budget_fleet", f"{after} nodes would be out of {len(s.fleet)} (limit {limit})")
    return None


def budget_domain(s: Situation, p: Policy) -> Verdict | None:
    if _already_out(s) or s.node is None:
        return None
    out = _out(s) | {s.alert.node}
    for kind, budget in sorted(p.domain_budgets.items()):
        mine = fabric.names(s.node.domains, kind)  # a rail-optimized node: a leaf per port
        if not mine:
            continue
        members: dict[str, list[str]] = {name: [] for name in mine}
        for n in s.fleet:
            for name in fabric.names(n.domains, kind) & mine:
                members[name].append(n.name)
        for name in sorted(mine):
            after = len(out.intersection(members[name]))
            limit = budget_limit(budget, len(members[name]))
            if after > limit:
                return deny(
                    "budget_domain",
                    f"{kind} {name}: {after} of {len(members[name])} nodes would be out "
                    f"(limit {limit})",
                )
    return None


def budget_job(s: Situation, p: Policy) -> Verdict | None:
    if s.alert.node in s.held:
        return None
    for job in s.jobs:
        taken = len(s.held.intersection(job.nodes) - {s.alert.node}) + 1
        if taken > p.per_job_max_nodes:
            return deny(
                "budget_job",
                f"job {job.job_id} would lose {taken} nodes (limit {p.per_job_max_nodes})",
            )
    return None


GUARDS: tuple[Guard, ...] = (
    policy_rule,
    paused,
    silenced,
    scheduler,
    ownership,
    storm_breaker,
    rate_limit,
    budget_fleet,
    budget_domain,
    budget_job,
)


def decide(s: Situation, p: Policy, guards: Sequence[Guard] = GUARDS) -> Verdict:
    """Run the guards in order; the first denial decides. notify passes the policy rule only."""
    chain = guards if s.action in DISRUPTIVE else guards[:1]
    for guard in chain:
        verdict = guard(s, p)
        if verdict is not None:
            return verdict
    if p.dry_run:
        return allow("dry_run", f"{s.action} allowed; dry-run: recorded, not executed")
    return allow("policy", f"{s.action} allowed by every guard")


def breaker_quiet(last_flag: float | None, now: float, p: Policy) -> bool:
    """An open breaker closes once no valid flag came for ``quiet_s`` (judged on the flags
    recorded *before* any new one: a new alert must not make the silence look zero)."""
    return last_flag is None or now - last_flag >= p.storm_quiet_s


def breaker_trips(distinct_recent: int, p: Policy) -> bool:
    """More than ``storm_max_nodes`` distinct nodes flagged within the storm window."""
    return distinct_recent > p.storm_max_nodes


# A node name as Slurm and Kubernetes spell one (RFC 1123 labels, dots, underscores).
NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")


def invalid_alert(alert: Alert, p: Policy) -> tuple[str, str] | None:
    """(reason code, text) when an alert cannot be acted on whatever the situation: it gets a
    ``deny invalid_alert`` and never counts toward the storm breaker. Codes: INVALID_REASONS."""
    node, action = alert.node, alert.labels.get("action", "notify")
    if not node:
        return "no_node", "alert has no node label"
    if not NODE_NAME.fullmatch(node):
        return "bad_node", f"node label is not a node name: {node[:64]!r}"
    if action not in ACTIONS:
        return "bad_action", f"action label {action[:64]!r} is not one of {', '.join(ACTIONS)}"
    fc = alert.labels.get("fault_class", "")
    if action in DISRUPTIVE and not p.knows_class(fc):
        return "unknown_class", f"fault_class {fc[:64]!r} is unknown to the policy"
    return None


def probation_for(p: Policy, last_release: float | None, now: float) -> tuple[float, bool]:
    """Flap damping: a node failing again soon after release gets a longer probation."""
    if last_release is not None and now - last_release <= p.flap_window_s:
        return p.probation_s * p.flap_multiplier, True
    return p.probation_s, False


def choose_action(p: Policy, alert: Alert, occurrence: int) -> str:
    """Escalation: the alert's recommended rung, climbed once per earlier occurrence."""
    recommended = alert.labels.get("action", "notify")
    if recommended == "notify":
        return "notify"  # an alert that only asks for a notification never escalates
    ladder = p.ladders.get(alert.labels.get("fault_class", "")) or (recommended,)
    if occurrence >= p.inspect_after:
        return "inspect"
    start = ladder.index(recommended) if recommended in ladder else 0
    return ladder[min(start + occurrence - 1, len(ladder) - 1)]


def release_verdict(node: NodeView | None, manual: bool) -> Verdict:
    """May gpuwarden put this node back in service? Only a drain it wrote itself."""
    if node is None:
        return deny("ownership", "node unknown to the scheduler")
    if node.out_of_service and not node.reason.startswith(REASON_PREFIX):
        return deny("ownership", f"drain reason not written by gpuwarden: {node.reason!r}")
    return allow("manual" if manual else "probation", "release allowed")
