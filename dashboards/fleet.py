"""Fleet overview: is the fleet healthy, what is broken, what is out of service, how busy."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import names as n
from dashboards.panels import Layout, dashboard, query_variable, stat, state_timeline, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-fleet"
NODE = 'node=~"$node"'
HEALTH = {0: ("healthy", "green"), 1: ("degraded", "yellow"), 2: ("failing", "red")}


def node_health() -> str:
    """Per node: 2 if a GPU is lost or a critical alert fires, 1 on a warning or finding."""
    return f"""max by (node) (
  2 * (1 - {c.GPU_UP.name}{{{NODE}}})
  or 2 * {n.ALERTS}{{alertstate="firing", severity="critical", {NODE}}}
  or {n.ALERTS}{{alertstate="firing", severity="warning", {NODE}}}
  or clamp_max({c.FINDING.name}{{{NODE}}}, 1)
)"""


def storage_row(lay: Layout) -> None:
    """Checkpoint mounts as every node's probe sees them (alerts/storage.rules.yml): how many
    nodes fail, how slow each probe step is on the slowest node, failures over time."""
    up, dur, probes = c.STORAGE_PROBE_UP.name, c.STORAGE_PROBE_DURATION.name, c.STORAGE_PROBES.name
    lay.row("Checkpoint storage")
    lay.add(
        ts("Nodes failing a probe, per mount",
           [(f"count by (mount) ({up}{{{NODE}}} == 0) or sum by (mount) ({up}{{{NODE}}}) * 0",
             "{{mount}}")], "none",
           "Nodes whose last probe (stat, write, fsync, read) of the mount failed or hung. Many"
           " nodes at once is the storage, not the nodes (CheckpointStorageDegraded)."),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Probe latency per mount and step (slowest node)",
           [(f"max by (mount, op) ({dur}{{{NODE}}})", "{{mount}} {{op}}")], "s",
           "Seconds each probe step took on the slowest node; fsync over 2 s for 10 minutes on"
           " several nodes is CheckpointStorageSlow. A hung probe has no duration."),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Probe failures per mount",
           [(f'sum by (mount, outcome) (rate({probes}{{{NODE}, outcome!="ok"}}[5m]))'
             f" or sum by (mount) (rate({probes}{{{NODE}}}[5m])) * 0", "{{mount}} {{outcome}}")],
           "ops", "Failed (error) and hung probes per second, all nodes together."),
        8, 8,
    )  # fmt: skip
    lay.add(
        table("Nodes whose last probe failed",
              f"sum by (node, mount) ({up}{{{NODE}}} == 0) or on() vector(0)", "none",
              "One row per node and mount that failed its last probe; a single 0 row means"
              " none."),
        24, 6,
    )  # fmt: skip


def inventory() -> str:
    """GPUs counted per (rack, model, enforced power limit in watts)."""
    limits = (f"{c.GPU_POWER_LIMIT.name}{{{NODE}}} * on(node, gpu) group_left(name)"
              f" {c.GPU_INFO.name}{{{NODE}}}")  # fmt: skip
    return f'count_values by (rack, name) ("power_limit_w", {limits})'


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(stat("Nodes reporting", f"count(count by (node) ({c.GPU_INFO.name}{{{NODE}}})) or vector(0)", "none"), 4, 4)  # fmt: skip
    lay.add(stat("GPUs up", f"sum({c.GPU_UP.name}{{{NODE}}}) or vector(0)", "none"), 4, 4)
    lay.add(
        stat("GPUs lost", f"count({c.GPU_UP.name}{{{NODE}}} == 0) or vector(0)", "none",
             thresholds=[("green", None), ("red", 1)]),
        4, 4,
    )  # fmt: skip
    lay.add(
        stat("Active findings", f"count({c.FINDING.name}{{{NODE}}} == 1) or vector(0)", "none",
             thresholds=[("green", None), ("orange", 1)]),
        4, 4,
    )  # fmt: skip
    lay.add(
        stat("Quarantined nodes", f"sum({c.REMEDIATION_NODES_QUARANTINED.name}) or vector(0)",
             "none", thresholds=[("green", None), ("orange", 1)]),
        4, 4,
    )  # fmt: skip
    lay.add(
        stat("Firing alerts", f'count({n.ALERTS}{{alertstate="firing"}}) or vector(0)', "none",
             thresholds=[("green", None), ("red", 1)]),
        4, 4,
    )  # fmt: skip
    lay.add(
        state_timeline("Node health map", node_health(), "{{node}}", HEALTH,
                       "0 healthy, 1 a warning alert or analyzer finding, 2 a lost GPU or a"
                       " critical alert."),
        24, 10,
    )  # fmt: skip
    lay.add(
        table(
            "Active findings",
            f"sum by (node, subject, kind, severity, action, detector)"
            f" ({c.FINDING.name}{{{NODE}}} == 1) or on() vector(0)",
            "none",
            "One row per analyzer finding; a single 0 row means none.",
        ),
        12, 8,
    )  # fmt: skip
    lay.add(
        table(
            "Firing alerts by node",
            f'count by (node, alertname, severity) ({n.ALERTS}{{alertstate="firing"}})'
            " or on() vector(0)",
            "none",
        ),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Quarantined nodes by state",
           [(f"sum by (state) ({c.REMEDIATION_NODES_QUARANTINED.name}) or on() vector(0)",
             "{{state}}")], "none"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("GPU utilisation per node",
           [(f"avg by (node) ({c.GPU_UTILIZATION.name}{{{NODE}}})", "{{node}}")],
           "percentunit"),
        8, 8,
    )  # fmt: skip
    lay.add(
        ts("Fleet power draw", [(f"sum({c.GPU_POWER.name}{{{NODE}}})", "all GPUs")], "watt"),
        8, 8,
    )  # fmt: skip
    storage_row(lay)
    lay.add(table("Inventory: GPU models and power limits per rack", inventory(), "none",
                  "GPUs per (rack, model, enforced power limit): a rack at a lower limit than"
                  " its model's is an administrator's cap (configuration, not a fault). `rack`"
                  " is a target label from the scrape config (file_sd, or the node label"
                  " topology.gpuwarden.io/rack relabelled); without it the rows are per model."
                  " `gpuwarden inventory` prints the same per node, with the spec.", hide=("uuid",)),
            24, 8)  # fmt: skip
    node = query_variable("node", "Node", f"label_values({c.GPU_INFO.name}, node)", True, True)
    return dashboard(
        "gpuwarden / Fleet overview", UID,
        "Health of every node at a glance: lost GPUs, findings, alerts, quarantines and load.",
        lay, [node], ("fleet",),
    )  # fmt: skip
