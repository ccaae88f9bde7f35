"""Ownership units and the rendezvous hash: domains joined whole, a straddling job with them,
and a replica joining moves only the units it gains."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analyzer.inventory import Inventory, NodeInventory
from analyzer.replicas.membership import MemoryMembership, Plan
from analyzer.replicas.ownership import assign, owner, units
from analyzer.replicas.role import ReplicaRole
from analyzer.replicas.slicing import subwindow
from analyzer.window import InstanceInfo, Window, XidEvent


def _window(jobs: dict[str, tuple[int, ...]]) -> Window:
    n = 8
    return Window(
        t=np.arange(3.0), nodes=tuple(f"n{i}" for i in range(n)),
        metrics={"m": np.arange(3.0 * n * 2).reshape(3, n, 2)},
        xids=(XidEvent(1.0, 5, 0, 79),), jobs=jobs,
        leaf_of={i: f"leaf-{i // 2}" for i in range(n)},
        sku=tuple("h100" if i < 4 else "b200" for i in range(n)),
    )  # fmt: skip


def test_a_job_straddling_two_leaves_joins_them_into_one_unit() -> None:
    parts = units(_window({"7": (1, 2)}))
    assert parts["leaf/leaf-0"] == (0, 1, 2, 3)  # leaf-0 and leaf-1 through job 7
    assert parts["leaf/leaf-2"] == (4, 5) and len(parts) == 3


def test_a_replica_that_joins_takes_units_only_from_others_never_shuffles_them() -> None:
    names = [f"leaf/l{i}" for i in range(200)]
    before = assign(names, ["a", "b", "c"])
    after = assign(names, ["a", "b", "c", "d"])
    for r in ("a", "b", "c"):
        assert set(after[r]) <= set(before[r])
    assert 30 < len(after["d"]) < 70
    assert owner("leaf/l1", ["c", "a", "b"]) == owner("leaf/l1", ["a", "b", "c"])


def test_a_sub_window_renumbers_nodes_events_and_maps() -> None:
    w = _window({"7": (1, 2), "9": (5, 6)})
    part = subwindow(w, [4, 5, 6])
    assert part.nodes == ("n4", "n5", "n6") and part.metrics["m"].shape == (3, 3, 2)
    assert np.array_equal(part.metrics["m"][:, 1], w.metrics["m"][:, 5])
    assert part.xids == (XidEvent(1.0, 1, 0, 79),)
    assert dict(part.jobs) == {"9": (1, 2)} and part.leaf_of == {
        0: "leaf-2",
        1: "leaf-2",
        2: "leaf-3",
    }
    assert part.sku == ("b200",) * 3
    mig = replace(w, instances={(5, 1, 0): InstanceInfo("2", "1g.10gb", "ns/a"),
                                (1, 0, 0): InstanceInfo("1", "1g.10gb", "ns/a")})  # fmt: skip
    assert subwindow(mig, [4, 5, 6]).instances == {(1, 1, 0): InstanceInfo("2", "1g.10gb", "ns/a")}


def test_a_rack_is_a_domain_a_replica_sees_whole() -> None:
    w = _window({})
    racked = Window(t=w.t, nodes=w.nodes, metrics=w.metrics,
                    rack_of={0: "r1", 2: "r1", 4: "r1", 6: "r2"})  # fmt: skip
    parts = units(racked)
    assert parts["rack/r1"] == (0, 2, 4) and parts["rack/r2"] == (6,)
    assert parts["node/n1"] == (1,)


def test_the_inventory_s_leaves_and_racks_bound_a_replica_s_units_as_the_source_s_do() -> None:
    """A site whose topology is only in the operator's inventory (no leaf label on any
    series): the nodes of one leaf are one unit, owned by one replica, exactly as when the
    source names the leaf; without the inventory each node would be its own unit."""
    bare = Window(t=np.arange(3.0), nodes=tuple(f"n{i}" for i in range(40)), metrics={})
    inv = Inventory({f"n{i}": NodeInventory(leaf=f"leaf-{i % 4}", rack=f"rack-{i % 8}")
                     for i in range(40)})  # fmt: skip
    plan = Plan(3, ("r-a", "r-b", "r-c"), "r-a")
    owned = {r: ReplicaRole(MemoryMembership(), r, 10.0, started=0.0, inventory=inv).owned(bare, plan)
             for r in plan.members}  # fmt: skip
    assert set().union(*owned.values()) == set(bare.nodes)
    assert sum(map(len, owned.values())) == 40  # a partition: no node judged twice
    for nodes in owned.values():  # each leaf (and so each rack: two racks a leaf) whole
        for leaf in {int(n[1:]) % 4 for n in nodes}:
            assert {f"n{i}" for i in range(leaf, 40, 4)} <= nodes
    plain = {r: ReplicaRole(MemoryMembership(), r, 10.0, started=0.0).owned(bare, plan)
             for r in plan.members}  # fmt: skip
    split = [
        leaf
        for leaf in range(4)
        if len({r for r, ns in plain.items() if f"n{leaf}" in ns or f"n{leaf + 4}" in ns}) > 1
    ]
    assert split  # without it, some leaf's nodes go to different replicas
