"""Replicated Prometheus shards behind a real Thanos Query (issue 33): two shards of a small
simulated fleet, each held by two Prometheus 3.5 replicas with the same promtool-backfilled
blocks and the external labels ``replica`` (``a``/``b``) and ``gpuwarden_shard`` (the shard the
scrape relabel gives each series, :mod:`gpuwarden.lab.shards`); a ``thanos sidecar`` beside
each serves it over the gRPC StoreAPI, and ``thanos query --query.replica-label=replica`` over
the four deduplicates the replicas. Against one Prometheus holding the whole fleet: every
series appears once, the analyzer's Prometheus source reads the same window and the Engine
finds the same, each shard's node-local feature group answers as on the shard, and with one
replica of a shard stopped the analyzer still reads and finds the same (HA); with both
stopped, Thanos Query answers the other shard alone, ``success`` with warnings, which the
analyzer counts. Thanos is built by ``tests/lab/servers.sh thanos``
(``tests.realcomp.thanos_binary``)."""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from analyzer.sources.features import SHARD_LABEL
from tests.e2e.shardfleet import (
    EMPTY,
    NODES,
    SHARDS,
    answers,
    close,
    copy_blocks,
    feature_rules,
    read_window,
    read_with_stats,
    same_findings,
    same_window,
    shard_blocks,
)
from tests.realcomp import (
    Prometheus,
    daemon,
    free_port,
    http_get,
    run_prometheus,
    thanos_binary,
    wait_until,
)

pytestmark = pytest.mark.real

REPLICAS = ("a", "b")
ALL = '{__name__!=""}'


def _config(shard: int, replica: str) -> str:
    labels = {"replica": replica, SHARD_LABEL: str(shard)}
    return yaml.safe_dump({"global": {"scrape_interval": "15s", "external_labels": labels},
                           "scrape_configs": []})  # fmt: skip


@dataclass
class Replica:
    prom: Prometheus
    sidecar: subprocess.Popen[bytes]
    grpc: str  # the sidecar's StoreAPI address

    def stop(self) -> None:
        for p in (self.sidecar, self.prom.proc):
            p.terminate()
            p.wait(10)


@contextlib.contextmanager
def _replica(data: Path, shard: int, replica: str) -> Iterator[Replica]:
    """A Prometheus over ``data`` and its sidecar.
    The sidecar reads the external labels from Prometheus' config API and the series through
    its remote-read API (no ``--web.enable-lifecycle`` needed: that is for its reloader)."""
    with run_prometheus(_config(shard, replica), data_dir=data) as prom:
        http, grpc = free_port(), free_port()
        argv = [thanos_binary(), "sidecar", f"--prometheus.url={prom.url}",
                f"--tsdb.path={data}", f"--http-address=127.0.0.1:{http}",
                f"--grpc-address=127.0.0.1:{grpc}", "--log.level=warn"]  # fmt: skip
        ready = f"http://127.0.0.1:{http}/-/ready"
        with daemon(argv, ready, data.parent / f"sidecar-{shard}{replica}.log") as sidecar:
            yield Replica(prom, sidecar, f"127.0.0.1:{grpc}")


@contextlib.contextmanager
def _query(endpoints: list[str], log: Path, strict: bool) -> Iterator[Prometheus]:
    """``thanos query`` over ``endpoints``, once it has every one of them in its store set.
    ``strict``: as docs/deploy.md says to run it, every endpoint ``strict: true`` in the
    endpoint config (always queried, so an unreachable one answers with a warning every
    time); otherwise plain ``--endpoint`` flags, which Thanos stops querying once a health
    check fails (every 5 s), silently."""
    http, grpc = free_port(), free_port()
    argv = [thanos_binary(), "query", f"--http-address=127.0.0.1:{http}",
            f"--grpc-address=127.0.0.1:{grpc}", "--query.replica-label=replica",
            "--log.level=warn"]  # fmt: skip
    if strict:
        config = {"endpoints": [{"address": e, "strict": True} for e in endpoints]}
        argv.append(f"--endpoint.sd-config={yaml.safe_dump(config)}")
    else:
        argv += [f"--endpoint={e}" for e in endpoints]
    url = f"http://127.0.0.1:{http}"
    with daemon(argv, f"{url}/-/ready", log) as proc:
        prom = Prometheus(url, log.parent, proc)
        wait_until(lambda: _failing(prom) == set() and len(_stores(prom)) == len(endpoints),
                   30, 0.1, "thanos query: every sidecar in its store set")  # fmt: skip
        yield prom


