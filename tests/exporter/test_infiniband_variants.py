"""Driver variants of InfiniBand sysfs (fixtures/sys-variants): mlx4's counters_ext, a down port
that reads "0 GB/sec", and a device without a PMA whose counters read "N/A (no PMA)"."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.catalog import (
    IB_COUNTER,
    IB_HW_COUNTER,
    IB_PORT_RATE,
    IB_PORT_STATE,
    IB_RECEIVE,
    IB_TRANSMIT,
    Sample,
)
from exporter.collectors.infiniband import InfinibandCollector
from exporter.collectors.infiniband_parse import UnsupportedCounter, parse_counter, parse_rate
from exporter.sources.sysfs import DirSysfs

TREE = Path(__file__).resolve().parents[2] / "fixtures" / "sys-variants"


def _table(samples: list[Sample]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.metric.name, s.label_values[1:]): s.value for s in samples}


def _collect() -> tuple[InfinibandCollector, dict[tuple[str, tuple[str, ...]], float]]:
    ib = InfinibandCollector(DirSysfs(TREE), "n1")
    return ib, _table(ib.collect())


def test_mlx4_data_comes_from_the_64_bit_counters_ext_not_the_saturated_32_bit_ones() -> None:
    _, got = _collect()
    assert got[(IB_TRANSMIT.name, ("mlx4_0", "1"))] == 98765432100 * 4
    assert got[(IB_RECEIVE.name, ("mlx4_0", "1"))] == 12345678900 * 4
    assert got[(IB_COUNTER.name, ("mlx4_0", "1", "port_unicast_rcv_packets"))] == 1990000
    assert got[(IB_COUNTER.name, ("mlx4_0", "1", "symbol_error"))] == 0


def test_a_down_port_reading_0_gb_per_sec_has_rate_zero_and_no_read_error() -> None:
    ib, got = _collect()
    assert got[(IB_PORT_RATE.name, ("mlx5_4", "1"))] == 0
    assert got[(IB_PORT_STATE.name, ("mlx5_4", "1"))] == 1
    assert (IB_HW_COUNTER.name, ("mlx5_4", "1", "lifespan")) not in got
    assert not [w for w in ib.read_errors.counts if w.startswith("mlx5_4")]


def test_no_pma_counters_are_absent_not_errors_and_hw_counters_still_report() -> None:
    ib, got = _collect()
    rxe = [k for k in got if k[0] in (IB_COUNTER.name, IB_TRANSMIT.name) and k[1][0] == "rxe0"]
    assert rxe == []
    assert got[(IB_HW_COUNTER.name, ("rxe0", "1", "rcvd_seq_err"))] == 2
    ib.collect()  # and not on any later cycle either
    assert dict(ib.read_errors.counts) == {}


def test_the_unsupported_and_rate_parsers_accept_only_the_kernels_spellings() -> None:
    assert parse_rate("0 GB/sec\n") == 0
    assert parse_rate("400 Gb/sec (4X NDR)\n") == 50e9
    with pytest.raises(UnsupportedCounter):
        parse_counter("N/A (no PMA)\n")
    for bad in ("N/A\n", "n/a (no pma)\n"):  # garbage, not the kernel's marker: an error
        with pytest.raises(ValueError) as caught:
            parse_counter(bad)
        assert not isinstance(caught.value, UnsupportedCounter)
