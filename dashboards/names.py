"""Series names the dashboards read that are not in the metric catalogue.

Recording rules come from alerts/*.rules.yml (the alerts and dashboards share them; a test
fails when one named here is not recorded there). ``ALERTS`` is Prometheus's own series of
pending and firing alerts.
"""

from __future__ import annotations

# alerts/xid.rules.yml
XID_INCREASE_10M = "gpuwarden:gpu_xid_errors:increase10m"
XID_INCREASE_24H = "gpuwarden:gpu_xid_errors:increase24h"
# alerts/gpu.rules.yml
THROTTLE_AVG_10M = "gpuwarden:gpu_clock_throttle_active:avg10m"
PCIE_REPLAY_RATE = "gpuwarden:gpu_pcie_replay_errors:rate5m"
# alerts/memory.rules.yml
ECC_RATE = "gpuwarden:gpu_ecc_errors:rate5m"
# alerts/nvlink.rules.yml
NVLINK_ERROR_RATE = "gpuwarden:nvlink_errors:rate5m"
NVLINK_TX_RATE = "gpuwarden:nvlink_transmit_bytes:rate5m"
NVLINK_RX_RATE = "gpuwarden:nvlink_receive_bytes:rate5m"
# alerts/infiniband.rules.yml
IB_COUNTER_RATE = "gpuwarden:infiniband_port_counters:rate5m"
IB_HW_COUNTER_RATE = "gpuwarden:infiniband_port_hw_counters:rate5m"
IB_TX_RATE = "gpuwarden:infiniband_port_transmit_bytes:rate5m"
IB_RX_RATE = "gpuwarden:infiniband_port_receive_bytes:rate5m"
IB_EXPECTED_RATE = "gpuwarden:infiniband_port_rate:expected_bytes_per_second"
# alerts/pipeline.rules.yml
COMPONENT_UP = "gpuwarden:up:by_component"

# Prometheus built-ins
ALERTS = "ALERTS"
SCRAPE_DURATION = "scrape_duration_seconds"

RECORDED = frozenset(
    {
        XID_INCREASE_10M,
        XID_INCREASE_24H,
        THROTTLE_AVG_10M,
        PCIE_REPLAY_RATE,
        ECC_RATE,
        NVLINK_ERROR_RATE,
        NVLINK_TX_RATE,
        NVLINK_RX_RATE,
        IB_COUNTER_RATE,
        IB_HW_COUNTER_RATE,
        IB_TX_RATE,
        IB_RX_RATE,
        IB_EXPECTED_RATE,
        COMPONENT_UP,
    }
)
EXTERNAL = frozenset({ALERTS, SCRAPE_DURATION, "alertmanager_notifications_failed_total"})
AM_NOTIFICATIONS_FAILED = "alertmanager_notifications_failed_total"
