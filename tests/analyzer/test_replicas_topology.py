"""The leader reads the fleet topology once a cycle and the other replicas use its read (issue
33): the blob crosses the exchange exactly, a bad one is a clear error, and a follower takes
the leader's topology only when it is this cycle's, read over its own grid, within its wait;
otherwise it reads its own (counted), so ownership stays identical on every replica."""

from __future__ import annotations

import dataclasses
import zlib
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from analyzer.engine import Engine
from analyzer.output import render_metrics
from analyzer.replicas.configmaps import ConfigMapExchange
from analyzer.replicas.exchange import DirectoryExchange, MemoryExchange
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.replicas.role import ReplicaRole, ReplicaStats
from analyzer.replicas.sharing import SharedTopology
from analyzer.replicas.topoblob import decode, encode
from analyzer.settings import AnalyzerSettings
from analyzer.sources.topology import Topology, topology_window
from common.settings import SettingsError
from exporter import catalog

STEP = 15.0
MEMBERS = ("r-a", "r-b", "r-c")
PLAN = Plan(7, MEMBERS, "r-a")


def _grid(end: float = 6000.0) -> np.ndarray:
    return end - STEP * np.arange(40, -1, -1)


def _topology(nodes: int = 40, end: float = 6000.0) -> Topology:
    names = [f"gpu-node-{i:03d}" for i in range(nodes)]
    jobs = [(n, f"job-{i // 6}") for i, n in enumerate(names) if i % 6 != 5]
    fabric = [(n, f"cl-{i // 9}", "1") for i, n in enumerate(names) for _ in range(8)]
    leaves = {n: f"leaf-{i // 12}" for i, n in enumerate(names)}
    w = topology_window(_grid(end), STEP, names, jobs, fabric, leaves)
    return Topology(w, {"dcgm-exporter": frozenset({"Hostname"}), "node_exporter": frozenset()})


