"""The marginal scores exchange in the running service: replicas leave their part's scores in
the meeting directory each cycle, wait for the other members', and together find what one
analyzer finds, marginal included; a member that never leaves its scores costs a wait and a
count, not the cycle."""

from __future__ import annotations

import asyncio
import zlib
from dataclasses import replace

import numpy as np
import pytest

from analyzer.detectors.marginal import MarginalDetector, Scores
from analyzer.engine import Engine
from analyzer.findings import CLUSTER
from analyzer.output import render_metrics
from analyzer.replicas.configmaps import ConfigMapExchange
from analyzer.replicas.exchange import DirectoryExchange, decode, encode
from analyzer.replicas.judge import scores
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.role import ReplicaRole, exchange_from
from analyzer.service import AnalyzerService
from analyzer.window import Window
from exporter import catalog

from .test_replicas_marginal import NODES, _key, _windows

INTERVAL = 600.0


class Windows:
    """A source that answers each read with the next prepared window."""

    name = "windows"

    def __init__(self, windows: list[Window]) -> None:
        self.windows = {float(w.t[-1]): w for w in windows}

    async def read(self, now: float) -> Window:
        return self.windows[now]


def test_scores_cross_the_exchange_bit_for_bit():
    w = _windows(1)[0]
    s = scores(Engine([MarginalDetector()]), w, list(range(0, NODES, 3)))
    back = decode(encode(s))
    assert s.values and s.names and back.sizes == s.sizes and back.names == s.names
    for k, v in s.values.items():
        assert back.values[k].tobytes() == v.tobytes(), k
    for k, v in s.slowest.items():
        assert back.slowest[k].tobytes() == v.tobytes(), k


@pytest.mark.parametrize(
    "blob, why",
    [(b"not compressed", "compressed JSON"), (zlib.compress(b'{"values": {}}'), "malformed")],
)
def test_a_bad_blob_is_a_clear_error(blob, why):
    with pytest.raises(ValueError, match=why):
        decode(blob)


def _run(members: tuple[str, ...], silent: set[str], tmp_path, wait: float):
    windows = _windows(6)
    store = MemoryMembership()
    exchange = DirectoryExchange(tmp_path)
    roles = {r: ReplicaRole(store, r, INTERVAL, started=-10 * INTERVAL, exchange=exchange,
                            wait=wait) for r in members if r not in silent}  # fmt: skip
    services = {r: AnalyzerService(Windows(windows), Engine([MarginalDetector()]), INTERVAL,
                                   replica=role) for r, role in roles.items()}  # fmt: skip
    single = Engine([MarginalDetector()])
    cycles = []
    for w in windows:
        at = float(w.t[-1])
        plan = Plan(int(at // INTERVAL), members, members[0])

        async def cycle(at: float, plan: Plan) -> None:
            await asyncio.gather(*(s.run_cycle(at, plan) for s in services.values()))

        asyncio.run(cycle(at, plan))
        got = [f for s in services.values() for f in s.engine.findings]
        cycles.append((single.cycle(w), got))
    return cycles, roles


def test_replicas_exchanging_through_the_directory_find_what_one_analyzer_finds(tmp_path):
    cycles, roles = _run(("r-a", "r-b", "r-c"), set(), tmp_path, wait=5.0)
    for full, got in cycles:
        assert _key(got) == _key(full) and len(got) == len(full)
    assert sum(f.kind == "marginal" for full, _ in cycles for f in full) >= 4
    assert sum(f.node == CLUSTER for full, _ in cycles for f in full) >= 1
    assert all(r.stats.scores_missing == 0 for r in roles.values())
    assert len(list((tmp_path / "scores").iterdir())) <= 4  # old cycles removed


def test_a_member_that_leaves_no_scores_costs_the_wait_and_a_count(tmp_path):
    cycles, roles = _run(("r-a", "r-b", "r-c"), {"r-c"}, tmp_path, wait=0.2)
    assert all(r.stats.scores_missing == len(cycles) for r in roles.values())
    assert any(got for _, got in cycles)  # the others still judged
    text = render_metrics([], Engine([]).stats, {}, None, roles["r-a"].stats)
    missing = catalog.ANALYZER_REPLICA_SCORES_MISSING.name
    assert f'{missing}{{replica="r-a"}} {len(cycles)}' in text


def test_the_exchange_is_the_meeting_directory_on_bare_metal_and_configmaps_on_kubernetes(
    tmp_path, monkeypatch
):
    assert isinstance(exchange_from(f"dir:{tmp_path}"), DirectoryExchange)

    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: k, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: c, context: {cluster: k, user: u}}]\n"
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    on_kube = exchange_from("kubernetes:gpuwarden")
    assert isinstance(on_kube, ConfigMapExchange) and on_kube.namespace == "gpuwarden"
    (tmp_path / "empty").write_text("apiVersion: v1\nkind: Config\n")  # no context
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "empty"))
    with pytest.raises(ValueError, match="no Kubernetes credentials"):
        exchange_from("kubernetes:gpuwarden")


