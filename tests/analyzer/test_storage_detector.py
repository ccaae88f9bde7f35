"""Checkpoint storage: many nodes seeing a mount fail or crawl is one cluster finding; one
node is not (its client-side problem is the per-node alert's)."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detectors import default_detectors
from analyzer.detectors.storage import StorageDetector
from analyzer.engine import Engine
from analyzer.sources.build import RawSeries, build_window
from analyzer.sources.queries import QUERIES
from analyzer.window import Window
from exporter import catalog as c

T, STEP = 41, 15.0
MOUNTS = ("/lustre", "/mnt/ckpt")


def storage_window(nodes: int = 20, *, up_down: int = 0, slow: int = 0, fsync: float = 5.0,
                   from_t: int = 20) -> Window:  # fmt: skip
    """``nodes`` probing two mounts every step; /mnt/ckpt down on the first ``up_down``
    nodes and slow (``fsync`` s) on the next ``slow`` ones from sample ``from_t`` on."""
    up = np.ones((T, nodes, 2))
    dur = np.full((T, nodes, 2), 0.004)
    up[from_t:, :up_down, 1] = 0.0
    dur[from_t:, :up_down, 1] = np.nan  # a hung probe reports no duration
    dur[from_t:, up_down : up_down + slow, 1] = fsync
    return Window(
        t=1_800_000_000.0 + STEP * np.arange(T),
        nodes=tuple(f"gpu-node-{i:03d}" for i in range(nodes)),
        metrics={c.STORAGE_PROBE_UP.name: up, c.STORAGE_PROBE_DURATION.name: dur},
        mounts=MOUNTS,
    )


def test_a_mount_hung_on_many_nodes_is_one_critical_cluster_finding_not_one_per_node() -> None:
    [f] = StorageDetector().detect(storage_window(up_down=12))
    assert (f.node, f.subject, f.kind, f.severity, f.action) == (
        "cluster", "mount=/mnt/ckpt", "storage_degraded", "critical", "notify",
    )  # fmt: skip
    assert f.fault_class == "storage" and f.evidence["failing"] == 12
    assert f.since == 1_800_000_000.0 + STEP * 20
    assert "/mnt/ckpt" in f.summary and "12" in f.summary


def test_one_node_that_cannot_reach_the_mount_is_no_storage_finding() -> None:
    assert StorageDetector().detect(storage_window(up_down=1)) == []


def test_a_mount_slow_on_many_nodes_is_one_warning() -> None:
    [f] = StorageDetector().detect(storage_window(slow=6, fsync=5.0))
    assert (f.severity, f.evidence["slow"], f.evidence["fsync_p50_max"]) == ("warning", 6, 5.0)


def test_a_slow_but_acceptable_fsync_is_no_finding() -> None:
    assert StorageDetector().detect(storage_window(slow=20, fsync=0.5)) == []


def test_the_fraction_threshold_comes_from_the_config() -> None:
    w = storage_window(nodes=40, up_down=4)  # 10 % of the nodes
    assert StorageDetector().detect(w) == []  # default min_fraction 0.2
    [f] = StorageDetector.from_config({"min_fraction": 0.05}).detect(w)
    assert (f.evidence["nodes"], f.evidence["failing"]) == (40, 4)


def test_the_storage_detector_runs_in_the_default_set_and_bad_config_is_refused() -> None:
    found = Engine(default_detectors()).cycle(storage_window(up_down=5))
    assert [(f.node, f.kind) for f in found] == [("cluster", "storage_degraded")]
    with pytest.raises(ValueError, match=r"detectors\.storage: unknown key"):
        default_detectors({"storage": {"min_nodez": 3}})
    with pytest.raises(ValueError, match="min_fraction"):
        StorageDetector(min_fraction=0.0)


def test_the_analyzer_asks_prometheus_only_for_fsync_durations_per_node_and_mount() -> None:
    q = next(q for q in QUERIES if q.metric is c.STORAGE_PROBE_DURATION)
    assert q.expr() == f'max by (node,mount) ({c.STORAGE_PROBE_DURATION.name}{{op="fsync"}})'


def test_scraped_probe_series_land_in_the_window_per_node_and_mount() -> None:
    grid = 1_800_000_000.0 + STEP * np.arange(T)
    idx = np.arange(T)
    series = []
    for i in range(5):
        node, down = f"gpu-node-{i:03d}", i < 4
        lab = {"node": node, "mount": "/mnt/ckpt"}
        series.append(
            RawSeries(c.STORAGE_PROBE_UP.name, lab, idx, np.full(T, 0.0 if down else 1.0))
        )
        for op, v in (("fsync", 0.004), ("stat", 9.0)):  # only fsync is read
            series.append(
                RawSeries(c.STORAGE_PROBE_DURATION.name, {**lab, "op": op}, idx, np.full(T, v))
            )
    w = build_window(series, grid, STEP)
    assert w.mounts == ("/mnt/ckpt",) and w.metrics[c.STORAGE_PROBE_DURATION.name].max() == 0.004
    [f] = StorageDetector().detect(w)
    assert f.evidence["failing"] == 4 and f.evidence["nodes"] == 5


def test_pushed_to_alertmanager_the_cluster_finding_has_scope_and_mount_and_no_node() -> None:
    from analyzer.output import alertmanager_alerts

    [f] = StorageDetector().detect(storage_window(up_down=12))
    [a] = alertmanager_alerts([f], now=f.since, resolve_after=300)
    labels = a["labels"]
    assert "node" not in labels
    assert (labels["scope"], labels["mount"], labels["fault_class"], labels["action"]) == (
        "cluster", "/mnt/ckpt", "storage", "notify",
    )  # fmt: skip
