"""Reliability: what failures cost (GPU-hours lost by cause and component), MTBF per GPU
model and component with its 90 % interval, ETTR, and how fast incidents are detected,
mitigated and repaired. Reads the remediation service's gpuwarden_accounting_* series
(accounting/metrics.py); the full report is `gpuwarden report`."""

from __future__ import annotations

from grafanalib import core as g

from dashboards.panels import Layout, dashboard, stat, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-reliability"
LOST = c.ACCOUNTING_LOST.name
HOURS = " / 3600"


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(
        stat("GPU-hours lost to failures", f"sum({LOST}){HOURS} or vector(0)", "none",
             "Restart + recompute + capacity, over the journal's history."),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Incidents", f"sum({c.ACCOUNTING_INCIDENTS.name}) or vector(0)", "none"),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("ETTR", f"max by (weighting) ({c.ACCOUNTING_ETTR.name})", "percentunit",
             "Effective training time ratio, GPU-hour- and job-count-weighted; no value while"
             " unknown (no job allocation or checkpoint times)."),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Incidents with unknown recompute",
             f"max({c.ACCOUNTING_UNKNOWN_RECOMPUTE.name}) or vector(0)", "none",
             "A job hit had no checkpoint time: its redone work is unknown, never guessed.",
             thresholds=[("green", None), ("orange", 1.0)]),
        6, 4,
    )  # fmt: skip
    lay.add(
        ts("GPU-hours lost per week, by cause",
           [(f"sum by (cause) (delta({LOST}[1w])){HOURS}", "{{cause}}")], "none",
           "How much each week's failures cost: restart (jobs waiting), recompute (work"
           " redone since the last checkpoint), capacity (GPUs out for repair)."),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("GPU-hours lost, cumulative, by component",
           [(f"sum by (component) ({LOST}){HOURS}", "{{component}}")], "none"),
        12, 8,
    )  # fmt: skip
    lay.add(
        table("MTBF per GPU model and component (hours)",
              f"max by (gpu_model, component, bound) ({c.ACCOUNTING_MTBF.name}){HOURS}", "none",
              "bound: estimate, lower90, upper90 (exact two-sided 90% chi-squared interval,"
              " time-terminated). No upper bound while a cell has no failure."),
        12, 8,
    )  # fmt: skip
    lay.add(
        table("Incidents and exposure per GPU model and component",
              f"max by (gpu_model, component) ({c.ACCOUNTING_INCIDENTS.name})", "none",
              "Software and unknown failures have no unit, so no exposure and no MTBF."),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Time to detect, mitigate, repair",
           [(f"max by (stage, stat) ({c.ACCOUNTING_STAGE.name})", "{{stage}} {{stat}}")], "s"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Exposure (unit-hours in service)",
           [(f"max by (gpu_model, component) ({c.ACCOUNTING_EXPOSURE.name}){HOURS}",
             "{{gpu_model}} {{component}}")], "none"),
        12, 8,
    )  # fmt: skip
    return dashboard(
        "gpuwarden / Reliability", UID,
        "What failures cost and how often each GPU model and component fails, from the"
        " remediation journal: GPU-hours lost by cause and component, MTBF with 90% intervals,"
        " ETTR, detection and repair times.",
        lay, [], ("reliability", "remediation"),
    )  # fmt: skip
