"""`gpuwarden evaluate --via prometheus`: the scenarios through a real Prometheus (promtool
backfill of the scraped history, missed scrapes, staleness) beside the direct-frames path."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from exporter import catalog as c
from gpuwarden.lab.evaluate import main
from gpuwarden.lab.openmetrics import ScrapeRecorder
from gpuwarden.lab.via_prometheus import class_rows
from tests.realcomp import require_binary


def test_a_small_run_through_prometheus_prints_both_tables_and_matches_the_direct_path_per_class(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    require_binary("prometheus")
    require_binary("promtool")
    argv = ["--via", "prometheus", "--nodes", "8", "--hours", "0.6", "--seeds", "1",
            "--cycle", "60", "--per-kind", "1", "--controls", "1", "--out", str(tmp_path)]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "| direct frames |" in out and "| through Prometheus |" in out
    assert "| fault class | F1 direct | F1 Prometheus | gap |" in out
    runs = json.loads((tmp_path / "evaluation-via-prometheus.json").read_text())["runs"]
    rows = class_rows(runs)
    assert {k for k, *_ in rows} >= {"nvlink_errors", "xid", "pcie_downgrade", "leaf_outage"}
    for kind, f1_direct, f1_prom, gap, *_ in rows:
        assert not math.isnan(f1_direct), kind  # every class was detected on the direct path
        assert gap <= 0.01, (kind, f1_direct, f1_prom)
    r = runs[0]
    assert r["samples"] > 500_000 and r["degraded_cycles"] == 0
    assert r["prometheus"]["summary"]["recall"] == r["direct"]["summary"]["recall"]


class _Frame:
    def __init__(
        self, t: float, up: np.ndarray, temp: np.ndarray, xids: list[tuple[int, int, int]]
    ):
        self.t, self.xids, self.events = t, xids, None
        self.metrics = {c.GPU_UP.name: up, c.GPU_TEMPERATURE.name: temp}
        self.ib_counters: dict[str, np.ndarray] = {}


def test_the_scraped_history_leaves_out_missed_scrapes_and_down_nodes_and_keeps_xid_counts(
    tmp_path: Path,
) -> None:
    rec = ScrapeRecorder(["n1", "n2"], lambda n, g: f"GPU-{n}-{g}", ["NVIDIA H100 80GB HBM3"] * 2,
                         epoch=1000.0, workdir=tmp_path)  # fmt: skip
    up = np.ones((2, 1))
    rec.push(_Frame(15.0, up, np.full((2, 1), 40.0), [(0, 0, 79)]), {"7": [0, 1]})
    rec.push(_Frame(30.0, up, np.full((2, 1), 41.0), []), {}, missed=np.array([True, False]))
    down = np.array([[1.0], [np.nan]])
    rec.push(_Frame(45.0, down, np.full((2, 1), 42.0), [(0, 0, 79)]), {})
    text = rec.write(tmp_path / "h.om").read_text()
    rec.close()
    temp = [ln for ln in text.splitlines() if ln.startswith(c.GPU_TEMPERATURE.name)]
    assert [ln.split()[-1] for ln in temp if 'node="n1"' in ln] == ["1015.000", "1045.000"]
    assert [ln.split()[-1] for ln in temp if 'node="n2"' in ln] == ["1015.000", "1030.000"]
    xid = [ln.split()[1:] for ln in text.splitlines() if ln.startswith(c.GPU_XID_ERRORS.name)]
    assert xid == [["1", "1015.000"], ["2", "1045.000"]]  # the count survives the missed scrape
    alloc = [ln for ln in text.splitlines() if ln.startswith(c.GPU_ALLOCATION_INFO.name)]
    assert len(alloc) == 2 and all('job_id="7"' in ln for ln in alloc)
    xid_family = c.GPU_XID_ERRORS.name.removesuffix("_total")
    assert f"# TYPE {xid_family} counter" in text and text.endswith("# EOF\n")


def test_via_prometheus_refuses_the_mixed_fleet_and_a_missed_share_of_one_or_more(
    tmp_path: Path, capsys
) -> None:  # type: ignore[no-untyped-def]
    base = ["--via", "prometheus", "--out", str(tmp_path)]
    assert main([*base, "--mixed"]) == 2
    assert main([*base, "--missed-scrapes", "1.5"]) == 2
    assert "--via prometheus runs the homogeneous fleet" in capsys.readouterr().err


def test_the_backfilled_sums_are_what_the_exporter_serves_for_the_same_simulated_node(
    tmp_path: Path,
) -> None:
    """The history a benchmark or ``--via prometheus`` backfills carries the exporter's per-GPU
    NVLink and per-port IB sums, equal to what the real collectors serve for that node (the
    analyzer's gates read them); a node range (``part``) records only its own nodes."""
    from exporter.assemble import collectors_for
    from simulator.fleet import Fleet
    from simulator.node_view import NodeView
    from simulator.topology import gpu_uuid

    fleet = Fleet(3, seed=4, start=0.0)
    node = fleet.nodes[1]
    fleet.schedule([
        {"kind": "nvlink_errors", "node": node, "target": "gpu2/5", "onset": 20.0},
        {"kind": "nvlink_down", "node": node, "target": "gpu6/1", "onset": 40.0},
        {"kind": "ib_symbol_errors", "node": node, "target": "mlx5_3/1", "onset": 20.0},
    ])  # fmt: skip
    rec = ScrapeRecorder(fleet.nodes, gpu_uuid, ["NVIDIA H100 80GB HBM3"] * 3, 0.0, tmp_path,
                         part=(1, 2))  # fmt: skip
    view = NodeView(node, 1)
    cols = collectors_for(view.name, view.nvml, view.sysfs, view.kmsg)
    sums = (c.GPU_NVLINK_ERRORS, c.GPU_NVLINK_DOWN, c.IB_PORT_ERRORS)
    served: dict[tuple[str, tuple[str, ...], float], float] = {}
    for frame in fleet.run(120.0, 15.0):
        rec.push(frame, {})
        view.refresh(frame, [])
        for s in (s for col in cols for s in col.collect() if s.metric in sums):
            key = tuple(v for k, v in s.labels.items() if k != "uuid")
            served[(s.metric.name, key, frame.t)] = s.value
    text = rec.write(tmp_path / "h.om").read_text()
    rec.close()
    backfilled = {}
    for ln in text.splitlines():
        name, _, rest = ln.partition("{")
        if name in {m.name for m in sums}:
            labels, value, t = rest.rsplit(" ", 2)
            d = dict(kv.split("=", 1) for kv in labels.rstrip("}").split(","))
            key = tuple(v.strip('"') for k, v in d.items() if k != "uuid")
            backfilled[(name, key, float(t))] = float(value)
    assert backfilled == served
    last = max(t for *_, t in served)
    assert backfilled[(c.GPU_NVLINK_DOWN.name, (node, "6"), last)] == 1
    assert backfilled[(c.GPU_NVLINK_ERRORS.name, (node, "2"), last)] > 0
    assert backfilled[(c.IB_PORT_ERRORS.name, (node, "mlx5_3", "1"), last)] > 0
    assert f'node="{fleet.nodes[0]}"' not in text and f'node="{fleet.nodes[2]}"' not in text