def test_joining_nothing_changes_nothing():
    s = Scores({("whole", "x", "g"): np.array([1.0])}, {"g": 1})
    assert s.join(Scores()).values[("whole", "x", "g")].tolist() == [1.0]


def test_a_replica_leaving_takes_its_scores_with_it_and_a_failing_exchange_does_not_stop_it():
    from analyzer.replicas.exchange import MemoryExchange

    store, exchange = MemoryMembership(), MemoryExchange()
    exchange.put(3, "r-0", b"a")
    exchange.put(3, "r-1", b"b")
    role = ReplicaRole(store, "r-0", INTERVAL, started=0.0, exchange=exchange)
    role.leave()
    assert exchange.get(3) == {"r-1": b"b"}

    class Down(MemoryExchange):
        def leave(self, replica):
            raise OSError("removing the marginal scores: HTTP 503")

    left = []
    store.leave = lambda r: left.append(r)  # type: ignore[method-assign]
    ReplicaRole(store, "r-1", INTERVAL, started=0.0, exchange=Down()).leave()
    assert left == ["r-1"]


def test_a_replica_leaves_scores_that_fit_its_exchange_pools_left_out_first() -> None:
    """The role hands the exchange no more than it holds (a ConfigMap's 756 KiB): here a
    limit that fits the marginal scores and not the throttling pool of 130 nodes."""
    from analyzer.detectors.throttling import ThrottlingDetector
    from analyzer.replicas.exchange import MemoryExchange

    w = _windows(1)[0]
    lim = np.full((len(w.t), NODES, 1), 700.0)
    w = Window(t=w.t, nodes=w.nodes, metrics={**w.metrics, catalog.GPU_POWER_LIMIT.name: lim},
               gpus=1, sku=w.sku, step=w.step)  # fmt: skip
    engine = Engine([MarginalDetector(), ThrottlingDetector()])
    whole = scores(engine, w, list(range(NODES)))
    assert whole.pools and len(encode(whole)) > len(encode(Scores(values=whole.values)))
    exchange = MemoryExchange(max_blob=len(encode(replace(whole, pools={}))) + 8)
    role = ReplicaRole(MemoryMembership(), "r-0", INTERVAL, started=-10 * INTERVAL,
                       exchange=exchange, wait=0.0)  # fmt: skip
    plan = Plan(3, ("r-0",), "r-0")
    role._others(exchange, engine, w, list(range(NODES)), plan)
    left = decode(exchange.get(3)["r-0"])
    assert left.pools == {} and left.sizes == whole.sizes
    assert role.stats.pools_dropped == len(whole.pools) > 0  # counted, for the alert
    role._others(exchange, engine, w, list(range(NODES)), replace(plan, cycle=4))
    assert role.stats.pools_dropped == 2 * len(whole.pools)
