"""node_exporter's ethtool collector as a source of RoCE PFC pause time: discovered by name,
read through a real Prometheus (backfilled), judged by the RoCE detector like native series."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest

from analyzer.detectors.roce import RoceDetector
from analyzer.sources.dialects import NODE_EXPORTER
from analyzer.sources.dialects.discover import dialect_of_name, parse, query_set
from analyzer.sources.dialects.node_exporter import ethtool_names
from analyzer.sources.prometheus import PrometheusSource
from exporter import catalog
from gpuwarden.lab.via_prometheus import backfill, epoch_for, prometheus

NAME = "node_ethtool_transmitted_prio3_pause_duration"


def test_node_exporters_pfc_names_are_its_sanitized_ethtool_names() -> None:
    # collector/ethtool_linux.go: rx/tx words spelled received/transmitted, lower case
    assert NAME in ethtool_names()
    assert catalog.node_ethtool_pfc("rx", "0", False) == "node_ethtool_received_prio0_pause"


def test_ethtool_names_are_discovered_as_node_exporter_and_read_in_seconds() -> None:
    assert dialect_of_name(NAME) == NODE_EXPORTER
    found = parse({NAME, "node_ethtool_transmitted_prio5_pause_duration"})
    assert NODE_EXPORTER in found.dialects
    qs = [q for q in query_set(found) if q.dialect == NODE_EXPORTER]
    assert {q.source for q in qs} == {NAME, "node_ethtool_transmitted_prio5_pause_duration"}
    assert all(q.metric is catalog.ROCE_PFC_PAUSE_SECONDS and q.divide == 1e6 for q in qs)
    q = next(q for q in qs if q.source == NAME)
    assert q.relabel is not None
    assert q.relabel({"instance": "gpu-07:9100", "device": "ens1f0np0"}) == {
        "node": "gpu-07",
        "device": "ens1f0np0",
        "port": "1",
        "direction": "tx",
        "priority": "3",
    }


@pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                    reason="needs prometheus and promtool (make system-deps)")  # fmt: skip
def test_a_storming_netdev_served_by_node_exporter_is_found_through_prometheus() -> None:
    horizon, step = 900.0, 15.0
    epoch = epoch_for(horizon)
    nodes = [f"roce-{i}" for i in range(6)]
    lines = [f"# TYPE {NAME} gauge\n"]
    for k in range(int(horizon / step) + 1):
        t = k * step
        for i, n in enumerate(nodes):
            for dev in ("ens1f0np0", "ens2f0np0"):
                share = 0.95 if (i, dev) == (4, "ens2f0np0") and t >= 300 else 0.02
                us = int(share * 1e6 * t if share < 0.5 else 0.02e6 * 300 + share * 1e6 * (t - 300))
                lines.append(f'{NAME}{{instance="{n}:9100",job="node",device="{dev}"}} {us}'
                             f" {epoch + t:.3f}\n")  # fmt: skip
    lines.append("# EOF\n")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        (work / "ne.om").write_text("".join(lines))
        backfill(work / "ne.om", work / "tsdb")
        with prometheus(work / "tsdb", step, work) as url:

            async def read():  # type: ignore[no-untyped-def]
                src = PrometheusSource(url, window=600.0, step=step, timeout=60.0, discover=True)
                try:
                    return await src.read(epoch + horizon - step + src.settle)
                finally:
                    await src.close()

            w = asyncio.run(read())
    assert "tx_prio3_pause_seconds" in w.ib_counters
    assert w.dialect_of == {} or set(w.nodes) == set(nodes)
    [f] = RoceDetector().detect(w)
    assert (f.kind, f.node, f.subject) == ("roce_pfc_storm", "roce-4", "port=ens2f0np0/1")
    assert f.evidence["pause_share"] == pytest.approx(0.95, abs=0.02)
