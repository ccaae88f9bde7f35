"""The recorded sysfs tree under fixtures/sys, read through DirSysfs, checked value by value."""

from __future__ import annotations

from pathlib import Path

from exporter.catalog import (
    IB_COUNTER,
    IB_COUNTER_RESETS,
    IB_DEVICE_INFO,
    IB_ERROR_COUNTERS,
    IB_HW_COUNTER,
    IB_PORT_ERRORS,
    IB_PORT_INFO,
    IB_PORT_PHYS_STATE,
    IB_PORT_RATE,
    IB_PORT_STATE,
    IB_RECEIVE,
    IB_TRANSMIT,
    Sample,
)
from exporter.collectors.infiniband import InfinibandCollector
from exporter.exposition import render
from exporter.sources.sysfs import DirSysfs
from tests.realcomp import promtool

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "sys"
NODE = "gpu-node-001"

MLX5_0_1_COUNTERS = {
    "VL15_dropped": 0,
    "excessive_buffer_overrun_errors": 0,
    "link_downed": 1,
    "link_error_recovery": 2,
    "local_link_integrity_errors": 0,
    "multicast_rcv_packets": 18342,
    "multicast_xmit_packets": 9120,
    "port_rcv_constraint_errors": 0,
    "port_rcv_errors": 3,
    "port_rcv_packets": 1502938812,
    "port_rcv_remote_physical_errors": 0,
    "port_rcv_switch_relay_errors": 0,
    "port_xmit_constraint_errors": 0,
    "port_xmit_discards": 12,
    "port_xmit_packets": 1498211003,
    "port_xmit_wait": 5830221,
    "symbol_error": 417,
    "unicast_rcv_packets": 1502920470,
    "unicast_xmit_packets": 1498201883,
}
MLX5_0_1_HW_COUNTERS = {
    "duplicate_request": 0,
    "implied_nak_seq_err": 0,
    "local_ack_timeout_err": 4,
    "np_cnp_sent": 0,
    "np_ecn_marked_roce_packets": 0,
    "out_of_buffer": 0,
    "out_of_sequence": 17,
    "packet_seq_err": 2,
    "req_cqe_error": 1,
    "req_cqe_flush_error": 9,
    "req_remote_access_errors": 0,
    "req_remote_invalid_request": 0,
    "resp_cqe_error": 0,
    "resp_cqe_flush_error": 0,
    "resp_local_length_error": 0,
    "resp_remote_access_errors": 0,
    "rnr_nak_retry_err": 0,
    "roce_adp_retrans": 0,
    "roce_slow_restart": 0,
    "rp_cnp_handled": 0,
    "rx_atomic_requests": 0,
    "rx_read_requests": 30125,
    "rx_write_requests": 2210387,
}
MLX5_0_2_COUNTERS = {
    "link_downed": 7,
    "link_error_recovery": 0,
    "port_rcv_errors": 0,
    "port_rcv_packets": 0,
    "port_xmit_discards": 0,
    "port_xmit_packets": 0,
    "symbol_error": 65535,
}
MLX5_1_1_COUNTERS = {
    "port_rcv_packets": 41000000,
    "port_xmit_packets": 40000000,
    "port_xmit_discards": 0,
}
MLX5_1_1_HW_COUNTERS = {
    "np_cnp_sent": 5210,
    "np_ecn_marked_roce_packets": 5305,
    "out_of_buffer": 0,
    "out_of_sequence": 3,
    "rnr_nak_retry_err": 0,
    "roce_adp_retrans": 12,
    "roce_adp_retrans_to": 1,
    "roce_slow_restart": 2,
    "roce_slow_restart_cnps": 6,
    "roce_slow_restart_trans": 0,
    "rp_cnp_handled": 4882,
    "rp_cnp_ignored": 0,
}


