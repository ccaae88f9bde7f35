"""Pipeline health: are the exporters, collectors, analyzer, remediation and Alertmanager ok."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import names as n
from dashboards.panels import Layout, dashboard, state_timeline, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-pipeline"
RATE = "[$__rate_interval]"


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(
        table("Targets by component",
              f"sum by (component, job) ({n.COMPONENT_UP}) or on() vector(0)", "none",
              "Targets up per scrape job (component from alerts/pipeline.rules.yml)."),
        8, 6,
    )  # fmt: skip
    lay.add(
        table("Targets down",
              f"count by (component, job) ({n.COMPONENT_UP} == 0) or on() vector(0)", "none"),
        8, 6,
    )  # fmt: skip
    lay.add(
        table("Firing gpuwarden alerts",
              f'count by (alertname, severity) ({n.ALERTS}{{alertstate="firing"}})'
              " or on() vector(0)", "none"),
        8, 6,
    )  # fmt: skip
    lay.row("Exporters")
    lay.add(
        ts("Age of the last collection",
           [(f"time() - {c.LAST_COLLECTION.name}", "{{node}}")], "s",
           "GpuwardenExporterStale fires above 120 s."),
        12, 8,
    )  # fmt: skip
    lay.add(
        state_timeline("Collector success", f"{c.COLLECTOR_SUCCESS.name}",
                       "{{node}} {{collector}}", {0: ("failing", "red"), 1: ("ok", "green")}),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Collector duration", [(f"max by (collector) ({c.COLLECTOR_DURATION.name})",
                                   "{{collector}} (slowest node)")], "s"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Read errors and lost kernel log records",
           [(f"sum by (collector, what) (rate({c.READ_ERRORS.name}{RATE})) or on() vector(0)",
             "{{collector}} {{what}}"),
            (f"sum(rate({c.KMSG_LOST.name}{RATE}))", "kmsg records lost")], "ops"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Scrape duration",
           [(f'max by (job) ({n.SCRAPE_DURATION}{{job=~"gpuwarden.*"}})', "{{job}}")], "s"),
        8, 8,
    )  # fmt: skip
    lay.row("Analyzer")
    lay.add(
        ts("Age of the last analysis cycle",
           [(f"time() - {c.ANALYZER_LAST_CYCLE.name}", "analyzer")], "s",
           "GpuwardenAnalyzerStale fires above 300 s."),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Detector duration", [(f"{c.ANALYZER_CYCLE_DURATION.name}", "{{detector}}")], "s"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Detector and source errors",
           [(f"sum by (detector) (rate({c.ANALYZER_DETECTOR_ERRORS.name}{RATE}))"
             " or on() vector(0)", "{{detector}}"),
            (f"sum by (source) (rate({c.ANALYZER_SOURCE_ERRORS.name}{RATE}))"
             " or on() vector(0)", "source {{source}}")], "ops"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Queries failed and answered with warnings",
           [(f"sum by (query) (rate({c.ANALYZER_QUERY_FAILURES.name}{RATE}))"
             " or on() vector(0)", "failed {{query}}"),
            (f"sum by (query) (rate({c.ANALYZER_QUERY_WARNINGS.name}{RATE}))",
             "warnings {{query}}")], "ops",
           "Warnings: the query layer (Thanos Query) could not reach some store and answered"
           " from the others; GpuwardenAnalyzerPartialAnswers fires after 15 minutes of them."),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Read per cycle",
           [(f"{c.ANALYZER_READ_BYTES.name}", "bytes {{instance}}")], "bytes",
           "Response bytes of the last cycle's read; a shard lost behind the query layer"
           " shows as a drop."),
        12, 8,
    )  # fmt: skip
    lay.row("Alertmanager to remediation")
    lay.add(
        ts("Webhook notifications failed",
           [(f"sum by (integration) (rate({n.AM_NOTIFICATIONS_FAILED}{RATE})) or on() vector(0)",
             "{{integration}}")], "ops", "Alertmanager's own counter; needs it scraped in a"
           " job named alertmanager*."),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Webhook requests rejected by remediation",
           [(f"sum by (reason) (rate({c.REMEDIATION_WEBHOOK_ERRORS.name}{RATE}))"
             " or on() vector(0)", "{{reason}}")], "ops"),
        12, 8,
    )  # fmt: skip
    return dashboard(
        "gpuwarden / Pipeline health", UID,
        "The monitors monitored: scrape targets, exporter collectors, analyzer cycles and"
        " detectors, webhook delivery.",
        lay, [], ("pipeline",),
    )  # fmt: skip