def _stores(query: Prometheus) -> list[dict[str, Any]]:
    """Thanos Query's store set (``/api/v1/stores``), every kind together."""
    data = json.loads(http_get(f"{query.url}/api/v1/stores"))["data"]
    return [s for ss in data.values() for s in ss]


def _failing(query: Prometheus) -> set[str]:
    """The stores whose last health check failed."""
    return {s["name"] for s in _stores(query) if s.get("lastError")}


def _checked(query: Prometheus, stopped: list[Replica]) -> None:
    """Waits for ``query``'s health check to have found every ``stopped`` sidecar gone: the
    state it stays in after the few seconds a stop takes to be noticed."""
    gone = {r.grpc for r in stopped}
    wait_until(lambda: gone <= _failing(query), 30, 0.1, f"thanos query: {gone} found gone")


@dataclass
class Cluster:
    replicas: list[dict[str, Replica]]  # per shard, by replica label
    query: Prometheus  # strict endpoints, as docs/deploy.md says
    loose: Prometheus  # plain --endpoint flags
    one: Prometheus
    at: float


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tmp = tmp_path_factory.mktemp("thanos")
    blocks = shard_blocks(tmp)
    with contextlib.ExitStack() as stack:
        replicas: list[dict[str, Replica]] = []
        endpoints: list[str] = []
        for i, src in enumerate(blocks.shards):
            replicas.append({})
            for r in REPLICAS:
                data = copy_blocks(src, tmp / f"shard-{i}{r}")
                replicas[i][r] = stack.enter_context(_replica(data, i, r))
                endpoints.append(replicas[i][r].grpc)
        query = stack.enter_context(_query(endpoints, tmp / "query.log", True))
        loose = stack.enter_context(_query(endpoints, tmp / "loose.log", False))
        one = stack.enter_context(run_prometheus(EMPTY, data_dir=blocks.one))
        yield Cluster(replicas, query, loose, one, blocks.at)


def _get(prom: Prometheus, expr: str, at: float, dedup: bool, **params: str) -> dict[str, Any]:
    """An instant query's answer (asserted ``success``); ``params``: more of Thanos Query's
    parameters (``partial_response``)."""
    q = urllib.parse.urlencode({"query": expr, "time": str(at), "dedup": str(dedup).lower(),
                                **params})  # fmt: skip
    body: dict[str, Any] = json.loads(http_get(f"{prom.url}/api/v1/query?{q}"))
    assert body["status"] == "success", body
    return body


def _count(prom: Prometheus, at: float, dedup: bool) -> int:
    return int(_get(prom, f"count({ALL})", at, dedup)["data"]["result"][0]["value"][1])


def test_thanos_query_answers_every_series_once_as_one_prometheus_holding_the_fleet(
    cluster: Cluster,
) -> None:
    series = answers(cluster.one, ALL, cluster.at)
    assert len(series) > 100
    close(answers(cluster.query, ALL, cluster.at), series)
    # without deduplication each series comes from both replicas, the replica label apart
    assert _count(cluster.query, cluster.at, True) == len(series)
    assert _count(cluster.query, cluster.at, False) == 2 * len(series)


def test_each_shards_node_group_answers_through_thanos_query_as_on_the_shard(
    cluster: Cluster,
) -> None:
    node, _ = feature_rules()
    assert sorted(node) == list(range(SHARDS))
    for i, replicas in enumerate(cluster.replicas):
        recorded = 0
        for expr in node[i]:
            mine = answers(replicas["a"].prom, expr, cluster.at)
            close(mine, answers(cluster.query, expr, cluster.at))
            assert all(dict(k)[SHARD_LABEL] == str(i) for k in mine)
            recorded += len(mine)
        assert recorded > 0


