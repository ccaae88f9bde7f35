"""A small simulated fleet's history split across Prometheus shards, for the e2e tests of the
query layers over shards (issue 33: ``test_sharded_prometheus``'s ``remote_read`` global layer,
``test_thanos_query``'s Thanos Query over replicated shards).

:func:`shard_blocks` writes the fleet's history as promtool-backfilled TSDB blocks, one
directory per shard (each holding only its nodes, labelled with their shard as the scrape
relabel labels them, :mod:`gpuwarden.lab.shards`) and one holding the whole fleet; the rest
compares what two Prometheus-compatible endpoints answer and what the analyzer reads and finds
through them."""

from __future__ import annotations

import asyncio
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.promhttp import QueryStats
from analyzer.window import Window
from benchmarks.fleet_openmetrics import write
from gpuwarden.lab.shards import Group, round_robin, split_openmetrics
from simulator.fleet import Fleet
from tests.alerts.ruleset import generator
from tests.realcomp import Prometheus, promtool

NODES, SHARDS, STEP, STEPS = 8, 2, 15.0, 49  # the analyzer's 600 s window and a few steps more
EMPTY = "global: {scrape_interval: 15s}\nscrape_configs: []\n"
Answers = dict[tuple[tuple[str, str], ...], float]


@dataclass(frozen=True)
class ShardBlocks:
    shards: list[Path]  # shard i's blocks: its nodes only
    one: Path  # every shard's blocks in one TSDB: one Prometheus holding the whole fleet
    at: float  # the history's last step


def _backfill(om: Path, data: Path) -> None:
    r = promtool("tsdb", "create-blocks-from", "openmetrics", str(om), str(data))
    assert r.returncode == 0, r.stderr.decode()
    data.chmod(0o777)


def copy_blocks(src: Path, dst: Path) -> Path:
    """``src``'s TSDB blocks into ``dst`` (created, world-writable: Prometheus may run as
    another user), for another Prometheus to open (a TSDB directory is one server's)."""
    dst.mkdir(exist_ok=True)
    for b in src.iterdir():
        if (b / "meta.json").exists():
            shutil.copytree(b, dst / b.name)
    dst.chmod(0o777)
    return dst


def shard_blocks(tmp: Path) -> ShardBlocks:
    """The fleet's history (whole 2-hour blocks in the past) backfilled per shard under
    ``tmp``, and once more whole."""
    tmp.chmod(0o777)
    t0 = (time.time() // 7200) * 7200 - 4 * 3600
    write(tmp / "fleet.om", NODES, t0, STEPS, STEP)
    owner = round_robin(Fleet(NODES, seed=0, start=t0 - STEP).nodes, SHARDS)
    oms = [tmp / f"shard-{i}.om" for i in range(SHARDS)]
    counts = split_openmetrics(tmp / "fleet.om", oms, owner)
    assert all(counts)
    dirs = [tmp / f"shard-{i}" for i in range(SHARDS)]
    for om, d in zip(oms, dirs, strict=True):
        _backfill(om, d)
    one = tmp / "one"
    for d in dirs:
        copy_blocks(d, one)
    return ShardBlocks(dirs, one, t0 + STEP * (STEPS - 1))


def render(shards: int) -> dict[str, str]:
    gen = generator("generate_feature_rules")
    return dict(gen.render_all(gen.Plan(shards=shards)))


def feature_rules() -> tuple[dict[int, list[str]], list[Group]]:
    """The generator's node-local group per shard, and every other recording group."""
    node: dict[int, list[str]] = {}
    other: list[Group] = []
    for name, text in render(SHARDS).items():
        for g in (yaml.safe_load(text) or {}).get("groups", []) or []:
            rules = [(r["record"], r["expr"]) for r in g.get("rules", []) if "record" in r]
            if not rules:
                continue
            if name.startswith("node-shard-"):
                node[int(name.removeprefix("node-shard-").split(".")[0])] = [e for _, e in rules]
            else:
                other.append((g["name"], rules))
    return node, other


def answers(prom: Prometheus, expr: str, at: float) -> Answers:
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in prom.query(expr, at)}


def close(a: dict[Any, float], b: dict[Any, float]) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert v == pytest.approx(b[k], rel=1e-9, abs=1e-9, nan_ok=True), k


def read_with_stats(url: str, at: float) -> tuple[Window, QueryStats]:
    """What the analyzer's Prometheus source reads from ``url`` for the window ending ``at``,
    and its read accounting."""

    async def read() -> tuple[Window, QueryStats]:
        source = PrometheusSource(url, window=600.0, step=STEP, settle=0.0)
        try:
            return await source.read(at), source.stats
        finally:
            await source.close()

    return asyncio.run(read())


def read_window(url: str, at: float) -> Window:
    return read_with_stats(url, at)[0]


def same_window(a: Window, b: Window) -> None:
    assert a.nodes == b.nodes and len(a.nodes) == NODES
    assert a.metrics.keys() == b.metrics.keys() and a.ib_counters.keys() == b.ib_counters.keys()
    for x, y in ((a.metrics, b.metrics), (a.ib_counters, b.ib_counters)):
        for k in x:
            assert np.array_equal(x[k], y[k], equal_nan=True), k
    assert [(e.t, e.node, e.gpu, e.xid) for e in a.xids] == [
        (e.t, e.node, e.gpu, e.xid) for e in b.xids
    ]
    assert a.jobs == b.jobs and a.sku == b.sku


def same_findings(a: Window, b: Window) -> None:
    """The Engine finds the same in both windows, and finds something (the simulator's
    faults: NVLink, XID, IB, a straggler)."""
    found_a = Engine(default_detectors()).cycle(a)
    found_b = Engine(default_detectors()).cycle(b)
    assert found_a
    assert sorted((f.key, f.severity, f.action) for f in found_a) == sorted(
        (f.key, f.severity, f.action) for f in found_b
    )
