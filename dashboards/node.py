"""Node detail: every GPU and InfiniBand port of one node, its findings and its jobs."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import names as n
from dashboards.panels import Layout, dashboard, query_variable, state_timeline, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-node"
NODE = 'node=~"$node"'
GPU_LEGEND = "GPU {{gpu}}"


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(
        state_timeline("GPU up", f"{c.GPU_UP.name}{{{NODE}}}", "GPU {{gpu}} {{reason}}",
                       {1: ("up", "green"), 0: ("lost", "red")}),
        24, 6,
    )  # fmt: skip
    lay.row("GPUs")
    lay.add(ts("Utilisation", [(f"{c.GPU_UTILIZATION.name}{{{NODE}}}", GPU_LEGEND)], "percentunit"), 12, 8)  # fmt: skip
    lay.add(ts("Temperature", [(f"{c.GPU_TEMPERATURE.name}{{{NODE}}}", GPU_LEGEND)], "celsius"), 12, 8)  # fmt: skip
    lay.add(
        ts("Power draw", [(f"{c.GPU_POWER.name}{{{NODE}}}", GPU_LEGEND),
                          (f"max({c.GPU_POWER_LIMIT.name}{{{NODE}}})", "limit")], "watt"),
        12, 8,
    )  # fmt: skip
    lay.add(ts("Memory used", [(f"{c.GPU_MEMORY_USED.name}{{{NODE}}}", GPU_LEGEND)], "bytes"), 12, 8)  # fmt: skip
    lay.add(ts("SM clock", [(f"{c.GPU_SM_CLOCK.name}{{{NODE}}}", GPU_LEGEND)], "hertz"), 12, 8)
    lay.add(
        ts("XID events (10 min windows)",
           [(f"sum by (gpu, xid) ({n.XID_INCREASE_10M}{{{NODE}}}) or on() vector(0)",
             "GPU {{gpu}} XID {{xid}}")], "none"),
        12, 8,
    )  # fmt: skip
    lay.row("InfiniBand")
    lay.add(
        ts("Port traffic", [(f"{n.IB_RX_RATE}{{{NODE}}}", "{{device}}/{{port}} rx"),
                            (f"{n.IB_TX_RATE}{{{NODE}}}", "{{device}}/{{port}} tx")], "Bps"),
        12, 8,
    )  # fmt: skip
    lay.add(
        state_timeline("Port state", f"{c.IB_PORT_STATE.name}{{{NODE}}}", "{{device}}/{{port}}",
                       {1: ("down", "red"), 2: ("init", "orange"), 3: ("armed", "yellow"),
                        4: ("active", "green"), 5: ("active_defer", "green")}),
        12, 8,
    )  # fmt: skip
    lay.row("Findings and jobs")
    lay.add(
        table("Active findings on this node",
              f"sum by (subject, kind, severity, action, detector)"
              f" ({c.FINDING.name}{{{NODE}}} == 1) or on() vector(0)", "none"),
        12, 8,
    )  # fmt: skip
    lay.add(
        table("Jobs on this node's GPUs",
              f"sum by (gpu, job_id, scheduler) ({c.GPU_ALLOCATION_INFO.name}{{{NODE}}})"
              " or on() vector(0)", "none",
              "From the scheduler's prolog/epilog map (--job-map-dir); 0 when no job is known."),
        12, 8,
    )  # fmt: skip
    node = query_variable("node", "Node", f"label_values({c.GPU_INFO.name}, node)")
    return dashboard(
        "gpuwarden / Node detail", UID,
        "One node: its GPUs (load, heat, power, memory, XIDs), InfiniBand ports, findings and"
        " jobs.",
        lay, [node], ("node",),
    )  # fmt: skip
