"""Placement tiers as pure logic: the budget, the ttl and its doubling, the Slurm weight plan
and the Kubernetes taint patch; and the property that soft actions never take capacity out,
never exceed their budget and always expire."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from common.settings import SettingsError
from remediation.placement import budget, config, slurm, tiers
from remediation.placement import kubernetes as kube
from remediation.placement.config import PlacementPolicy
from remediation.placement.slurm import SlurmNode
from remediation.placement.tiers import Entry

P = PlacementPolicy()


def test_a_partition_of_ten_de_prefers_one_node_and_of_thirty_three() -> None:
    assert budget.limit(10, 0.10) == 1
    assert budget.limit(30, 0.10) == 3
    assert budget.limit(3, 0.10) == 1  # max(1, ...): a small partition still gets one


def test_a_second_node_beyond_the_budget_is_denied_unless_it_scores_higher() -> None:
    caps = {"gpu": 1}
    held = [budget.Member("a", 5.0, frozenset({"gpu"}))]
    low = budget.admit(budget.Member("b", 3.0, frozenset({"gpu"})), held, caps)
    assert not low.allow and "gpu 1/1" in low.reason
    high = budget.admit(budget.Member("c", 9.0, frozenset({"gpu"})), held, caps)
    assert high.allow and high.displace == "a"


def test_a_failure_domain_caps_at_a_quarter_even_when_the_partition_has_room() -> None:
    caps = budget.limits({"gpu": 100, "domain:leaf=l0": 8}, 0.10, 0.25)
    assert caps == {"gpu": 10, "domain:leaf=l0": 2}
    g = frozenset({"gpu", "domain:leaf=l0"})
    held = [budget.Member("a", 1, g), budget.Member("b", 1, g)]
    assert not budget.admit(budget.Member("c", 1, g), held, caps).allow


def test_the_ttl_doubles_per_recurrence_and_is_capped_by_the_longest_hold() -> None:
    assert [tiers.ttl_for(P, n) for n in range(3)] == [86400.0, 172800.0, 345600.0]
    assert tiers.ttl_for(P, 40) == P.max_hold_s


def test_a_resolved_tier_expires_ttl_after_its_resolution_and_a_firing_one_is_refreshed() -> None:
    e = Entry("n1", "marginal", "slow", since=0.0, last_evidence=0.0, ttl_s=100.0)
    e = tiers.refreshed(e, 50.0)
    assert e.until(P) == 150.0
    e = tiers.resolved(e, 60.0)
    assert not tiers.expired(e, P, 159.0) and tiers.expired(e, P, 160.0)
    assert tiers.refreshed(e, 500.0).last_evidence == 60.0  # resolved: no more refreshing


def test_placement_settings_are_validated_at_start_up() -> None:
    assert config.parse({"max_fraction": 0.2}).max_fraction == 0.2
    for bad in ({"max_fraction": 0}, {"marginal_ttl_s": -1}, {"ttl": 5}, {"max_hold_s": 10}):
        with pytest.raises(SettingsError, match="placement"):
            config.parse(bad)


def _nodes(*weights: int, partition: str = "gpu") -> list[SlurmNode]:
    return [SlurmNode(f"n{i}", w, "", (partition,)) for i, w in enumerate(weights, 1)]


def test_the_slurm_plan_raises_the_weight_to_the_highest_peer_plus_one_with_a_record() -> None:
    changes, skipped = slurm.plan(_nodes(1, 1, 7), {"n1": "marginal"})
    assert skipped == {}
    [c] = changes
    assert (c.node, c.kind, c.weight) == ("n1", "apply", 8)
    assert c.extra == "gpuwarden:placement tier=marginal base=1 weight=8"
    assert "State" not in " ".join(c.argv())  # never a drain


def test_a_weight_reset_by_reconfigure_is_repaired_and_its_new_base_remembered() -> None:
    rec = slurm.extra("marginal", 1, 8)
    nodes = [SlurmNode("n1", 3, rec, ("gpu",)), *_nodes(1, 7)[1:]]
    [c] = slurm.plan(nodes, {"n1": "marginal"})[0]
    assert c.kind == "repair" and c.weight == 8 and "base=3" in c.extra


def test_release_restores_the_base_weight_and_clears_the_record() -> None:
    nodes = [SlurmNode("n1", 8, slurm.extra("marginal", 2, 8), ("gpu",)), *_nodes(1, 7)[1:]]
    [c] = slurm.plan(nodes, {})[0]
    assert (c.kind, c.weight, c.extra) == ("restore", 2, "")


def test_nodes_drained_or_weighted_by_someone_else_are_never_touched() -> None:
    nodes = [
        SlurmNode("n1", 1, "", ("gpu",), True, "maintenance by bob"),
        SlurmNode("n2", 50, "", ("gpu",)),
        SlurmNode("n3", 1, "rack=7", ("gpu",)),
        SlurmNode("n4", 1, "", ("gpu",)),
    ]
    changes, skipped = slurm.plan(nodes, {"n1": "marginal", "n2": "marginal", "n3": "marginal"})
    assert changes == [] and set(skipped) == {"n1", "n2", "n3"}
    assert "someone else" in skipped["n1"] and "Weight=50" in skipped["n2"]


def test_the_kubernetes_patch_touches_only_our_taints_and_sets_only_our_label() -> None:
    foreign = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ours = {"key": "gpuwarden.io/marginal", "value": "true", "effect": "PreferNoSchedule"}
    node = {"metadata": {"name": "n1"}, "spec": {"taints": [foreign]}}
    assert kube.taint_ops(node, "marginal") == [
        {"op": "add", "path": "/spec/taints/-", "value": ours}
    ]
    shown = {"spec": {"taints": [ours, foreign, ours]}}  # "several": every one of ours goes
    assert kube.taint_ops(shown, None) == [
        {"op": "test", "path": "/spec/taints/2", "value": ours},
        {"op": "remove", "path": "/spec/taints/2"},
        {"op": "test", "path": "/spec/taints/0", "value": ours},
        {"op": "remove", "path": "/spec/taints/0"},
    ]
    bare = {"spec": {"unschedulable": False}}
    assert kube.taint_ops(bare, None) == []
    assert kube.taint_ops(bare, "marginal") == [
        {"op": "test", "path": "/spec", "value": {"unschedulable": False}},
        {"op": "add", "path": "/spec/taints", "value": [ours]},
    ]
    assert kube.label_patch("marginal") == {"metadata": {"labels": {kube.TIER_LABEL: "marginal"}}}
    assert kube.label_patch(None) == {"metadata": {"labels": {kube.TIER_LABEL: None}}}


# ------------------------------------------------------------------ the property
# A model of the admission loop over the pure parts (budget, tiers, Slurm plan), cheap enough
# for hundreds of examples; test_placement_stateful.py drives the real Engine and Placement.
NODES = [f"n{i:02d}" for i in range(20)]
GROUPS = {n: frozenset({"gpu" if i < 12 else "big", f"domain:leaf=l{i // 4}"}) for i, n in
          enumerate(NODES)}  # fmt: skip
SIZES = {"gpu": 12, "big": 8, **{f"domain:leaf=l{i}": 4 for i in range(5)}}
CAPS = budget.limits(SIZES, P.max_fraction, P.max_domain_fraction)

event = st.one_of(
    st.tuples(st.just("avoid"), st.sampled_from(NODES), st.floats(0, 100)),
    st.tuples(st.just("resolve"), st.sampled_from(NODES), st.just(0.0)),
    st.tuples(st.just("release"), st.sampled_from(NODES), st.just(0.0)),
    st.tuples(st.just("wait"), st.just(""), st.floats(0, 3 * 86400)),
)


@settings(max_examples=200, deadline=None)
@given(st.lists(event, max_size=60))
def test_soft_actions_never_take_capacity_out_never_exceed_budget_and_always_expire(
    events: list[tuple[str, str, float]],
) -> None:
    now, held, episodes = 0.0, dict[str, Entry](), dict[str, list[float]]()
    weights = dict.fromkeys(NODES, 1)
    extras = dict.fromkeys(NODES, "")
    for kind, node, x in events:
        if kind == "avoid" and node not in held:
            members = [budget.Member(e.node, e.score, GROUPS[e.node]) for e in held.values()]
            adm = budget.admit(budget.Member(node, x, GROUPS[node]), members, CAPS)
            if adm.allow:
                held.pop(adm.displace or "", None)
                rec = sum(t >= now - P.recurrence_window_s for t in episodes.get(node, []))
                episodes.setdefault(node, []).append(now)
                held[node] = Entry(node, "marginal", "", now, now, tiers.ttl_for(P, rec), score=x)
        elif kind == "resolve" and node in held:
            held[node] = tiers.resolved(held[node], now)
        elif kind == "release":
            held.pop(node, None)
        elif kind == "wait":
            now += x
        held = {n: tiers.refreshed(e, now) for n, e in held.items() if not tiers.expired(e, P, now)}
        members = [budget.Member(e.node, e.score, GROUPS[e.node]) for e in held.values()]
        assert budget.within(members, CAPS)
        assert all(e.until(P) <= e.since + P.max_hold_s for e in held.values())
        table = [SlurmNode(n, weights[n], extras[n], tuple(g for g in GROUPS[n] if ":" not in g))
                 for n in NODES]  # fmt: skip
        changes, _ = slurm.plan(table, {n: e.tier for n, e in held.items()})
        for c in changes:
            assert not any(a.startswith("State=") for a in c.argv())  # never out of service
            assert c.weight < slurm.WEIGHT_MAX + 1
            weights[c.node], extras[c.node] = c.weight, c.extra
    # with no fresh evidence, everything ends by the longest hold
    later = now + P.max_hold_s
    assert not [e for e in held.values() if not tiers.expired(e, P, later)]
    table = [SlurmNode(n, weights[n], extras[n], ("gpu",)) for n in NODES]
    changes, _ = slurm.plan(table, {})
    for c in changes:
        weights[c.node] = c.weight
    assert set(weights.values()) == {1}  # back to neutral: the original weights


def test_check_refuses_the_weight_projection_under_topology_tree_unless_allowed() -> None:
    from remediation.placement import check

    text = "TopologyParam           = (null)\nTopologyPlugin          = topology/tree\n"
    assert check.topology_plugin(text) == "topology/tree"
    _, problems = check.slurm_lines("topology/tree", P, live=True)
    assert problems and "refused" in problems[0]
    lines, problems = check.slurm_lines(
        "topology/tree", PlacementPolicy(allow_topology_tree=True), True
    )
    assert problems == [] and any("Weight + Extra" in line for line in lines)
    lines, _ = check.slurm_lines("topology/block", P, live=True)
    assert any("every node of a degraded block" in line for line in lines)
    lines, problems = check.slurm_lines("topology/tree", P, live=False)
    assert problems == [] and any(line.startswith("warning:") for line in lines)
