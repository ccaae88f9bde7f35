"""Sharded Prometheus behind a query layer (issue 33): two Prometheus shards (3.5 by default),
each holding only its own nodes of a small simulated fleet (labelled ``gpuwarden_shard`` as
the scrape relabel labels them, :mod:`gpuwarden.lab.shards`), and a global Prometheus with no
data of its own that reads both through ``remote_read``. Each shard's node-local feature group
answers on its shard as on the global layer; the job-domain groups, and the analyzer's
Prometheus source with its findings, answer through the global layer as they do from one
Prometheus holding the whole fleet (each layer recording the job statistics the z-scores read
first, backfilled into its own TSDB with ``promtool tsdb create-blocks-from rules``)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from analyzer.sources.features import SHARD_LABEL
from benchmarks.bench_distributed import Restartable, evaluate_stages
from exporter import catalog as c
from gpuwarden.lab.shards import global_config, stages
from tests.e2e.shardfleet import (
    EMPTY,
    NODES,
    SHARDS,
    answers,
    close,
    copy_blocks,
    feature_rules,
    read_window,
    same_findings,
    same_window,
    shard_blocks,
)
from tests.realcomp import Prometheus, run_prometheus

pytestmark = pytest.mark.real


class Cluster:
    def __init__(
        self, shards: list[Prometheus], glob: Prometheus, one: Prometheus, one_data: Path,
        at: float,
    ) -> None:  # fmt: skip
        self.shards, self.glob, self.one, self.at = shards, glob, one, at
        self.one_data = one_data  # the blocks of one Prometheus holding the whole fleet


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    blocks = shard_blocks(tmp_path_factory.mktemp("sharded"))
    dirs = blocks.shards
    with (
        run_prometheus(EMPTY, data_dir=dirs[0]) as s0,
        run_prometheus(EMPTY, data_dir=dirs[1]) as s1,
        run_prometheus(global_config([s0.url, s1.url])) as glob,
        run_prometheus(EMPTY, data_dir=blocks.one) as whole,
    ):
        yield Cluster([s0, s1], glob, whole, blocks.one, blocks.at)


def test_each_shards_node_group_answers_on_its_shard_as_on_the_global_layer(
    cluster: Cluster,
) -> None:
    node, _ = feature_rules()
    assert sorted(node) == list(range(SHARDS))
    for i, shard in enumerate(cluster.shards):
        recorded = 0
        for expr in node[i]:
            mine = answers(shard, expr, cluster.at)
            close(mine, answers(cluster.glob, expr, cluster.at))
            assert all(dict(k)[SHARD_LABEL] == str(i) for k in mine)
            recorded += len(mine)
        assert recorded > 0
    # the shards hold disjoint halves of the fleet; the global layer sees both
    present = f"count by (node) ({c.GPU_UP.name})"
    halves = [{dict(k)["node"] for k in answers(s, present, cluster.at)} for s in cluster.shards]
    assert halves[0] and halves[1] and not halves[0] & halves[1]
    both = {dict(k)["node"] for k in answers(cluster.glob, present, cluster.at)}
    assert both == halves[0] | halves[1] and len(both) == NODES


def test_the_job_domain_groups_answer_through_the_global_layer_as_on_one_prometheus(
    cluster: Cluster, tmp_path: Path
) -> None:
    _, other = feature_rules()
    order = stages(other)  # the job statistics, then the z-scores that read their records
    assert len(order) >= 2 and any("domains" in n for n, _ in order[-1])
    gdata, odata = tmp_path / "global", tmp_path / "one"
    gdata.mkdir()
    copy_blocks(cluster.one_data, odata)
    for d in (tmp_path, gdata):
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
            close(x, y)
    assert all(via[-1]["answers"])  # every z-score rule answered, for GPUs of both shards
    shards = {dict(k)[SHARD_LABEL] for a in via[-1]["answers"] for k in a}
    assert shards == {"0", "1"}
    # jobs span both shards: their statistics need both halves (a shard alone answers otherwise)
    assert any(
        answers(cluster.shards[0], e, cluster.at) != answers(cluster.glob, e, cluster.at)
        for _, rules in order[0]
        for _, e in rules
    )


def test_the_analyzer_reads_and_finds_the_same_through_the_global_layer_as_from_one_prometheus(
    cluster: Cluster,
) -> None:
    via, alone = read_window(cluster.glob.url, cluster.at), read_window(cluster.one.url, cluster.at)
    same_window(via, alone)
    same_findings(via, alone)