def _same(a: Topology, b: Topology) -> None:
    for f in dataclasses.fields(a.window):
        x, y = getattr(a.window, f.name), getattr(b.window, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.tobytes() == y.tobytes(), f.name
        else:
            assert x == y, f.name
    assert a.host_labels == b.host_labels


def _owned(topo: Topology, me: str) -> list[str]:
    parts = units(topo.window)
    return [topo.window.nodes[i] for i in owned_nodes(parts, assign(parts, MEMBERS)[me])]


def test_a_topology_crosses_the_exchange_exactly() -> None:
    topo = _topology()
    assert topo.window.jobs and topo.window.nvlink_domain_of and topo.window.leaf_of
    cycle, back = decode(encode(7, topo))
    assert cycle == 7
    _same(back, topo)
    assert units(back.window) == units(topo.window)


def _blob(doc: Any) -> bytes:
    import json

    return zlib.compress(json.dumps(doc).encode())


def _doc(**change: Any) -> dict[str, Any]:
    import json

    doc = json.loads(zlib.decompress(encode(7, _topology(4))))
    doc.update(change)
    return doc


@pytest.mark.parametrize(
    ("blob", "says"),
    [
        (b"not compressed", "not a compressed JSON document"),
        (zlib.compress(b"{not json"), "not a compressed JSON document"),
        (_blob([1, 2]), "malformed"),
        (_blob(_doc(version=2)), "version 1"),
        (_blob({k: v for k, v in _doc().items() if k != "nodes"}), "malformed.*nodes"),
        (_blob(_doc(cycle="7")), "not an integer"),
        (_blob(_doc(nodes=["b", "a"])), "sorted and distinct"),
        (_blob(_doc(jobs={"j": [0, 9]})), "node index 9 outside"),
        (_blob(_doc(leaf_of=[[0, 3]])), "not a string"),
        (_blob(_doc(nvlink_domain_of=[[0]])), "malformed"),
        (_blob(_doc(t=[])), "no evaluation grid"),
        (_blob(_doc(t=["x"])), "not a number"),
        (_blob(_doc(host_labels={"dcgm-exporter": "Hostname"})), "not a list"),
        (_blob(_doc(jobs=[["j", [0]]])), "not a mapping"),
        (_blob(_doc(host_labels={"dcgm-exporter": [1]})), "not a string"),
    ],
)
def test_a_malformed_topology_is_a_clear_error_never_a_crash(blob: bytes, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        decode(blob)


class Clock:
    """Fake time: each sleep moves it on; ``arrive`` puts a blob on the board at a moment."""

    def __init__(self, board: MemoryExchange, arrive: dict[float, tuple[int, bytes]]) -> None:
        self.now, self.board, self.arrive, self.polls = 0.0, board, dict(arrive), 0

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.now += s
        self.polls += 1
        for at in sorted(a for a in self.arrive if a <= self.now):
            self.board.put_topology(*self.arrive.pop(at))


def _follower(board: Any, arrive: dict[float, tuple[int, bytes]] | None = None,
              plan: Plan = PLAN, wait: float = 1.0) -> tuple[SharedTopology, ReplicaStats, Clock]:  # fmt: skip
    stats = ReplicaStats("r-b")
    clock = Clock(board if isinstance(board, MemoryExchange) else MemoryExchange(), arrive or {})
    share = SharedTopology(board, plan, "r-b", wait, stats, clock, clock.sleep)
    return share, stats, clock


def test_a_follower_takes_the_leaders_topology_that_comes_in_within_its_wait() -> None:
    topo = _topology()
    share, stats, clock = _follower(MemoryExchange(), {0.4: (7, encode(7, topo))})
    got = share.shared(6000.0, _grid())
    assert got is not None and clock.now >= 0.4 and clock.now < 1.0
    _same(got, topo)
    assert (stats.topology_shared, stats.topology_fallbacks) == (1, 0)
    assert stats.topology_waited == clock.now  # from its first look until the blob was in


class Down(MemoryExchange):
    def get_topology(self, cycle: int) -> bytes | None:
        raise OSError("reading the topology: HTTP 503")

    def put_topology(self, cycle: int, blob: bytes) -> None:
        raise OSError("leaving the topology: HTTP 403")


@pytest.mark.parametrize(
    ("case", "board", "arrive", "waited"),
    [
        ("missing", MemoryExchange(), {}, 1.0),
        ("late", MemoryExchange(), {1.5: (7, encode(7, _topology()))}, 1.0),
        ("another cycle's", MemoryExchange(), {0.0: (7, encode(6, _topology()))}, 0.0),
        ("another time's", MemoryExchange(), {0.0: (7, encode(7, _topology(end=6015.0)))}, 0.0),
        ("malformed", MemoryExchange(), {0.0: (7, b"\x78\x9c torn")}, 0.0),
        ("unreachable", Down(), {}, 0.0),
    ],
)
def test_a_follower_reads_the_topology_itself_when_the_leaders_is(case, board, arrive,
                                                                  waited) -> None:  # fmt: skip
    share, stats, clock = _follower(board)
    for at, (k, blob) in list(arrive.items()):
        if at == 0.0:  # there before the follower looks
            board.put_topology(k, blob)
            del arrive[at]
    clock.arrive = arrive
    assert share.shared(6000.0, _grid()) is None, case
    assert (stats.topology_shared, stats.topology_fallbacks) == (0, 1)
    assert clock.now >= waited and clock.now < waited + 0.2  # gave up at once, or at the wait
    assert stats.topology_waited == clock.now


def test_an_older_cycles_topology_on_the_board_is_never_this_cycles() -> None:
    board = MemoryExchange()
    board.put_topology(6, encode(6, _topology()))
    share, stats, _ = _follower(board)
    assert share.shared(6000.0, _grid()) is None and stats.topology_fallbacks == 1


def test_the_leader_reads_it_itself_and_leaves_it_and_a_failing_put_does_not_stop_it() -> None:
    board, topo = MemoryExchange(), _topology()
    stats = ReplicaStats("r-a", topology_waited=2.5)  # it followed in the cycle before
    leader = SharedTopology(board, PLAN, "r-a", 1.0, stats)
    assert leader.shared(6000.0, _grid()) is None  # it reads; not a fallback
    assert stats.topology_waited == 0.0
    leader.read(6000.0, topo)
    blob = board.get_topology(7)
    assert blob is not None and decode(blob)[0] == 7
    _same(decode(blob)[1], topo)
    assert (stats.topology_shared, stats.topology_fallbacks) == (0, 0)
    SharedTopology(Down(), PLAN, "r-a", 1.0, stats).read(6000.0, topo)  # logged, goes on
    follower, _, _ = _follower(board)
    follower.read(6000.0, _topology(end=6015.0))  # a follower's own read is never left
    assert board.get_topology(7) == blob


def test_a_follower_does_not_wait_for_a_leader_outside_the_plan() -> None:
    share, stats, clock = _follower(MemoryExchange(), plan=Plan(7, ("r-b", "r-c"), "r-a"))
    assert share.shared(6000.0, _grid()) is None
    assert clock.now == 0.0 and stats.topology_fallbacks == 1


@settings(max_examples=60, deadline=None)
@given(
    cycle=st.sampled_from([6, 7, 8]),
    shift=st.sampled_from([-STEP, 0.0, STEP]),
    arrive=st.one_of(st.none(), st.floats(0.0, 0.9), st.floats(1.1, 2.0)),  # not at the edge
    torn=st.booleans(),
    me=st.sampled_from(MEMBERS[1:]),
)
def test_whatever_the_board_holds_a_follower_owns_what_its_own_read_gives(cycle, shift, arrive,
                                                                         torn, me) -> None:  # fmt: skip
    """Ownership is identical on every replica: a follower's topology is either exactly the
    one it would read itself (this cycle's, over its grid) or it reads its own."""
    own = _topology()  # what this replica would read at 6000 (the leader too, at that time)
    left = _topology(end=6000.0 + shift)
    board = MemoryExchange()
    blob = encode(cycle, left)
    share, stats, _ = _follower(board, {} if arrive is None else
                                {arrive: (7, blob[:20] if torn else blob)})  # fmt: skip
    share.replica = me
    got = share.shared(6000.0, _grid())
    used = own if got is None else got
    assert _owned(used, me) == _owned(own, me)
    if got is not None:
        _same(got, own)
    taken = arrive is not None and arrive < 1.0 and not torn and cycle == 7 and shift == 0.0
    assert (got is not None) == taken
    assert stats.topology_fallbacks == (0 if taken else 1)


def test_the_directory_keeps_each_cycles_topology_and_only_the_last_few(tmp_path) -> None:
    x = DirectoryExchange(tmp_path)
    assert x.get_topology(1) is None
    for k in range(1, 8):
        x.put_topology(k, f"topology {k}".encode())
    assert x.get_topology(7) == b"topology 7" and x.get_topology(1) is None
    assert sorted(p.name for p in (tmp_path / "topology").iterdir()) == ["4", "5", "6", "7"]
    x.put(7, "r-a", b"scores")  # the scores beside it, untouched
    assert x.get(7) == {"r-a": b"scores"} and x.get_topology(7) == b"topology 7"


class FakeCore:
    """The ConfigMap calls of ``CoreV1Api`` the exchange makes, in memory."""

    def __init__(self) -> None:
        self.maps: dict[str, dict[str, Any]] = {}

    def create_namespaced_config_map(self, ns: str, body: dict[str, Any]) -> None:
        name = body["metadata"]["name"]
        if name in self.maps:
            raise _ApiError(409)
        self.maps[name] = body

    def replace_namespaced_config_map(self, name: str, ns: str, body: dict[str, Any]) -> None:
        self.maps[name] = body

    def list_namespaced_config_map(self, ns: str, label_selector: str) -> Any:
        key, _, role = label_selector.partition("=")
        items = [
            SimpleNamespace(metadata=SimpleNamespace(annotations=b["metadata"]["annotations"]),
                            binary_data=b["binaryData"])
            for b in self.maps.values() if b["metadata"]["labels"].get(key) == role
        ]  # fmt: skip
        return SimpleNamespace(items=items)


class _ApiError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


def test_on_kubernetes_the_topology_is_one_configmap_of_the_cycle_beside_the_scores() -> None:
    api = FakeCore()
    x = ConfigMapExchange(api, "gpuwarden")
    x.put(7, "r-a", b"scores of r-a")
    assert x.get_topology(7) is None
    x.put_topology(7, b"topology 7")
    assert x.get_topology(7) == b"topology 7" and x.get_topology(6) is None
    x.put_topology(8, b"topology 8")  # replaced whole by the next cycle's
    assert x.get_topology(7) is None and x.get_topology(8) == b"topology 8"
    assert x.get(7) == {"r-a": b"scores of r-a"}  # the scores never read as the topology
    assert sorted(api.maps) == ["gpuwarden-analyzer-scores-r-a", "gpuwarden-analyzer-topology"]
    with pytest.raises(OSError, match="more than a ConfigMap holds"):
        x.put_topology(9, b"x" * (1024 * 1024))


def test_a_role_shares_only_with_an_exchange_and_a_wait() -> None:
    store, board = MemoryMembership(), MemoryExchange()
    assert ReplicaRole(store, "r-a", 60.0, exchange=board).sharing(PLAN) is None  # no wait: off
    assert ReplicaRole(store, "r-a", 60.0, topology_wait=6.0).sharing(PLAN) is None
    share = ReplicaRole(store, "r-b", 60.0, exchange=board, topology_wait=6.0).sharing(PLAN)
    assert share is not None and share.wait == 6.0 and not share.leads and share.board is board


def test_the_topology_wait_is_a_checked_fraction_of_the_interval() -> None:
    ok = {"prometheus": "http://prom:9090", "replica": "analyzer-0", "membership": "dir:/x"}
    assert AnalyzerSettings(**ok).topology_wait == 0.2
    assert AnalyzerSettings(**ok, topology_wait=0).topology_wait == 0
    assert AnalyzerSettings(**ok, topology_wait=0.3).topology_wait == 0.3
    for bad in (-0.1, 0.31, float("nan")):
        with pytest.raises(SettingsError, match=r"topology_wait must be 0\.\.0\.3 "):
            AnalyzerSettings(**ok, topology_wait=bad)


def test_the_fallbacks_and_the_wait_are_on_metrics() -> None:
    stats = ReplicaStats("r-b", topology_fallbacks=3, topology_waited=1.25)
    text = render_metrics([], Engine([]).stats, {}, None, stats)
    assert f'{catalog.ANALYZER_REPLICA_TOPOLOGY_FALLBACKS.name}{{replica="r-b"}} 3' in text
    assert f'{catalog.ANALYZER_REPLICA_TOPOLOGY_WAIT.name}{{replica="r-b"}} 1.25' in text
