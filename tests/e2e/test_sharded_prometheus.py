"""Sharded Prometheus behind a query layer (issue 33): two Prometheus shards (3.5 by default),
each holding only its own nodes of a small simulated fleet (labelled ``gpuwarden_shard`` as
the scrape relabel labels them, :mod:`gpuwarden.lab.shards`), and a global Prometheus with no
data of its own that reads both through ``remote_read``. Each shard's node-local feature group
answers on its shard as on the global layer; the job-domain groups, and the analyzer's
Prometheus source with its findings, answer through the global layer as they do from one
Prometheus holding the whole fleet (each layer recording the job statistics the z-scores read
first, backfilled into its own TSDB with ``promtool tsdb create-blocks-from rules``)."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.features import SHARD_LABEL
from analyzer.sources.prometheus import PrometheusSource
from analyzer.window import Window
from benchmarks.bench_distributed import Restartable, evaluate_stages
from benchmarks.fleet_openmetrics import write
from exporter import catalog as c
from gpuwarden.lab.shards import Group, global_config, round_robin, split_openmetrics, stages
from simulator.fleet import Fleet
from tests.alerts.ruleset import generator
from tests.realcomp import Prometheus, promtool, run_prometheus

pytestmark = pytest.mark.real

NODES, SHARDS, STEP, STEPS = 8, 2, 15.0, 49  # the analyzer's 600 s window and a few steps more
EMPTY = "global: {scrape_interval: 15s}\nscrape_configs: []\n"


def _backfill(om: Path, data: Path) -> None:
    r = promtool("tsdb", "create-blocks-from", "openmetrics", str(om), str(data))
    assert r.returncode == 0, r.stderr.decode()
    data.chmod(0o777)


class Cluster:
    def __init__(
        self, shards: list[Prometheus], glob: Prometheus, one: Prometheus, one_data: Path,
        at: float,
    ) -> None:  # fmt: skip
        self.shards, self.glob, self.one, self.at = shards, glob, one, at
        self.one_data = one_data  # the blocks of one Prometheus holding the whole fleet


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("sharded")
    tmp.chmod(0o777)
    t0 = (time.time() // 7200) * 7200 - 4 * 3600  # whole 2-hour blocks in the past
    write(tmp / "fleet.om", NODES, t0, STEPS, STEP)
    owner = round_robin(Fleet(NODES, seed=0, start=t0 - STEP).nodes, SHARDS)
    oms = [tmp / f"shard-{i}.om" for i in range(SHARDS)]
    counts = split_openmetrics(tmp / "fleet.om", oms, owner)
    assert all(counts)
    dirs = [tmp / f"shard-{i}" for i in range(SHARDS)]
    for om, d in zip(oms, dirs, strict=True):
        _backfill(om, d)
    one = tmp / "one"  # both shards' blocks in one TSDB: one Prometheus holding the fleet
    one.mkdir()
    for d in dirs:
        for b in d.iterdir():
            if (b / "meta.json").exists():
                shutil.copytree(b, one / b.name)
    one.chmod(0o777)
    with (
        run_prometheus(EMPTY, data_dir=dirs[0]) as s0,
        run_prometheus(EMPTY, data_dir=dirs[1]) as s1,
        run_prometheus(global_config([s0.url, s1.url])) as glob,
        run_prometheus(EMPTY, data_dir=one) as whole,
    ):
        yield Cluster([s0, s1], glob, whole, one, t0 + STEP * (STEPS - 1))


def _rules() -> tuple[dict[int, list[str]], list[Group]]:
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


def render(shards: int) -> dict[str, str]:
    gen = generator("generate_feature_rules")
    return dict(gen.render_all(gen.Plan(shards=shards)))


def _answers(prom: Prometheus, expr: str, at: float) -> dict[tuple[tuple[str, str], ...], float]:
    return {tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in prom.query(expr, at)}


def _close(a: dict[Any, float], b: dict[Any, float]) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert v == pytest.approx(b[k], rel=1e-9, abs=1e-9, nan_ok=True), k


def test_each_shards_node_group_answers_on_its_shard_as_on_the_global_layer(
    cluster: Cluster,
) -> None:
    node, _ = _rules()
    assert sorted(node) == list(range(SHARDS))
    for i, shard in enumerate(cluster.shards):
        recorded = 0
        for expr in node[i]:
            mine = _answers(shard, expr, cluster.at)
            _close(mine, _answers(cluster.glob, expr, cluster.at))
            assert all(dict(k)[SHARD_LABEL] == str(i) for k in mine)
            recorded += len(mine)
        assert recorded > 0
    # the shards hold disjoint halves of the fleet; the global layer sees both
    present = f"count by (node) ({c.GPU_UP.name})"
    halves = [{dict(k)["node"] for k in _answers(s, present, cluster.at)} for s in cluster.shards]
    assert halves[0] and halves[1] and not halves[0] & halves[1]
    both = {dict(k)["node"] for k in _answers(cluster.glob, present, cluster.at)}
    assert both == halves[0] | halves[1] and len(both) == NODES


def test_the_job_domain_groups_answer_through_the_global_layer_as_on_one_prometheus(
    cluster: Cluster, tmp_path: Path
) -> None:
    _, other = _rules()
    order = stages(other)  # the job statistics, then the z-scores that read their records
    assert len(order) >= 2 and any("domains" in n for n, _ in order[-1])
    gdata, odata = tmp_path / "global", tmp_path / "one"
    gdata.mkdir()
    odata.mkdir()
    for b in cluster.one_data.iterdir():
        if (b / "meta.json").exists():
            shutil.copytree(b, odata / b.name)
    for d in (tmp_path, gdata, odata):
        d.chmod(0o777)
    # each layer records its own statistics (promtool backfills them from it) before the
    # z-scores are read from it
    config = global_config([s.url for s in cluster.shards])
    with contextlib.closing(Restartable(config, gdata)) as g:
        via = evaluate_stages(g, order, cluster.at, list, False)
    with contextlib.closing(Restartable(EMPTY, odata)) as one:
        alone = evaluate_stages(one, order, cluster.at, list, False)
    for mine, theirs in zip(via, alone, strict=True):
        for x, y in zip(mine["answers"], theirs["answers"], strict=True):
            _close(x, y)
    assert all(via[-1]["answers"])  # every z-score rule answered, for GPUs of both shards
    shards = {dict(k)[SHARD_LABEL] for a in via[-1]["answers"] for k in a}
    assert shards == {"0", "1"}
    # jobs span both shards: their statistics need both halves (a shard alone answers otherwise)
    assert any(
        _answers(cluster.shards[0], e, cluster.at) != _answers(cluster.glob, e, cluster.at)
        for _, rules in order[0]
        for _, e in rules
    )


def _same(a: Window, b: Window) -> None:
    assert a.nodes == b.nodes and len(a.nodes) == NODES
    assert a.metrics.keys() == b.metrics.keys() and a.ib_counters.keys() == b.ib_counters.keys()
    for x, y in ((a.metrics, b.metrics), (a.ib_counters, b.ib_counters)):
        for k in x:
            assert np.array_equal(x[k], y[k], equal_nan=True), k
    assert [(e.t, e.node, e.gpu, e.xid) for e in a.xids] == [
        (e.t, e.node, e.gpu, e.xid) for e in b.xids
    ]
    assert a.jobs == b.jobs and a.sku == b.sku


def test_the_analyzer_reads_and_finds_the_same_through_the_global_layer_as_from_one_prometheus(
    cluster: Cluster,
) -> None:
    async def read(url: str) -> Window:
        source = PrometheusSource(url, window=600.0, step=STEP, settle=0.0)
        try:
            return await source.read(cluster.at)
        finally:
            await source.close()

    via, alone = asyncio.run(read(cluster.glob.url)), asyncio.run(read(cluster.one.url))
    _same(via, alone)
    found_via = Engine(default_detectors()).cycle(via)
    found_alone = Engine(default_detectors()).cycle(alone)
    assert found_via  # the simulator's faults (NVLink, XID, IB, a straggler) are seen
    assert sorted((f.key, f.severity, f.action) for f in found_via) == sorted(
        (f.key, f.severity, f.action) for f in found_alone
    )