def test_the_analyzer_reads_and_finds_the_same_through_thanos_query_as_from_one_prometheus(
    cluster: Cluster,
) -> None:
    alone = read_window(cluster.one.url, cluster.at)
    via, stats = read_with_stats(cluster.query.url, cluster.at)
    same_window(via, alone)
    same_findings(via, alone)
    assert not stats.warnings and not stats.failures


def test_with_one_replica_of_a_shard_stopped_the_analyzer_finds_the_same_and_with_both_only_warnings_say_so(
    cluster: Cluster,
) -> None:
    """One test, two steps in order (pytest-xdist may run a module's tests on different
    workers, each with its own cluster; the second step needs the first's stopped replica).
    Runs after the tests above, which need every replica up. Each step waits for Thanos
    Query's health check to have found the stopped sidecars gone (every 5 s), the state a
    real outage stays in.

    First shard 0's replica ``b`` stops (its Prometheus and its sidecar): Thanos Query answers
    from replica ``a``; with strict endpoints, with a warning naming the unreachable sidecar,
    which the analyzer counts. Then replica ``a`` stops too: Thanos Query 0.41 still answers
    ``success`` with shard 1's series only, even with ``partial_response=false``; only its
    warnings say so, and only with strict endpoints: with plain ``--endpoint`` flags Thanos
    stops asking a store whose health check failed, and the shard is gone without a word."""
    shard = cluster.replicas[0]
    shard["b"].stop()
    _checked(cluster.query, [shard["b"]])
    _checked(cluster.loose, [shard["b"]])
    alone = read_window(cluster.one.url, cluster.at)
    via, stats = read_with_stats(cluster.query.url, cluster.at)
    same_window(via, alone)
    same_findings(via, alone)
    assert stats.warnings and not stats.failures
    close(answers(cluster.query, ALL, cluster.at), answers(cluster.one, ALL, cluster.at))
    body = _get(cluster.query, f"count by (replica, {SHARD_LABEL}) ({ALL})", cluster.at, False)
    left = {(r["metric"][SHARD_LABEL], r["metric"]["replica"]) for r in body["data"]["result"]}
    assert left == {("0", "a"), ("1", "a"), ("1", "b")}
    assert [w for w in body["warnings"] if 'replica="b"' in w and SHARD_LABEL in w]
    # a query naming the other shard goes to that shard's sidecars only: no warning
    other = _get(cluster.query, f'count({{{SHARD_LABEL}="1", __name__!=""}})', cluster.at, True)
    assert not other.get("warnings")
    # the loose query answers the same, but says nothing of the lost replica
    loose, loose_stats = read_with_stats(cluster.loose.url, cluster.at)
    same_window(loose, alone)
    assert not loose_stats.warnings
    assert not _get(cluster.loose, ALL, cluster.at, True).get("warnings")

    # both replicas of shard 0 gone
    shard["a"].stop()
    _checked(cluster.query, [shard["a"], shard["b"]])
    _checked(cluster.loose, [shard["a"], shard["b"]])
    half = len(answers(cluster.one, f'{{{SHARD_LABEL}="1", __name__!=""}}', cluster.at))
    for partial in ("true", "false"):
        for query, warned in ((cluster.query, 2), (cluster.loose, 0)):
            body = _get(query, f"count({ALL})", cluster.at, True, partial_response=partial)
            assert len(body.get("warnings", [])) == warned, (partial, body)
            assert int(body["data"]["result"][0]["value"][1]) == half
    w, stats = read_with_stats(cluster.query.url, cluster.at)
    assert len(w.nodes) == NODES // SHARDS and stats.warnings
    w, stats = read_with_stats(cluster.loose.url, cluster.at)
    assert len(w.nodes) == NODES // SHARDS and not stats.warnings
