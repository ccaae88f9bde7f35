"""InfinibandCollector over a DictSysfs: resets, bad files, missing trees, vanished devices."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from exporter.catalog import (
    IB_COUNTER,
    IB_COUNTER_RESETS,
    IB_DEVICE_INFO,
    IB_HW_COUNTER,
    IB_PORT_ERRORS,
    IB_PORT_RATE,
    IB_PORT_STATE,
    IB_TRANSMIT,
    Sample,
)
from exporter.collectors.infiniband import InfinibandCollector
from exporter.collectors.infiniband_parse import (
    parse_counter,
    parse_enum,
    parse_label,
    parse_rate,
)
from exporter.sources.sysfs import DictSysfs, DirSysfs

PORT = "class/infiniband/mlx5_0/ports/1"
AT = ("n1", "mlx5_0", "1")


def port_files(**counters: str) -> dict[str, str]:
    files = {
        "class/infiniband/mlx5_0/fw_ver": "28.39.1002\n",
        f"{PORT}/state": "4: ACTIVE\n",
        f"{PORT}/phys_state": "5: LinkUp\n",
        f"{PORT}/rate": "400 Gb/sec (4X NDR)\n",
        f"{PORT}/link_layer": "InfiniBand\n",
        f"{PORT}/hw_counters/out_of_sequence": "5\n",
    }
    files |= {f"{PORT}/counters/{k}": v for k, v in counters.items()}
    return files


def port_tree(**counters: str) -> DictSysfs:
    return DictSysfs(port_files(**counters))


def table(samples: list[Sample]) -> dict:
    return {(s.metric.name, s.label_values): s.value for s in samples}


def counter(name: str) -> tuple:
    return (IB_COUNTER.name, (*AT, name))


RESETS = (IB_COUNTER_RESETS.name, AT)
TRANSMIT = (IB_TRANSMIT.name, AT)


def test_a_counter_that_goes_down_is_a_reset_absorbed_and_counted_never_a_drop():
    fs = port_tree(symbol_error="100\n", port_xmit_data="1000\n")
    ib = InfinibandCollector(fs, "n1")
    first = table(ib.collect())
    fs.set(f"{PORT}/counters/symbol_error", "130\n")
    fs.set(f"{PORT}/counters/port_xmit_data", "1500\n")
    second = table(ib.collect())
    fs.set(f"{PORT}/counters/symbol_error", "7\n")  # driver reload: counters restart at 0
    fs.set(f"{PORT}/counters/port_xmit_data", "10\n")
    third = table(ib.collect())
    fs.set(f"{PORT}/counters/symbol_error", "9\n")
    fourth = table(ib.collect())
    assert [t[counter("symbol_error")] for t in (first, second, third, fourth)] == [
        100,
        130,
        137,
        139,
    ]
    assert [t[TRANSMIT] for t in (first, second, third)] == [4000, 6000, 6040]
    assert [t[RESETS] for t in (first, second, third, fourth)] == [0, 0, 2, 2]
    assert ib.read_errors.counts == {}


def test_resets_are_counted_per_port():
    fs = port_tree(symbol_error="100\n")
    fs.set("class/infiniband/mlx5_0/ports/2/counters/symbol_error", "50\n")
    ib = InfinibandCollector(fs, "n1")
    ib.collect()
    fs.set(f"{PORT}/counters/symbol_error", "1\n")
    got = table(ib.collect())
    assert got[RESETS] == 1
    assert got[(IB_COUNTER_RESETS.name, ("n1", "mlx5_0", "2"))] == 0


@pytest.mark.parametrize(
    "content",
    ["N/A\n", "\ufffd\ufffd\x00\x01", "", "-3\n", "12 34\n", "0x10\n", "١٢\n"],
    ids=["na", "binary", "empty", "negative", "two-numbers", "hex", "arabic-digits"],
)
def test_non_numeric_counter_skips_that_series_counts_it_and_keeps_the_rest(content):
    fs = port_tree(symbol_error=content, link_downed="2\n")
    ib = InfinibandCollector(fs, "n1")
    got = table(ib.collect())
    assert counter("symbol_error") not in got
    assert got[counter("link_downed")] == 2
    assert got[(IB_PORT_STATE.name, AT)] == 4
    assert got[(IB_HW_COUNTER.name, (*AT, "out_of_sequence"))] == 5
    assert ib.read_errors.counts == {"mlx5_0/1/counters/symbol_error": 1}


def test_unreadable_file_skips_that_series_counts_it_and_the_scrape_goes_on():
    fs = port_tree(symbol_error="3\n", link_downed="2\n")
    fs.fail(f"{PORT}/counters/symbol_error", PermissionError(13, "Permission denied"))
    fs.fail(f"{PORT}/rate", OSError(22, "Invalid argument"))  # rate_show returns -EINVAL
    ib = InfinibandCollector(fs, "n1")
    got = table(ib.collect())
    ib.collect()
    assert counter("symbol_error") not in got
    assert (IB_PORT_RATE.name, AT) not in got
    assert got[counter("link_downed")] == 2
    assert ib.read_errors.counts == {
        "mlx5_0/1/counters/symbol_error": 2,
        "mlx5_0/1/rate": 2,
    }


def test_the_port_error_sum_adds_the_error_counters_and_is_withheld_while_one_is_unreadable():
    fs = port_tree(symbol_error="3\n", link_downed="2\n", port_xmit_data="1000\n")
    fs.set(f"{PORT}/hw_counters/rnr_nak_retry_err", "4\n")
    ib = InfinibandCollector(fs, "n1")
    errors = (IB_PORT_ERRORS.name, AT)
    assert table(ib.collect())[errors] == 9  # not out_of_sequence, not the data counter
    fs.fail(f"{PORT}/counters/symbol_error", PermissionError(13, "Permission denied"))
    assert errors not in table(ib.collect())
    fs.heal(f"{PORT}/counters/symbol_error")
    fs.fail(f"{PORT}/counters", PermissionError(13, "Permission denied"))
    ib = InfinibandCollector(fs, "n1")
    assert errors not in table(ib.collect())


def test_an_unreadable_hw_counter_also_withholds_the_port_error_sum():
    fs = port_tree(symbol_error="3\n")
    fs.set(f"{PORT}/hw_counters/rnr_nak_retry_err", "4\n")
    fs.fail(f"{PORT}/hw_counters/rnr_nak_retry_err", OSError(5, "Input/output error"))
    got = table(InfinibandCollector(fs, "n1").collect())
    assert (IB_PORT_ERRORS.name, AT) not in got and got[counter("symbol_error")] == 3


def test_a_counter_that_vanished_after_listing_costs_its_series_and_the_error_sum_only():
    fs = port_tree(symbol_error="3\n", link_downed="2\n", port_xmit_discards="5\n")
    ib = InfinibandCollector(fs, "n1")
    assert table(ib.collect())[(IB_PORT_ERRORS.name, AT)] == 10
    fs.remove(f"{PORT}/counters/link_downed")  # still listed: the listing is cached
    got = table(ib.collect())
    assert counter("link_downed") not in got and (IB_PORT_ERRORS.name, AT) not in got
    assert got[counter("symbol_error")] == 3 and got[counter("port_xmit_discards")] == 5
    assert ib.read_errors.counts == {}  # a file gone is no read error


def test_a_counter_group_that_went_away_is_listed_afresh_and_the_sum_returns_without_it():
    fs = port_tree(symbol_error="3\n")
    fs.set(f"{PORT}/hw_counters/rnr_nak_retry_err", "4\n")
    ib = InfinibandCollector(fs, "n1")
    assert table(ib.collect())[(IB_PORT_ERRORS.name, AT)] == 7
    fs.remove(f"{PORT}/hw_counters")  # the whole group (a port reset under way)
    got = table(ib.collect())
    assert (IB_PORT_ERRORS.name, AT) not in got and got[counter("symbol_error")] == 3
    got = table(ib.collect())  # listed afresh: the port has no hw_counters now
    assert got[(IB_PORT_ERRORS.name, AT)] == 3


def test_unsupported_and_garbage_files_early_in_the_listing_do_not_stop_the_rest():
    fs = port_tree(aaa_na="N/A (no PMA)\n", aab_garbage="x\n", link_downed="2\n")
    fs.set(f"{PORT}/hw_counters/aaa_garbage", "?\n")
    fs.set(f"{PORT}/hw_counters/rnr_nak_retry_err", "4\n")
    got = table(InfinibandCollector(fs, "n1").collect())
    assert got[counter("link_downed")] == 2
    assert got[(IB_HW_COUNTER.name, (*AT, "rnr_nak_retry_err"))] == 4
    assert got[(IB_PORT_ERRORS.name, AT)] == 6  # garbage in files that are no error counters


def test_unlistable_counters_directory_costs_only_that_directory():
    fs = port_tree(symbol_error="3\n")
    fs.fail(f"{PORT}/counters", PermissionError(13, "Permission denied"))
    ib = InfinibandCollector(fs, "n1")
    got = table(ib.collect())
    assert counter("symbol_error") not in got
    assert got[(IB_HW_COUNTER.name, (*AT, "out_of_sequence"))] == 5
    assert ib.read_errors.counts == {"mlx5_0/1/counters": 1}


def test_garbage_in_an_identity_file_blanks_that_label_and_is_counted():
    fs = port_tree()
    fs.set("class/infiniband/mlx5_0/board_id", "MT_\x00\x01\n")
    ib = InfinibandCollector(fs, "n1")
    info = [s for s in ib.collect() if s.metric is IB_DEVICE_INFO]
    assert [s.labels for s in info] == [
        {
            "node": "n1",
            "device": "mlx5_0",
            "board_id": "",
            "fw_ver": "28.39.1002",
            "hca_type": "",
            "node_guid": "",
        }
    ]
    assert ib.read_errors.counts == {"mlx5_0/board_id": 1}


@pytest.mark.parametrize(
    "files",
    [{}, {"class/net/eth0/mtu": "1500"}],
    ids=["no-class-dir", "no-infiniband-dir"],
)
def test_a_node_without_infiniband_reports_nothing_and_no_error(files):
    ib = InfinibandCollector(DictSysfs(files), "n1")
    assert ib.collect() == []
    assert ib.read_errors.counts == {}


def test_an_empty_infiniband_directory_on_disk_reports_nothing(tmp_path):
    (tmp_path / "class/infiniband").mkdir(parents=True)
    ib = InfinibandCollector(DirSysfs(tmp_path), "n1")
    assert ib.collect() == []
    assert ib.read_errors.counts == {}


def test_a_device_that_vanishes_stops_reporting_without_an_error():
    fs = port_tree(symbol_error="3\n")
    ib = InfinibandCollector(fs, "n1")
    assert ib.collect()
    fs.remove("class/infiniband/mlx5_0")
    assert ib.collect() == []
    assert ib.read_errors.counts == {}


def test_a_device_that_vanishes_between_listing_and_reading_is_not_an_error():
    class Vanishing(DictSysfs):
        def listdir(self, path: str) -> list[str]:
            names = super().listdir(path)
            if path == "class/infiniband":
                self.remove("class/infiniband/mlx5_0")
            return names

    vanishing = Vanishing(port_files(symbol_error="3\n"))
    ib = InfinibandCollector(vanishing, "n1")
    assert ib.collect() == []
    assert ib.read_errors.counts == {}


def test_an_unreadable_class_directory_is_counted_not_raised():
    fs = port_tree()
    fs.fail("class/infiniband", PermissionError(13, "Permission denied"))
    ib = InfinibandCollector(fs, "n1")
    assert ib.collect() == []
    assert ib.read_errors.counts == {"class/infiniband": 1}


@pytest.mark.parametrize(
    ("text", "bytes_per_second"),
    [
        ("400 Gb/sec (4X NDR)\n", 50e9),
        ("200 Gb/sec (4X HDR)\n", 25e9),
        ("100 Gb/sec (2X HDR)\n", 12.5e9),
        ("100 Gb/sec (4X EDR)\n", 12.5e9),
        ("56 Gb/sec (4X FDR)\n", 7e9),
        ("2.5 Gb/sec (1X SDR)\n", 0.3125e9),
        ("10 Gb/sec (4X)\n", 1.25e9),  # rate_show prints no speed name for SDR
        ("800 Gb/sec (4X XDR)\n", 100e9),
        ("25 Gb/sec (1X EDR)\n", 3.125e9),  # RoCE
        ("0 Gb/sec\n", 0.0),
        ("100 Mb/sec\n", 12.5e6),
    ],
)
def test_rate_text_becomes_bytes_per_second(text, bytes_per_second):
    assert parse_rate(text) == bytes_per_second


@pytest.mark.parametrize("text", ["", "N/A", "fast", "Gb/sec (4X NDR)", "-1 Gb/sec"])
def test_rate_text_that_is_not_a_rate_is_rejected(text):
    with pytest.raises(ValueError, match="not a port rate"):
        parse_rate(text)


@pytest.mark.parametrize(
    ("text", "value"),
    [("4: ACTIVE\n", 4), ("1: DOWN", 1), ("5: LinkUp\n", 5), ("2: Polling", 2), ("3\n", 3)],
)
def test_state_text_becomes_its_ibta_number(text, value):
    assert parse_enum(text) == value


@pytest.mark.parametrize("text", ["", "ACTIVE", ": 4", "4 ACTIVE"])
def test_state_text_without_a_leading_number_is_rejected(text):
    with pytest.raises(ValueError, match="not an enum"):
        parse_enum(text)


def test_counter_and_label_parsers_accept_kernel_output_and_reject_garbage():
    assert parse_counter("18446744073709551615\n") == 2**64 - 1
    assert parse_label("InfiniBand\n") == "InfiniBand"
    with pytest.raises(ValueError):
        parse_label("two\nlines\n")
    with pytest.raises(ValueError):
        parse_counter("1e5")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2**40), min_size=1, max_size=12))
def test_exported_counters_never_go_down_whatever_the_raw_sysfs_values_do(raws):
    fs = port_tree(symbol_error=f"{raws[0]}\n")
    ib = InfinibandCollector(fs, "n1")
    exported, resets = [], []
    for raw in raws:
        fs.set(f"{PORT}/counters/symbol_error", f"{raw}\n")
        got = table(ib.collect())
        exported.append(got[counter("symbol_error")])
        resets.append(got[RESETS])
    growth = [b - a for a, b in pairwise(exported)]
    # Growth is the raw increase, or after a drop the whole new raw value (counting from 0).
    expected = [b - a if b >= a else b for a, b in pairwise(raws)]
    assert growth == expected
    assert resets[-1] == sum(1 for a, b in pairwise(raws) if b < a)


def test_unlistable_ports_directory_keeps_the_device_info_and_counts_the_error():
    fs = port_tree(symbol_error="3\n")
    fs.fail("class/infiniband/mlx5_0/ports", OSError(5, "Input/output error"))
    ib = InfinibandCollector(fs, "n1")
    assert [s.metric for s in ib.collect()] == [IB_DEVICE_INFO]
    assert ib.read_errors.counts == {"mlx5_0/ports": 1}


def test_an_unreadable_counters_ext_file_costs_that_series_only():
    fs = port_tree(symbol_error="3\n", port_xmit_data="10\n")
    fs.set(f"{PORT}/counters_ext/port_xmit_data_64", "100\n")
    fs.fail(f"{PORT}/counters_ext/port_xmit_data_64", OSError(5, "Input/output error"))
    got = table(InfinibandCollector(fs, "n1").collect())
    assert got[(IB_PORT_ERRORS.name, AT)] == 3  # a data counter: the error sum stands
    assert got[TRANSMIT] == 40  # the 32-bit counter stands in
