"""The sharded mode's settings are checked at start-up: a bad value stops the start with one
line, and the service in the sharded mode reports what it owns on /metrics."""

from __future__ import annotations

import pytest

from analyzer.replicas.membership import MemoryMembership
from analyzer.replicas.role import ReplicaRole
from analyzer.settings import AnalyzerSettings
from common.settings import SettingsError
from exporter import catalog as c

OK = {"prometheus": "http://prom:9090", "replica": "analyzer-0", "membership": "dir:/var/lib/x"}


def test_a_replica_with_a_membership_and_a_prometheus_starts() -> None:
    s = AnalyzerSettings(**OK)
    assert (s.replica, s.membership) == ("analyzer-0", "dir:/var/lib/x")
    assert AnalyzerSettings(**{**OK, "membership": "kubernetes:gpuwarden"}).replica


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"membership": ""}, "go together"),
        ({"replica": ""}, "go together"),
        ({"replica": "Analyzer_0"}, "DNS label"),
        ({"membership": "etcd:/x"}, "kubernetes:<namespace> or dir:<path>"),
        ({"membership": "kubernetes:"}, "kubernetes:<namespace> or dir:<path>"),
        ({"membership": "kubernetes:Bad_NS"}, "not a namespace"),
        ({"prometheus": "", "targets": "t.json"}, "shared Prometheus"),
        ({"interval": 2.0, "window": 600.0}, "at least 5 s"),
    ],
)
def test_a_bad_sharded_setting_stops_the_start_with_its_reason(change: dict, says: str) -> None:
    with pytest.raises(SettingsError, match=says):
        AnalyzerSettings(**{**OK, **change})


def test_a_replica_counts_the_cycles_it_could_not_judge() -> None:
    store = MemoryMembership()
    role = ReplicaRole(store, "r-0", 10.0, started=5.0)  # judges from cycle 1
    assert role.turn(10.5) is None  # before settle: no plan yet
    plan = role.turn(12.5)
    assert plan is not None and plan.members == ("r-0",) and role.stats.leader
    store.lead("r-0", 12.0, 12.0)
    late = ReplicaRole(store, "r-1", 10.0, started=5.0)
    assert late.turn(13.0) is None  # r-1 announced cycle 1 after the plan was stored
    assert late.turn(17.0) is None and late.stats.missed == 1


class _Source:
    name = "fixed"

    def __init__(self, window: object) -> None:
        self.window = window

    async def read(self, now: float) -> object:
        return self.window


def test_the_service_in_the_sharded_mode_judges_only_its_units_and_reports_them() -> None:
    import asyncio

    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.replicas.membership import Plan
    from analyzer.replicas.ownership import owner, units
    from analyzer.service import AnalyzerService
    from benchmarks.bench_analyzer import synthetic_window

    w = synthetic_window(128)  # four 32-node leaves; a fault on nodes 3, 5, 7 and 9 (leaf 0)
    role = ReplicaRole(MemoryMembership(), "r-0", 15.0, started=0.0)
    svc = AnalyzerService(_Source(w), Engine(default_detectors()), 15.0, replica=role)  # type: ignore[arg-type]
    members = ("r-0", "r-1", "r-2")
    asyncio.run(svc.run_cycle(float(w.now), Plan(1, members, "r-0")))
    parts = units(w)
    mine = {u for u in parts if owner(u, members) == "r-0"}
    mine_nodes = {w.nodes[i] for u in mine for i in parts[u]}
    assert 0 < len(mine_nodes) < len(w.nodes)
    assert role.stats.units == len(mine) and role.stats.nodes == len(mine_nodes)
    assert {f.node for f in svc.engine.findings} <= mine_nodes | {
        f.node for f in svc.engine.findings if f.node not in w.nodes
    }
    text = asyncio.run(svc.metrics(None)).text  # type: ignore[arg-type]
    members, nodes = c.ANALYZER_REPLICA_MEMBERS.name, c.ANALYZER_REPLICA_NODES.name
    assert f'{members}{{replica="r-0"}} 3.0' in text
    assert f'{nodes}{{replica="r-0"}} {float(len(mine_nodes))}' in text
    # the window's nodes: this replica's part, which the replicas' parts sum to the fleet
    assert f"{c.ANALYZER_WINDOW_NODES.name} {float(len(mine_nodes))}" in text.splitlines()
