"""XID and memory health: XID events by GPU and number, ECC, row remapping, retired pages."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import names as n
from dashboards.panels import Layout, dashboard, query_variable, stat, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-xid-memory"
NODE = 'node=~"$node"'
ORANGE_FROM_1 = [("green", None), ("orange", 1.0)]


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(
        stat("XID events, last 24 h", f"sum({n.XID_INCREASE_24H}{{{NODE}}}) or vector(0)",
             "none", thresholds=ORANGE_FROM_1),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("GPUs with uncorrectable ECC (10 min)",
             f'count(sum by (node, gpu) ({n.ECC_RATE}{{{NODE}, error_type="uncorrected"}}) > 0)'
             " or vector(0)", "none", thresholds=[("green", None), ("red", 1.0)]),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Row remaps pending", f"count({c.GPU_ROW_REMAP_PENDING.name}{{{NODE}}} == 1) or vector(0)",
             "none", thresholds=ORANGE_FROM_1),
        6, 4,
    )  # fmt: skip
    lay.add(
        stat("Row remaps failed", f"count({c.GPU_ROW_REMAP_FAILED.name}{{{NODE}}} == 1) or vector(0)",
             "none", thresholds=[("green", None), ("red", 1.0)]),
        6, 4,
    )  # fmt: skip
    lay.add(
        ts("XID events per GPU (10 min windows)",
           [(f"sum by (node, gpu, xid) ({n.XID_INCREASE_10M}{{{NODE}}}) or on() vector(0)",
             "{{node}} GPU {{gpu}} XID {{xid}}")], "none"),
        24, 8,
    )  # fmt: skip
    lay.add(
        table("XIDs in the last 24 h by number",
              f"sum by (xid) ({n.XID_INCREASE_24H}{{{NODE}}}) or on() vector(0)", "none",
              "Meaning and recommended action per XID: analyzer/xid_catalog.yaml."),
        8, 8,
    )  # fmt: skip
    lay.add(
        table("XIDs in the last 24 h by GPU",
              f"sum by (node, gpu, xid) ({n.XID_INCREASE_24H}{{{NODE}}}) > 0 or on() vector(0)",
              "none"),
        16, 8,
    )  # fmt: skip
    lay.add(
        ts("Corrected ECC errors", [(f'sum by (node, gpu) ({n.ECC_RATE}{{{NODE}, error_type="corrected"}})',
                                     "{{node}} GPU {{gpu}}")], "cps"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Uncorrected ECC errors", [(f'sum by (node, gpu) ({n.ECC_RATE}{{{NODE}, error_type="uncorrected"}})',
                                       "{{node}} GPU {{gpu}}")], "cps"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Remapped rows", [(f"{c.GPU_REMAPPED_ROWS.name}{{{NODE}}} > 0 or on() vector(0)",
                              "{{node}} GPU {{gpu}} {{kind}}")], "none"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Retired pages (pre-Ampere)",
           [(f"sum by (node, gpu, cause) ({c.GPU_RETIRED_PAGES.name}{{{NODE}}}) or on() vector(0)",
             "{{node}} GPU {{gpu}} {{cause}}")], "none"),
        12, 8,
    )  # fmt: skip
    node = query_variable("node", "Node", f"label_values({c.GPU_INFO.name}, node)", True, True)
    return dashboard(
        "gpuwarden / XID and memory health", UID,
        "XID events from the kernel log by GPU and number, ECC error rates, row remapping and"
        " retired pages.",
        lay, [node], ("xid", "memory"),
    )  # fmt: skip
