"""RoCE ports' PFC pause counters: ethtool statistics read through the ioctl (no ethtool
process), recorded mlx5 outputs (fixtures/roce/ORIGIN.md), the collector over a RoCE sysfs
port, and the kernel's real answer on this machine's own interfaces."""

from __future__ import annotations

import errno
import os
import sys
from pathlib import Path

import pytest

from exporter.catalog import (
    IB_HW_COUNTER,
    IB_PORT_INFO,
    ROCE_PFC_PAUSE_FRAMES,
    ROCE_PFC_PAUSE_SECONDS,
    ROCE_PFC_STORM_EVENTS,
    Sample,
)
from exporter.collectors.infiniband import InfinibandCollector
from exporter.collectors.roce_pfc import RocePfcCollector
from exporter.exposition import render
from exporter.sources.ethtool import FakeEthtool, IoctlEthtool, parse_ethtool_s
from exporter.sources.sysfs import DictSysfs, DirSysfs
from tests.realcomp import promtool

ROCE = Path(__file__).resolve().parents[2] / "fixtures" / "roce"
IB_TREE = Path(__file__).resolve().parents[2] / "fixtures" / "sys"
CX6 = parse_ethtool_s((ROCE / "ethtool" / "mlx5-cx6dx-ens1f0np0.txt").read_text())


def _table(samples: list[Sample]) -> dict[tuple[str, tuple[str, ...]], float]:
    return {(s.metric.name, s.label_values[1:]): s.value for s in samples}


def _collector(ethtool: FakeEthtool | None = None) -> RocePfcCollector:
    fake = ethtool or FakeEthtool({"ens1f0np0": CX6})
    return RocePfcCollector(DirSysfs(ROCE / "sys"), fake, "n1")


def test_recorded_connectx4_output_parses_every_line() -> None:
    got = parse_ethtool_s((ROCE / "ethtool" / "ethq-issue8-connectx4.txt").read_text())
    assert got["rx_packets"] == 845320277
    assert got["tx_csum_partial"] == 726606998
    assert len(got) == 23


def test_a_garbled_ethtool_line_is_refused_with_its_line_number() -> None:
    with pytest.raises(ValueError, match="line 3"):
        parse_ethtool_s("NIC statistics:\n     rx_packets: 1\n     tx_packets: lots\n")


def test_roce_port_serves_per_priority_pause_frames_and_seconds_labelled_by_its_netdev() -> None:
    got = _table(_collector().collect())
    port = ("mlx5_2", "1", "ens1f0np0")
    assert got[(ROCE_PFC_PAUSE_FRAMES.name, (*port, "tx", "3"))] == 774105
    assert got[(ROCE_PFC_PAUSE_FRAMES.name, (*port, "rx", "3"))] == 30512
    # microseconds in the driver, seconds in the catalogue
    assert got[(ROCE_PFC_PAUSE_SECONDS.name, (*port, "tx", "3"))] == pytest.approx(2.250310)
    assert got[(ROCE_PFC_PAUSE_SECONDS.name, (*port, "rx", "0"))] == 0.0
    assert got[(ROCE_PFC_STORM_EVENTS.name, (*port, "warning"))] == 2
    # only the priorities the driver reported; the global pause is not a priority
    assert (ROCE_PFC_PAUSE_FRAMES.name, (*port, "tx", "5")) not in got
    assert not [k for k in got if "global" in "".join(k[1])]


def test_a_driver_without_per_priority_counters_serves_no_pfc_series_not_zeros() -> None:
    old = parse_ethtool_s((ROCE / "ethtool" / "ethq-issue8-connectx4.txt").read_text())
    assert _collector(FakeEthtool({"ens1f0np0": old})).collect() == []


def test_infiniband_ports_are_not_asked_for_ethtool_statistics() -> None:
    fake = FakeEthtool({"ens1f0np0": CX6})
    c = RocePfcCollector(DirSysfs(IB_TREE), fake, "n1")  # mlx5_0, mlx5_1: link_layer InfiniBand
    assert c.collect() == [] and fake.calls == 0 and not c.read_errors.counts


def test_a_vanished_netdev_is_skipped_and_another_failure_is_counted_not_raised() -> None:
    fake = FakeEthtool({})
    c = _collector(fake)
    assert c.collect() == [] and not c.read_errors.counts  # ENODEV: gone, not an error
    fake.fail["ens1f0np0"] = PermissionError(errno.EPERM, "Operation not permitted")
    assert c.collect() == []
    assert c.read_errors.counts == {"mlx5_2/1/ens1f0np0": 1}


def test_a_counter_reset_is_absorbed_not_exported_as_a_drop() -> None:
    stats = dict(CX6)
    fake = FakeEthtool({"ens1f0np0": stats})
    c = _collector(fake)
    c.collect()
    fake.data["ens1f0np0"]["tx_prio3_pause"] = 5  # driver reload
    got = _table(c.collect())
    assert got[(ROCE_PFC_PAUSE_FRAMES.name, ("mlx5_2", "1", "ens1f0np0", "tx", "3"))] == 774110


def test_the_roce_port_congestion_counters_come_through_the_infiniband_collector() -> None:
    got = _table(InfinibandCollector(DirSysfs(ROCE / "sys"), "n1").collect())
    assert got[(IB_PORT_INFO.name, ("mlx5_2", "1", "Ethernet"))] == 1
    assert got[(IB_HW_COUNTER.name, ("mlx5_2", "1", "np_cnp_sent"))] == 918274
    assert got[(IB_HW_COUNTER.name, ("mlx5_2", "1", "out_of_sequence"))] == 412


def test_rendered_roce_scrape_passes_promtool_check_metrics() -> None:
    body = render(_collector().collect())
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ROCE_PFC_PAUSE_SECONDS.name.encode() in body


def test_collector_set_includes_pfc_only_where_an_ethtool_reader_is_given() -> None:
    from exporter.assemble import collectors_for
    from exporter.sources.kmsg import ListKernelLog
    from simulator.nvml_fake import FakeNvml

    names = [c.name for c in collectors_for("n1", FakeNvml([]), DictSysfs(), ListKernelLog([]))]
    assert "roce_pfc" not in names
    with_pfc = collectors_for("n1", FakeNvml([]), DictSysfs(), ListKernelLog([]),
                              ethtool=FakeEthtool())  # fmt: skip
    assert "roce_pfc" in [c.name for c in with_pfc]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SIOCETHTOOL is Linux's")
def test_the_ioctl_reader_gets_the_kernels_statistics_of_a_real_interface() -> None:
    reader = IoctlEthtool()
    got = {}
    for name in sorted(os.listdir("/sys/class/net")):
        try:
            got[name] = reader.stats(name)
        except OSError:
            continue
    if not any(got.values()):
        pytest.skip("no interface here reports ethtool statistics")
    name, stats = next((k, v) for k, v in got.items() if v)
    assert all(isinstance(v, int) and v >= 0 for v in stats.values())
    assert all(k and k.isprintable() for k in stats)
    assert reader.stats(name).keys() == stats.keys()  # names cached, values re-read
    with pytest.raises(OSError) as e:
        reader.stats("nonexistent0")
    assert e.value.errno == errno.ENODEV
    reader.close()
