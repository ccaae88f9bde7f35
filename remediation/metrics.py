"""Self-metrics on a private registry (names and help from exporter.catalog).

Created per service instance; nothing registers itself at import time.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from exporter import catalog as c


def _counter(d: c.MetricDef, reg: CollectorRegistry) -> Counter:
    return Counter(d.name, d.help, list(d.labels), registry=reg)


def _gauge(d: c.MetricDef, reg: CollectorRegistry) -> Gauge:
    return Gauge(d.name, d.help, list(d.labels), registry=reg)


class Metrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = self.registry = registry or CollectorRegistry()
        self.decisions = _counter(c.REMEDIATION_DECISIONS, reg)
        self.actions = _counter(c.REMEDIATION_ACTIONS, reg)
        d = c.REMEDIATION_ALERT_TO_ACTION
        self.alert_to_action = Histogram(
            d.name, d.help, list(d.labels), buckets=list(d.buckets), registry=reg
        )
        self.quarantined = _gauge(c.REMEDIATION_NODES_QUARANTINED, reg)
        self.breaker = _gauge(c.REMEDIATION_BREAKER_OPEN, reg)
        self.paused = _gauge(c.REMEDIATION_PAUSED, reg)
        self.leader = _gauge(c.REMEDIATION_LEADER, reg)
        self.leader.set(1)  # a standby serves its own /metrics (remediation.leader.run)
        self.unreachable = _gauge(c.REMEDIATION_BACKEND_UNREACHABLE, reg)
        self.requests = _counter(c.REMEDIATION_WEBHOOK_REQUESTS, reg)
        self.errors = _counter(c.REMEDIATION_WEBHOOK_ERRORS, reg)
        self.alerts = _counter(c.REMEDIATION_ALERTS, reg)
        self.invalid = _counter(c.REMEDIATION_INVALID_ALERTS, reg)
        self.failures = _counter(c.REMEDIATION_ACTION_FAILURES, reg)
        self.node_failed = _gauge(c.REMEDIATION_NODE_ACTION_FAILED, reg)
        self.evictions_blocked = _gauge(c.REMEDIATION_EVICTIONS_BLOCKED, reg)
        self.placement_nodes = _gauge(c.REMEDIATION_PLACEMENT_NODES, reg)
        self.placement_clips = _counter(c.REMEDIATION_PLACEMENT_BUDGET_CLIPS, reg)
        self.placement_repairs = _counter(c.REMEDIATION_PLACEMENT_REPAIRS, reg)
        self.placement_errors = _counter(c.REMEDIATION_PLACEMENT_ERRORS, reg)
        self.events_delivered = _counter(c.REMEDIATION_EVENTS_DELIVERED, reg)
        self.events_failures = _counter(c.REMEDIATION_EVENTS_FAILURES, reg)
        self.events_pending = _gauge(c.REMEDIATION_EVENTS_PENDING, reg)
        self.events_oldest = _gauge(c.REMEDIATION_EVENTS_OLDEST_PENDING, reg)
        self.events_dead = _gauge(c.REMEDIATION_EVENTS_DEAD_LETTERS, reg)
        self.maintenance_nodes = _gauge(c.REMEDIATION_MAINTENANCE_NODES, reg)
        self.maintenance_progress = _gauge(c.REMEDIATION_MAINTENANCE_PROGRESS, reg)
        self.maintenance_eta = _gauge(c.REMEDIATION_MAINTENANCE_ETA, reg)

    def render(self) -> bytes:
        return generate_latest(self.registry)
