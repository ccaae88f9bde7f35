"""The nouns remediation decides over: alerts in, node and job views from the scheduler,
verdicts out. Frozen dataclasses only; sits between intake (webhook) and the guards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

# Actions an alert may recommend (docs/contracts.md) plus ``inspect`` (hardware inspection,
# the top of every escalation ladder). ``hold``: the node (or its exporter/analyzer) is
# unwatched; its state is kept as it is, and it is never released while a hold fires.
ACTIONS = (
    "notify",
    "hold",
    "cordon",
    "drain",
    "requeue",
    "checkpoint_restart",
    "reboot",
    "inspect",
    "avoid",
    "reset_gpu",  # reset one GPU (the rung before reboot; remediation/gpureset/)
)
# Soft actions de-prefer a node (placement tiers) and never take capacity out: no drain
# budget, rate limit or storm breaker applies to them (remediation/placement/).
SOFT = frozenset({"avoid"})
# Actions that take a node out of service (everything but notify, hold and the soft ones).
DISRUPTIVE = frozenset(ACTIONS) - {"notify", "hold"} - SOFT
# Reasons an alert is rejected as invalid (metric label values: a fixed set).
INVALID_REASONS = ("no_node", "bad_node", "bad_action", "unknown_class", "unknown_node")
# Guards whose denial is transient: a repeat notification of the same alert is decided again.
TRANSIENT_GUARDS = frozenset(
    {
        "paused",
        "silenced",
        "storm_breaker",
        "rate_limit",
        "budget_fleet",
        "budget_domain",
        "budget_job",
        "scheduler",
        "domain",  # held while the node's NVLink domain is down (one domain incident)
        "domain_settle",  # NVLink alert held while a domain alert may still arrive
        "storage",  # checkpoint held back while its storage is unhealthy (policy: hold)
        "placement_budget",  # an avoid beyond the placement budget: room may free (expiry)
    }
)
REASON_PREFIX = "gpuwarden:"


@dataclass(frozen=True)
class Alert:
    """One alert of an Alertmanager webhook (v4)."""

    fingerprint: str
    starts_at: str
    status: str  # firing | resolved
    labels: Mapping[str, str]
    annotations: Mapping[str, str] = field(default_factory=dict)
    ends_at: str = ""  # a resolve's end (ordering); "" while firing or when not sent

    @property
    def node(self) -> str:
        return self.labels.get("node", "")

    @property
    def key(self) -> str:
        """Idempotency key: a repeat or retry of the same notification has the same key."""
        return f"{self.fingerprint}|{self.starts_at}|{self.status}"


@dataclass(frozen=True)
class NodeView:
    """The scheduler's view of one node."""

    name: str
    out_of_service: bool = False  # drained/draining/down/cordoned, by anyone
    ours: bool = False  # out of service by a gpuwarden drain/cordon
    reason: str = ""
    domains: Mapping[str, str] = field(default_factory=dict)  # e.g. {"leaf": "leaf-01"}


@dataclass(frozen=True)
class Job:
    job_id: str
    state: str
    nodes: tuple[str, ...]
    restarts: int = 0
    held: bool = False  # pending and held (Slurm requeuehold/hold): it will not start


@dataclass(frozen=True)
class Verdict:
    """The outcome of the guard chain: who decided, and why."""

    allow: bool
    guard: str
    reason: str

    @property
    def verdict(self) -> str:
        return "allow" if self.allow else "deny"


def allow(guard: str, reason: str) -> Verdict:
    return Verdict(True, guard, reason)


def deny(guard: str, reason: str) -> Verdict:
    return Verdict(False, guard, reason)