def _port(device: str, port: str, layer: str, state: int, phys: int, rate: float) -> dict:
    at = (NODE, device, port)
    return {
        (IB_PORT_INFO.name, (*at, layer)): 1,
        (IB_PORT_STATE.name, at): state,
        (IB_PORT_PHYS_STATE.name, at): phys,
        (IB_PORT_RATE.name, at): rate,
        (IB_COUNTER_RESETS.name, at): 0,
    }


def _counters(device: str, port: str, counters: dict, hw: dict) -> dict:
    at = (NODE, device, port)
    out = {(IB_COUNTER.name, (*at, k)): v for k, v in counters.items()}
    out |= {(IB_HW_COUNTER.name, (*at, k)): v for k, v in hw.items()}
    both = {**counters, **hw}
    out[(IB_PORT_ERRORS.name, at)] = sum(v for k, v in both.items() if k in IB_ERROR_COUNTERS)
    return out


def expected() -> dict:
    exp: dict = {
        (
            IB_DEVICE_INFO.name,
            (NODE, "mlx5_0", "MT_0000000838", "28.39.1002", "MT4129", "946d:ae03:00f1:2e40"),
        ): 1,
        (
            IB_DEVICE_INFO.name,
            (NODE, "mlx5_1", "MT_0000000359", "22.36.1010", "MT4125", "b83f:d203:0098:7a12"),
        ): 1,
    }
    # 400 Gb/s NDR = 50 GB/s; a disabled port still reports its SDR fallback of 10 Gb/s.
    exp |= _port("mlx5_0", "1", "InfiniBand", 4, 5, 50e9)
    exp |= _port("mlx5_0", "2", "InfiniBand", 1, 3, 1.25e9)
    exp |= _port("mlx5_1", "1", "Ethernet", 4, 5, 12.5e9)
    exp |= _counters("mlx5_0", "1", MLX5_0_1_COUNTERS, MLX5_0_1_HW_COUNTERS)
    exp |= _counters("mlx5_0", "2", MLX5_0_2_COUNTERS, {})
    exp |= _counters("mlx5_1", "1", MLX5_1_1_COUNTERS, MLX5_1_1_HW_COUNTERS)
    # Data counters are 4-byte words in sysfs; exported as bytes.
    exp[(IB_TRANSMIT.name, (NODE, "mlx5_0", "1"))] = 798123456789 * 4
    exp[(IB_RECEIVE.name, (NODE, "mlx5_0", "1"))] = 812934877123 * 4
    exp[(IB_TRANSMIT.name, (NODE, "mlx5_0", "2"))] = 0
    exp[(IB_RECEIVE.name, (NODE, "mlx5_0", "2"))] = 0
    exp[(IB_TRANSMIT.name, (NODE, "mlx5_1", "1"))] = 2400000000 * 4
    exp[(IB_RECEIVE.name, (NODE, "mlx5_1", "1"))] = 2500000000 * 4
    return exp


def as_table(samples: list[Sample]) -> dict:
    table = {(s.metric.name, s.label_values): s.value for s in samples}
    assert len(table) == len(samples), "a series was emitted twice"
    return table


def test_fixture_tree_yields_exactly_the_expected_series_value_by_value():
    collector = InfinibandCollector(DirSysfs(FIXTURE), NODE)
    got = as_table(collector.collect())
    exp = expected()
    assert sorted(set(got) - set(exp)) == []
    assert sorted(set(exp) - set(got)) == []
    for key, value in exp.items():
        assert got[key] == value, key
    assert collector.read_errors.counts == {}


def test_hw_counters_lifespan_setting_is_not_exported_as_a_counter():
    got = as_table(InfinibandCollector(DirSysfs(FIXTURE), NODE).collect())
    assert not [k for k in got if k[0] == IB_HW_COUNTER.name and k[1][-1] == "lifespan"]


def test_rendered_fixture_scrape_passes_promtool_check_metrics():
    body = render(InfinibandCollector(DirSysfs(FIXTURE), NODE).collect())
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f'{IB_TRANSMIT.name}{{node="{NODE}",device="mlx5_0",port="1"}}'.encode() in body
