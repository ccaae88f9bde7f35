"""GPU detail: one GPU's identity, load, thermals, clocks, throttling, memory health, PCIe."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import names as n
from dashboards.panels import Layout, dashboard, query_variable, stat, state_timeline, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-gpu"
SEL = 'node=~"$node", gpu=~"$gpu"'
RED_FROM_1 = [("green", None), ("red", 1.0)]


def build() -> g.Dashboard:
    lay = Layout()
    lay.add(
        table("Identity", f"{c.GPU_INFO.name}{{{SEL}}}", "none", hide=("Value",)),
        24, 4,
    )  # fmt: skip
    lay.add(stat("Up", f"min({c.GPU_UP.name}{{{SEL}}})", "none", thresholds=[("red", None), ("green", 1.0)]), 4, 4)  # fmt: skip
    lay.add(stat("Row remap pending", f"max({c.GPU_ROW_REMAP_PENDING.name}{{{SEL}}})", "none", thresholds=RED_FROM_1), 4, 4)  # fmt: skip
    lay.add(stat("Row remap failed", f"max({c.GPU_ROW_REMAP_FAILED.name}{{{SEL}}})", "none", thresholds=RED_FROM_1), 4, 4)  # fmt: skip
    lay.add(
        stat("Driver recovery action", f"max({c.GPU_RECOVERY_ACTION.name}{{{SEL}}})", "none",
             "0 none, 1 GPU reset, 2 node reboot, 3 drain P2P, 4 drain and reset.", RED_FROM_1),
        4, 4,
    )  # fmt: skip
    lay.add(stat("PCIe generation", f"min({c.GPU_PCIE_GENERATION.name}{{{SEL}}})", "none"), 4, 4)  # fmt: skip
    lay.add(stat("PCIe width", f"min({c.GPU_PCIE_WIDTH.name}{{{SEL}}})", "none"), 4, 4)
    lay.add(
        ts("Utilisation", [(f"{c.GPU_UTILIZATION.name}{{{SEL}}}", "compute"),
                           (f"{c.GPU_MEMORY_UTILIZATION.name}{{{SEL}}}", "memory")],
           "percentunit"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Temperature", [(f"{c.GPU_TEMPERATURE.name}{{{SEL}}}", "core"),
                           (f"{c.GPU_MEMORY_TEMPERATURE.name}{{{SEL}}}", "memory")], "celsius"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Power", [(f"{c.GPU_POWER.name}{{{SEL}}}", "draw"),
                     (f"{c.GPU_POWER_LIMIT.name}{{{SEL}}}", "limit")], "watt"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Clocks", [(f"{c.GPU_SM_CLOCK.name}{{{SEL}}}", "SM"),
                      (f"{c.GPU_SM_CLOCK_MAX.name}{{{SEL}}}", "SM max"),
                      (f"{c.GPU_MEMORY_CLOCK.name}{{{SEL}}}", "memory")], "hertz"),
        12, 8,
    )  # fmt: skip
    lay.add(
        state_timeline("Clock throttle reasons", f"{c.GPU_THROTTLE.name}{{{SEL}}}", "{{reason}}",
                       {0: ("off", "transparent"), 1: ("active", "orange")}),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("Memory", [(f"{c.GPU_MEMORY_USED.name}{{{SEL}}}", "used"),
                      (f"{c.GPU_MEMORY_TOTAL.name}{{{SEL}}}", "total")], "bytes"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("ECC error rate", [(f"{n.ECC_RATE}{{{SEL}}}", "{{error_type}} {{counter_type}}")],
           "cps"),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("PCIe replays and remapped rows",
           [(f"{n.PCIE_REPLAY_RATE}{{{SEL}}}", "PCIe replays/s"),
            (f"{c.GPU_REMAPPED_ROWS.name}{{{SEL}}}", "remapped rows ({{kind}})")], "short"),
        12, 8,
    )  # fmt: skip
    # AMD Instinct only (empty on NVIDIA GPUs): RAS errors per hardware block, XGMI per link
    ras = c.GPU_RAS_ERRORS.name
    lay.add(
        ts("RAS errors per block, last hour (AMD)",
           [(f"increase({ras}{{{SEL}}}[1h])", "{{block}} {{error_type}}")], "short",
           "umc is HBM; deferred: poisoned data caught before it was consumed."),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("XGMI traffic per link (AMD)",
           [(f"rate({c.GPU_XGMI_TRANSMIT.name}{{{SEL}}}[5m])", "link {{link}} tx"),
            (f"rate({c.GPU_XGMI_RECEIVE.name}{{{SEL}}}[5m])", "link {{link}} rx")],
           "Bps", "A link flat while the GPU's other links move is a lost link."),
        12, 8,
    )  # fmt: skip
    node = query_variable("node", "Node", f"label_values({c.GPU_INFO.name}, node)")
    gpu = query_variable("gpu", "GPU", f'label_values({c.GPU_INFO.name}{{node=~"$node"}}, gpu)')
    return dashboard(
        "gpuwarden / GPU detail", UID,
        "One GPU: identity, load, temperatures, power, clocks and throttling, memory and ECC,"
        " PCIe link.",
        lay, [node, gpu], ("gpu",),
    )  # fmt: skip
