"""The guards, one at a time and in order, on frozen Situations and a fake clock."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from remediation import guards
from remediation.guards import Situation
from remediation.model import ACTIONS, Job, NodeView
from remediation.policy import Budget
from tests.remediation.helpers import alert, live_policy

NOW = 1_800_000_000.0


def fleet(
    n: int = 10, out: dict[str, str] | None = None, leaf_size: int = 4
) -> tuple[NodeView, ...]:
    out = out or {}
    return tuple(
        NodeView(
            f"gpu-node-{i:03d}",
            f"gpu-node-{i:03d}" in out,
            out.get(f"gpu-node-{i:03d}", "").startswith("gpuwarden:"),
            out.get(f"gpu-node-{i:03d}", ""),
            {"leaf": f"leaf-{(i - 1) // leaf_size}"},
        )
        for i in range(1, n + 1)
    )


def situation(
    node: str = "gpu-node-001",
    action: str = "drain",
    fleet_: tuple[NodeView, ...] | None = None,
    **kw: Any,
) -> Situation:
    fl = fleet_ or fleet()
    base = Situation(
        alert=alert(node),
        action=action,
        now=NOW,
        paused=False,
        silenced=False,
        node=next((n for n in fl if n.name == node), None),
        fleet=fl,
        held=frozenset(),
    )
    return dataclasses.replace(base, **kw)


def test_a_healthy_situation_is_allowed_by_every_guard() -> None:
    v = guards.decide(situation(), live_policy())
    assert (v.allow, v.guard) == (True, "policy")


def test_dry_run_allows_but_says_dry_run_decided() -> None:
    v = guards.decide(situation(), live_policy(dry_run=True))
    assert (v.allow, v.guard) == (True, "dry_run")


def test_an_action_the_matching_rule_does_not_allow_is_denied() -> None:
    s = dataclasses.replace(situation(), alert=alert(fault_class="thermal"))
    assert guards.decide(s, live_policy()).guard == "policy"


def test_an_alert_no_rule_matches_is_denied() -> None:
    v = guards.decide(situation(), live_policy(rules=()))
    assert (v.allow, v.guard) == (False, "policy")


def test_pause_denies_disruptive_actions_but_not_notify() -> None:
    assert guards.decide(situation(paused=True), live_policy()).guard == "paused"
    assert guards.decide(situation(action="notify", paused=True), live_policy()).allow


@pytest.mark.parametrize(
    ("silenced", "required", "allowed"),
    [
        (True, False, False),
        (True, True, False),
        (None, True, False),
        (None, False, True),
        (False, True, True),
    ],
)
def test_silences_pause_a_node_and_unknown_fails_closed_only_when_required(
    silenced: bool | None, required: bool, allowed: bool
) -> None:
    v = guards.decide(situation(silenced=silenced), live_policy(require_silence_check=required))
    assert v.allow is allowed
    if not allowed:
        assert v.guard == "silenced"


def test_a_node_drained_by_someone_else_is_never_touched() -> None:
    fl = fleet(out={"gpu-node-001": "operator maintenance"})
    v = guards.decide(situation(fleet_=fl), live_policy())
    assert (v.allow, v.guard) == (False, "ownership")


def test_a_node_we_drained_ourselves_may_escalate() -> None:
    fl = fleet(out={"gpu-node-001": "gpuwarden: drain xid_fatal d1"})
    assert guards.decide(
        situation(fleet_=fl, held=frozenset({"gpu-node-001"})), live_policy()
    ).allow


def test_a_node_unknown_to_the_scheduler_is_denied() -> None:
    s = dataclasses.replace(situation(), node=None)
    assert guards.decide(s, live_policy()).guard == "ownership"


def test_an_open_breaker_denies() -> None:
    assert guards.decide(situation(breaker_open=True), live_policy()).guard == "storm_breaker"


def test_rate_limit_denies_at_the_limit_and_not_below() -> None:
    p = live_policy(rate_max_actions=3)
    assert guards.decide(situation(recent_actions=2), p).allow
    assert guards.decide(situation(recent_actions=3), p).guard == "rate_limit"


@pytest.mark.parametrize("already_out", range(0, 6))
def test_fleet_budget_counts_foreign_and_own_outages(already_out: int) -> None:
    # 10 nodes, 30% and at most 3: the 4th node out is refused.
    out = {f"gpu-node-{i:03d}": "someone" for i in range(2, 2 + already_out)}
    p = live_policy(fleet_budget=Budget(0.3, 10))
    v = guards.decide(situation(fleet_=fleet(out=out)), p)
    assert v.allow is (already_out + 1 <= 3)
    if not v.allow:
        assert v.guard == "budget_fleet"


def test_fleet_budget_absolute_cap_applies_below_the_fraction() -> None:
    p = live_policy(fleet_budget=Budget(1.0, 1))
    s = situation(held=frozenset({"gpu-node-005"}))
    assert guards.decide(s, p).guard == "budget_fleet"


def test_fleet_budget_fails_closed_when_the_fleet_is_unknown() -> None:
    s = dataclasses.replace(situation(), fleet=())
    assert guards.budget_fleet(s, live_policy()) is not None


def test_domain_budget_limits_one_leaf_while_others_stay_free() -> None:
    p = live_policy(domain_budgets={"leaf": Budget(0.5, 1)})
    held = frozenset({"gpu-node-002"})  # same leaf-0 as node 001
    assert guards.decide(situation(held=held), p).guard == "budget_domain"
    assert guards.decide(situation(node="gpu-node-005", held=held), p).allow


def test_job_budget_never_takes_a_second_node_from_one_job() -> None:
    job = Job("77", "RUNNING", ("gpu-node-001", "gpu-node-002", "gpu-node-003"))
    p = live_policy(per_job_max_nodes=1)
    assert guards.decide(situation(jobs=(job,)), p).allow
    v = guards.decide(situation(jobs=(job,), held=frozenset({"gpu-node-002"})), p)
    assert (v.allow, v.guard) == (False, "budget_job")


def test_guards_run_in_order_and_the_first_denial_decides() -> None:
    s = situation(paused=True, breaker_open=True, recent_actions=10_000)
    assert guards.decide(s, live_policy()).guard == "paused"
    assert (
        guards.decide(dataclasses.replace(s, paused=False), live_policy()).guard == "storm_breaker"
    )


def test_breaker_trips_above_the_threshold_of_distinct_nodes_only() -> None:
    p = live_policy(storm_max_nodes=3)
    assert not guards.breaker_trips(3, p)
    assert guards.breaker_trips(4, p)


def test_breaker_is_quiet_only_after_quiet_s_without_a_flag() -> None:
    p = live_policy(storm_quiet_s=120)
    assert not guards.breaker_quiet(NOW - 119, NOW, p)
    assert guards.breaker_quiet(NOW - 120, NOW, p)
    assert guards.breaker_quiet(None, NOW, p)


@pytest.mark.parametrize(
    ("labels", "code"),
    [
        ({"node": ""}, "no_node"),
        ({"node": "gpu node; rm -rf"}, "bad_node"),
        ({"action": "format_disk"}, "bad_action"),
        ({"fault_class": "cosmic_rays"}, "unknown_class"),
    ],
)
def test_garbage_alerts_are_invalid_with_a_reason_from_a_fixed_set(
    labels: dict[str, str], code: str
) -> None:
    a = alert()
    bad = dataclasses.replace(a, labels={**a.labels, **labels})
    found = guards.invalid_alert(bad, live_policy())
    assert found is not None and found[0] == code


def test_a_notify_alert_of_an_unknown_class_and_a_hold_are_valid() -> None:
    assert guards.invalid_alert(alert(fault_class="cosmic", action="notify"), live_policy()) is None
    hold = alert(fault_class="unwatched", action="hold")
    assert guards.invalid_alert(hold, live_policy()) is None


def test_flap_damping_lengthens_probation_only_within_the_window() -> None:
    p = live_policy(probation_s=60, flap_multiplier=4, flap_window_s=3600)
    assert guards.probation_for(p, None, NOW) == (60, False)
    assert guards.probation_for(p, NOW - 3600, NOW) == (240, True)
    assert guards.probation_for(p, NOW - 3601, NOW) == (60, False)


@pytest.mark.parametrize(
    ("occurrence", "expected"),
    [
        (1, "drain"),
        (2, "checkpoint_restart"),
        (3, "reboot"),
        (4, "inspect"),
        (9, "inspect"),
    ],
)
def test_the_ladder_climbs_one_rung_per_recurrence(occurrence: int, expected: str) -> None:
    assert guards.choose_action(live_policy(), alert(), occurrence) == expected


def test_a_recommended_rung_higher_on_the_ladder_is_the_starting_point() -> None:
    a = alert(action="checkpoint_restart")
    assert guards.choose_action(live_policy(), a, 1) == "checkpoint_restart"
    assert guards.choose_action(live_policy(), a, 2) == "reboot"


def test_an_alert_that_only_asks_for_notify_never_escalates() -> None:
    assert guards.choose_action(live_policy(), alert(action="notify"), 3) == "notify"


def test_release_refuses_a_drain_reason_gpuwarden_did_not_write() -> None:
    foreign = NodeView("n", True, False, "operator: bad fan")
    assert guards.release_verdict(foreign, manual=True).guard == "ownership"
    ours = NodeView("n", True, True, "gpuwarden: drain xid_fatal d3")
    assert guards.release_verdict(ours, manual=True).allow
    assert not guards.release_verdict(None, manual=True).allow


def test_an_unreachable_scheduler_denies_before_anything_is_assumed() -> None:
    v = guards.decide(situation(scheduler_error="sinfo: rc 1"), live_policy())
    assert (v.allow, v.guard) == (False, "scheduler")


# ---------------------------------------------------------------- pinned by mutation testing
def test_budget_domain_passes_a_node_unknown_to_the_scheduler_without_crashing() -> None:
    s = situation(node="gpu-node-001", fleet_=fleet(8))
    p = live_policy(domain_budgets={"leaf": Budget(0.25, 1)})
    assert guards.budget_domain(dataclasses.replace(s, node=None), p) is None


def test_budget_domain_checks_every_domain_kind_even_after_one_the_node_lacks() -> None:
    p = live_policy(domain_budgets={"a_rack": Budget(1.0, 100), "leaf": Budget(0.25, 1)})
    out = {"gpu-node-002": "gpuwarden: drain"}
    v = guards.decide(situation(fleet_=fleet(8, out)), p)
    assert v.guard == "budget_domain"
    assert v.reason == "leaf leaf-0: 2 of 4 nodes would be out (limit 1)"


def test_budget_job_says_which_job_and_the_limit() -> None:
    job = Job("77", "RUNNING", ("gpu-node-001", "gpu-node-002"))
    s = situation(jobs=(job,), held=frozenset({"gpu-node-002"}))
    v = guards.decide(s, live_policy())
    assert (v.guard, v.reason) == ("budget_job", "job 77 would lose 2 nodes (limit 1)")


def test_an_alert_without_an_action_label_is_a_notification() -> None:
    a = alert()
    bare = dataclasses.replace(a, labels={k: v for k, v in a.labels.items() if k != "action"})
    assert guards.choose_action(live_policy(), bare, 3) == "notify"


def test_release_verdicts_say_who_decided_and_why() -> None:
    assert guards.release_verdict(None, True) == guards.deny(
        "ownership", "node unknown to the scheduler"
    )
    foreign = NodeView("gpu-node-001", True, False, "operator: fan")
    assert guards.release_verdict(foreign, True).reason == (
        "drain reason not written by gpuwarden: 'operator: fan'"
    )
    ours = NodeView("gpu-node-001", True, True, "gpuwarden: drain")
    assert guards.release_verdict(ours, True) == guards.allow("manual", "release allowed")
    assert guards.release_verdict(ours, False) == guards.allow("probation", "release allowed")


def test_a_recommendation_off_the_ladder_starts_at_its_first_rung() -> None:
    assert guards.choose_action(live_policy(), alert(action="requeue"), 1) == "drain"
    assert guards.choose_action(live_policy(), alert(action="requeue"), 2) == "checkpoint_restart"


def test_an_unknown_fleet_size_denies_with_its_own_reason() -> None:
    s = dataclasses.replace(situation(), fleet=())
    assert guards.budget_fleet(s, live_policy()) == guards.deny(
        "budget_fleet", "fleet size unknown"
    )


def test_an_alert_without_an_action_label_is_valid_and_garbage_says_why() -> None:
    a = alert()
    bare = dataclasses.replace(a, labels={k: v for k, v in a.labels.items() if k != "action"})
    assert guards.invalid_alert(bare, live_policy()) is None
    nodeless = dataclasses.replace(a, labels={**a.labels, "node": ""})
    assert guards.invalid_alert(nodeless, live_policy()) == ("no_node", "alert has no node label")


def test_a_one_rung_ladder_stays_on_its_rung_and_inspect_comes_at_inspect_after() -> None:
    p = live_policy(inspect_after=3, ladders={"xid_fatal": ("drain", "reboot")})
    memory = alert(fault_class="memory", action="drain")  # no ladder: its own one rung
    assert [guards.choose_action(p, memory, n) for n in (1, 2)] == ["drain", "drain"]
    assert [guards.choose_action(p, alert(), n) for n in (1, 2, 3)] == [
        "drain",
        "reboot",
        "inspect",
    ]


def test_a_node_already_held_does_not_count_twice_against_the_fleet_budget() -> None:
    held = frozenset({"gpu-node-001", "gpu-node-002"})
    p = live_policy(fleet_budget=Budget(0.2, 2))  # 2 of 10 already out: at the limit
    assert guards.budget_fleet(situation(held=held), p) is None
    assert guards.budget_fleet(situation("gpu-node-003", held=held), p) is not None


def test_every_denial_says_why_in_words() -> None:
    p = live_policy(require_silence_check=True)
    foreign = fleet(out={"gpu-node-001": "operator: fan"})
    cases = [
        (situation(paused=True), "remediation is paused"),
        (situation(silenced=True), "an active Alertmanager silence matches node gpu-node-001"),
        (situation(silenced=None), "Alertmanager silences could not be checked (policy requires it)"),
        (situation(fleet_=foreign), "node is out of service by someone else: 'operator: fan'"),
        (situation(breaker_open=True), "storm breaker open (> 50 nodes flagged)"),
        (situation(recent_actions=100), "100 actions in the last 60s (limit 100)"),
        (situation(held=frozenset({f"gpu-node-00{i}" for i in range(2, 7)})), "6 nodes would be out of 10 (limit 5)"),
        (situation(action="cordon", alert=alert(fault_class="pcie")), "action cordon not allowed for this alert"),
    ]  # fmt: skip
    for s, reason in cases:
        assert guards.decide(s, p).reason == reason
    no_rule = live_policy(rules=())
    assert guards.decide(situation(), no_rule).reason == "no policy rule matches this alert"
    assert guards.decide(situation(), live_policy()).reason == "drain allowed by every guard"
    dry = live_policy(dry_run=True)
    assert (
        guards.decide(situation(), dry).reason == "drain allowed; dry-run: recorded, not executed"
    )


def test_a_held_node_over_the_limit_is_still_not_counted_again() -> None:
    held = frozenset({"gpu-node-001", "gpu-node-002"})
    assert (
        guards.budget_fleet(situation(held=held), live_policy(fleet_budget=Budget(0.1, 1))) is None
    )


def test_invalid_alert_reasons_quote_at_most_64_characters_and_name_the_vocabulary() -> None:
    p, long = live_policy(), "n" * 100
    a = alert()
    bad_node = dataclasses.replace(a, labels={**a.labels, "node": long + "!"})
    assert guards.invalid_alert(bad_node, p) == (
        "bad_node", f"node label is not a node name: {'n' * 64!r}"
    )  # fmt: skip
    bad_action = dataclasses.replace(a, labels={**a.labels, "action": long})
    assert guards.invalid_alert(bad_action, p) == (
        "bad_action", f"action label {'n' * 64!r} is not one of " + ", ".join(ACTIONS)
    )  # fmt: skip
    for fc, shown in ((long, "n" * 64), (None, "")):
        labels = {k: v for k, v in a.labels.items() if k != "fault_class"}
        cls = dataclasses.replace(a, labels=labels if fc is None else {**labels, "fault_class": fc})
        assert guards.invalid_alert(cls, p) == (
            "unknown_class", f"fault_class {shown!r} is unknown to the policy"
        )  # fmt: skip


def test_an_unknown_node_denial_names_the_node() -> None:
    v = guards.decide(situation(node="gpu-node-099"), live_policy())
    assert v == guards.deny("ownership", "node 'gpu-node-099' is unknown to the scheduler")


# ---------------------------------------------------------------- rail-optimized fabrics
def rail_fleet(n: int = 8, out: dict[str, str] | None = None) -> tuple[NodeView, ...]:
    """Two scalable units of 4 nodes, port i of every node of a unit on leaf su<k>-rail<i>."""
    out = out or {}
    return tuple(
        NodeView(
            name := f"gpu-node-{i:03d}",
            name in out,
            True,
            out.get(name, ""),
            {f"leaf.mlx5_{r}.1": f"su{(i - 1) // 4}-rail{r}" for r in range(4)},
        )
        for i in range(1, n + 1)
    )


def test_a_leaf_budget_counts_a_rail_node_in_every_leaf_its_ports_are_cabled_to() -> None:
    p = live_policy(domain_budgets={"leaf": Budget(0.25, 1)})
    out = {"gpu-node-002": "gpuwarden: drain"}
    v = guards.decide(situation(fleet_=rail_fleet(8, out)), p)
    assert v.guard == "budget_domain"
    assert v.reason == "leaf su0-rail0: 2 of 4 nodes would be out (limit 1)"
    # the other scalable unit's rail leaves are other switches: its node may go
    assert guards.decide(situation(node="gpu-node-005", fleet_=rail_fleet(8, out)), p).allow
