"""Fabric: NVLink per link and InfiniBand per port, traffic and error rates side by side."""

from __future__ import annotations

from grafanalib import core as g

from dashboards import names as n
from dashboards.panels import Layout, dashboard, query_variable, state_timeline, table
from dashboards.panels import timeseries as ts
from exporter import catalog as c

UID = "gpuwarden-fabric"
NODE = 'node=~"$node"'
LINK = "{{node}} GPU {{gpu}} link {{link}}"
PORT = "{{node}} {{device}}/{{port}}"
IB_ERRORS = "symbol_error|port_rcv_errors|link_error_recovery|port_xmit_discards|link_downed"


def build() -> g.Dashboard:
    lay = Layout()
    lay.row("NVLink")
    lay.add(ts("NVLink transmit per link", [(f"{n.NVLINK_TX_RATE}{{{NODE}}}", LINK)], "Bps"), 12, 8)  # fmt: skip
    lay.add(ts("NVLink receive per link", [(f"{n.NVLINK_RX_RATE}{{{NODE}}}", LINK)], "Bps"), 12, 8)  # fmt: skip
    lay.add(
        ts("NVLink errors per link",
           [(f"sum without (error_type) ({n.NVLINK_ERROR_RATE}{{{NODE}}})", LINK)], "cps",
           "CRC, replay and recovery errors together; NvlinkErrorRateHigh fires above 1/s."),
        12, 8,
    )  # fmt: skip
    lay.add(
        state_timeline("NVLinks down",
                       f"count by (node, gpu) ({c.NVLINK_UP.name}{{{NODE}}} == 0) or on() vector(0)",
                       "{{node}} GPU {{gpu}}", {0: ("all up", "green")}),
        12, 8,
    )  # fmt: skip
    lay.row("InfiniBand")
    lay.add(ts("IB transmit per port", [(f"{n.IB_TX_RATE}{{{NODE}}}", PORT)], "Bps"), 12, 8)
    lay.add(ts("IB receive per port", [(f"{n.IB_RX_RATE}{{{NODE}}}", PORT)], "Bps"), 12, 8)
    lay.add(
        ts("IB error counters per port",
           [(f'{n.IB_COUNTER_RATE}{{{NODE}, counter=~"{IB_ERRORS}"}}', PORT + " {{counter}}")],
           "cps", "Thresholds (REFERENCE.md §3): symbol_error 10/s, port_rcv_errors 10/s,"
           " link_error_recovery 5/min, port_xmit_discards 100/s."),
        12, 8,
    )  # fmt: skip
    lay.add(
        ts("IB transport errors per port (mlx5)",
           [(f"{n.IB_HW_COUNTER_RATE}{{{NODE}}}", PORT + " {{counter}}")], "cps"),
        12, 8,
    )  # fmt: skip
    lay.add(
        state_timeline("IB port state", f"{c.IB_PORT_STATE.name}{{{NODE}}}", PORT,
                       {1: ("down", "red"), 2: ("init", "orange"), 3: ("armed", "yellow"),
                        4: ("active", "green"), 5: ("active_defer", "green")}),
        12, 8,
    )  # fmt: skip
    lay.add(
        table("IB port rate vs expected",
              f"{c.IB_PORT_RATE.name}{{{NODE}}} * on (node, device) group_left (hca_type)"
              f" {c.IB_DEVICE_INFO.name}",
              "Bps", "Expected: the best rate the same HCA model reaches in the fleet"
              f" ({n.IB_EXPECTED_RATE})."),
        12, 8,
    )  # fmt: skip
    node = query_variable("node", "Node", f"label_values({c.GPU_INFO.name}, node)", True, True)
    return dashboard(
        "gpuwarden / Fabric", UID,
        "NVLink per link and InfiniBand per port: traffic, error rates and link state.",
        lay, [node], ("fabric",),
    )  # fmt: skip
