"""Remediation: what the remediation service decided and did, its breaker and its inbox."""

from __future__ import annotations

from grafanalib import core as g

from dashboards.panels import Layout, dashboard, stat, state_timeline, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-remediation"
RATE = "[$__rate_interval]"


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(
        state_timeline("Circuit breaker", f"max({c.REMEDIATION_BREAKER_OPEN.name})", "breaker",
                       {0: ("closed", "green"), 1: ("open", "red")}),
        12, 4,
    )  # fmt: skip
    lay.add(
        state_timeline("Paused by an operator", f"max({c.REMEDIATION_PAUSED.name})", "paused",
                       {0: ("running", "green"), 1: ("paused", "orange")}),
        12, 4,
    )  # fmt: skip
    lay.add(
        state_timeline("Scheduler / API server answering",
                       f"max({c.REMEDIATION_BACKEND_UNREACHABLE.name})", "backend",
                       {0: ("answering", "green"), 1: ("unreachable: alerts wait", "red")}),
        24, 4,
    )  # fmt: skip
    lay.add(
        stat("Quarantined nodes", f"sum({c.REMEDIATION_NODES_QUARANTINED.name}) or vector(0)",
             "none", thresholds=[("green", None), ("orange", 1.0)]),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Actions in range",
             f"sum(increase({c.REMEDIATION_ACTIONS.name}[$__range])) or vector(0)", "none"),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Denied decisions in range",
             f'sum(increase({c.REMEDIATION_DECISIONS.name}{{verdict="deny"}}[$__range]))'
             " or vector(0)", "none"),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Alert to action, p90",
             f"histogram_quantile(0.9, sum by (le) (rate({c.REMEDIATION_ALERT_TO_ACTION.name}"
             f"_bucket{RATE}))) or vector(0)", "s"),
        6, 4,
    )  # fmt: skip
    lay.add(
        ts("Decisions by guard and verdict",
           [(f"sum by (guard, verdict) (rate({c.REMEDIATION_DECISIONS.name}{RATE}))"
             " or on() vector(0)", "{{guard}} {{verdict}}")], "ops"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Actions by outcome",
           [(f"sum by (action, outcome) (rate({c.REMEDIATION_ACTIONS.name}{RATE}))"
             " or on() vector(0)", "{{action}} {{outcome}}")], "ops"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Quarantined nodes by state",
           [(f"sum by (state) ({c.REMEDIATION_NODES_QUARANTINED.name})", "{{state}}")], "none"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Webhook: alerts received and requests",
           [(f"sum by (status) (rate({c.REMEDIATION_ALERTS.name}{RATE}))", "alerts {{status}}"),
            (f"sum by (code) (rate({c.REMEDIATION_WEBHOOK_REQUESTS.name}{RATE}))",
             "HTTP {{code}}"),
            (f"sum by (reason) (rate({c.REMEDIATION_WEBHOOK_ERRORS.name}{RATE}))"
             " or on() vector(0)", "rejected {{reason}}")], "ops"),
        12, 8,
    )  # fmt: skip
    lay.add(
        table("Journal: actions in range",
              f"sum by (backend, action, outcome) (increase({c.REMEDIATION_ACTIONS.name}"
              "[$__range])) > 0 or on() vector(0)", "none",
              "Counts per action and outcome. The journal itself (each decision with its"
              " evidence) is `gpuwarden quarantine history` or GET /api/v1/decisions."),
        12, 8,
    )  # fmt: skip
    lay.add(
        table("Journal: decisions in range",
              f"sum by (guard, verdict, action) (increase({c.REMEDIATION_DECISIONS.name}"
              "[$__range])) > 0 or on() vector(0)", "none"),
        12, 8,
    )  # fmt: skip
    _placement_row(lay)
    _maintenance_row(lay)
    return dashboard(
        "gpuwarden / Remediation", UID,
        "Decisions and actions of the remediation service, its circuit breaker, pause state,"
        " quarantined nodes and webhook inbox.",
        lay, [], ("remediation",),
    )  # fmt: skip


def _placement_row(lay: Layout) -> None:
    """Placement tiers (soft actions): de-preferred nodes, budget clips, drift repaired."""
    lay.row("Placement tiers (de-preferred, never drained)")
    lay.add(
        ts("De-preferred nodes by tier",
           [(f"sum by (tier) ({c.REMEDIATION_PLACEMENT_NODES.name})", "{{tier}}")], "none"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Placement budget clips",
           [(f"sum by (outcome) (increase({c.REMEDIATION_PLACEMENT_BUDGET_CLIPS.name}{RATE}))"
             " or on() vector(0)", "{{outcome}}")], "none"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Scheduler changes and drift repaired",
           [(f"sum by (projection, kind) (increase({c.REMEDIATION_PLACEMENT_REPAIRS.name}"
             f"{RATE})) or on() vector(0)", "{{projection}} {{kind}}"),
            (f"sum by (projection) (increase({c.REMEDIATION_PLACEMENT_ERRORS.name}{RATE}))"
             " or on() vector(0)", "{{projection}} unanswered (retried)")], "none"),
        8, 8,
    )  # fmt: skip


def _maintenance_row(lay: Layout) -> None:
    """Rolling maintenance: progress, ETA and where each run's nodes are."""
    lay.row("Rolling maintenance")
    lay.add(
        ts("Progress by run",
           [(f"max by (run) ({c.REMEDIATION_MAINTENANCE_PROGRESS.name})", "run {{run}}")],
           "percentunit"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("ETA by run", [(f"max by (run) ({c.REMEDIATION_MAINTENANCE_ETA.name})", "run {{run}}")],
           "s"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Nodes by state",
           [(f"sum by (state) ({c.REMEDIATION_MAINTENANCE_NODES.name})", "{{state}}")], "none"),
        8, 8,
    )  # fmt: skip
