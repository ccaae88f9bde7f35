"""The placement manager's own decisions, each pinned: a repeat refreshes a tier (never a
new episode), the tier label and recurrences pick the tier, a node in no partition or pool
is denied, the reason, GPU and evidence a tier keeps, what a resolve, a release and the
listing report. Small fakes: a projection with fixed groups, a fake clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

import pytest

from exporter import catalog as c
from remediation.clock import FakeClock
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Alert, NodeView
from remediation.placement.config import PlacementPolicy
from remediation.placement.manager import Placement, evidence_of, score_of
from remediation.placement.projection import Reconciled, Repair

NODES = [f"n{i:02d}" for i in range(1, 11)]  # one partition of 10: one tier at a time


class Groups:
    """A scheduler with fixed partitions that shows whatever it is asked to."""

    name = "fake"

    def __init__(self, groups: Mapping[str, frozenset[str]], skip: Mapping[str, str] = {}):
        self.g, self.skip, self.shown = groups, dict(skip), {}  # type: ignore[var-annotated]

    def groups(self) -> Mapping[str, frozenset[str]]:
        return self.g

    def reconcile(self, wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        changes = [Repair(n, "apply", f"mark {t}") for n, t in wanted.items()
                   if self.shown.get(n) != t and n not in self.skip]  # fmt: skip
        changes += [Repair(n, "restore", "neutral") for n in self.shown if n not in wanted]
        if not dry_run:
            self.shown = {n: t for n, t in wanted.items() if n not in self.skip}
        return Reconciled(tuple(changes), {n: w for n, w in self.skip.items() if n in wanted})


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def placement(
    tmp: Path,
    clock: FakeClock,
    policy: PlacementPolicy | None = None,
    fleet: tuple[NodeView, ...] = (),
    dry_run: bool = False,
    skip: Mapping[str, str] = {},
) -> Placement:
    proj = Groups({"gpu": frozenset(NODES)}, skip)
    return Placement(Journal(tmp / "state.db"), policy or PlacementPolicy(), proj, clock.now,
                     Metrics(), lambda: fleet, dry_run)  # fmt: skip


def avoid(node: str, fp: str = "", starts: str = "2026-11-29T10:00:00Z", **extra: str) -> Alert:
    labels = {"alertname": "GpuwardenMarginalNode", "node": node, "action": "avoid"}
    ann = {"summary": f"{node} marginal", "value": "0.03", "peer_percentile": "99.5"}
    for k, v in extra.items():
        (labels if k in ("tier", "gpu", "score") else ann)[k] = v
    return Alert(fp or f"fp-{node}", starts, "firing", labels, ann)


def episodes(p: Placement) -> list[dict[str, object]]:
    return p.journal.rows("SELECT * FROM placement_history ORDER BY id")


def test_a_repeat_of_a_de_preferred_node_refreshes_its_tier_and_starts_no_episode(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    v, _, _ = p.avoid(avoid("n01", score="5"))
    assert v.allow
    p.resolved(avoid("n01"))  # the clock started: not firing
    clock.advance(3600)
    again = avoid("n01", fp="fp-n01-b", starts="2026-11-29T11:00:00Z", score="2", value="0.07")
    v, ev, events = p.avoid(again)
    assert (v.allow, v.guard, v.reason) == (True, "placement", "still marginal; evidence refreshed")
    assert ev["value"] == 0.07 and events == []  # already shown: nothing to change
    [row] = p.listing()
    assert row["firing"] is True and row["until"] == clock.now() + 86400
    assert row["evidence"]["value"] == 0.07  # the fresher evidence
    [e] = p.store.entries()
    assert (e.fingerprint, e.score, e.since) == ("fp-n01-b", 5.0, clock.now() - 3600)
    assert len(episodes(p)) == 1  # a refresh is not a recurrence
    clock.advance(86400)
    assert p.tick() == []  # still firing: refreshed, never expired
    p.resolved(again)
    clock.advance(86400)
    assert [ev.action for ev in p.tick()] == ["placement_expire", "placement_restore"]


def test_a_node_in_no_partition_or_pool_is_denied_a_failure_domain_is_not_a_pool(
    tmp_path: Path, clock: FakeClock
) -> None:
    fleet = (NodeView("n99", domains={"leaf": "leaf-9"}), NodeView("n01", domains={"leaf": "l1"}))
    p = placement(tmp_path, clock, fleet=fleet)
    v, _, events = p.avoid(avoid("n99"))
    assert (v.allow, v.guard, v.reason) == (False, "placement",
                                            "node 'n99' is in no partition or node pool")  # fmt: skip
    assert events == [] and p.listing() == []
    assert p.avoid(avoid("n01"))[0].allow


def test_the_tier_is_marginal_unless_the_alert_says_suspect_or_it_recurred_enough(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock, PlacementPolicy(suspect_after=1, max_fraction=0.5))
    p.avoid(avoid("n01", tier="marginal"))
    p.avoid(avoid("n02", tier="suspect"))
    p.avoid(avoid("n03", tier="bogus"))
    assert {r["node"]: r["tier"] for r in p.listing()} == {
        "n01": "marginal", "n02": "suspect", "n03": "marginal"}  # fmt: skip
    p.release("n01", "alice")
    v, ev, _ = p.avoid(avoid("n01", fp="fp-n01-b", starts="2026-11-29T11:00:00Z"))
    assert v.reason.startswith("suspect for 172800s after the last evidence (1 recurrence(s))")
    assert (ev["recurrences"], ev["ttl_s"]) == (1, 172800.0)


def test_a_budget_denial_says_why(tmp_path: Path, clock: FakeClock) -> None:
    p = placement(tmp_path, clock)
    p.avoid(avoid("n01", score="5"))
    v, _, events = p.avoid(avoid("n02", score="1"))
    assert (v.allow, v.guard) == (False, "placement_budget") and events == []
    assert v.reason == "placement budget full (gpu 1/1); score 1 not above"


def test_a_tier_keeps_its_gpu_and_a_reason_of_at_most_200_characters(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock, PlacementPolicy(max_fraction=0.5))
    p.avoid(avoid("n01", gpu="3", summary="x" * 300))
    bare = avoid("n02")
    p.avoid(dataclasses.replace(bare, annotations={}))
    nameless = dataclasses.replace(avoid("n03"), annotations={}, labels={"node": "n03"})
    p.avoid(nameless)
    rows = {r["node"]: r for r in p.listing()}
    assert (rows["n01"]["gpu"], rows["n01"]["reason"]) == ("3", "x" * 200)
    assert (rows["n02"]["gpu"], rows["n02"]["reason"]) == (None, "GpuwardenMarginalNode")
    assert rows["n03"]["reason"] == "avoid"


def test_a_resolve_of_another_alert_changes_nothing_its_own_starts_the_clock(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    p.avoid(avoid("n01"))
    assert p.resolved(avoid("n01", fp="someone-else")) is None
    assert p.resolved(avoid("n02")) is None
    clock.advance(10)
    v = p.resolved(avoid("n01"))
    assert v is not None
    until = clock.now() + 86400
    assert (v.allow, v.guard, v.reason) == (True, "placement",
                                            f"evidence resolved; marginal until {until:.0f}")  # fmt: skip
    assert len(episodes(p)) == 1 and p.listing()[0]["firing"] is False


def test_a_release_ends_the_tier_and_its_episode_and_says_who(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    p.avoid(avoid("n01"))
    assert p.release("n02", "alice") == []  # nothing to end
    clock.advance(5)
    events = p.release("n01", "alice")
    assert [(e.node, e.action) for e in events] == [
        ("n01", "placement_release"), ("n01", "placement_restore")]  # fmt: skip
    v = events[0].verdict
    assert (v.allow, v.guard, v.reason) == (True, "manual", "placement tier ended by alice")
    [ep] = episodes(p)
    assert (ep["ended_at"], ep["ended_why"]) == (clock.now(), "released by alice")
    assert p.listing() == []


LISTED = [(True, {}, "dry-run"), (False, {}, "applied"), (False, {"n01": "drained"}, "drained")]


@pytest.mark.parametrize(("dry_run", "skip", "shown"), LISTED)
def test_the_listing_says_how_each_tier_is_shown(
    tmp_path: Path, clock: FakeClock, dry_run: bool, skip: dict[str, str], shown: str
) -> None:
    p = placement(tmp_path, clock, dry_run=dry_run, skip=skip)
    p.avoid(avoid("n01", gpu="1"))
    [row] = p.listing()
    assert row["projection"] == shown
    assert (row["node"], row["gpu"], row["tier"], row["reason"]) == ("n01", "1", "marginal",
                                                                    "n01 marginal")  # fmt: skip
    assert (row["since"], row["until"]) == (clock.now(), clock.now() + 86400)


def test_a_displacement_is_counted_recorded_and_ends_the_displaced_episode(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    p.avoid(avoid("n01", score="1"))
    clock.advance(5)
    v, _, events = p.avoid(avoid("n02", score="3"))
    assert v.allow and (events[0].node, events[0].action) == ("n01", "placement_displace")
    d = events[0].verdict
    assert (d.allow, d.guard) == (True, "placement_budget")
    assert d.reason == (
        "displaced by n02: placement budget full (gpu 1/1); displaces n01 (score 1 < 3)"
    )
    first = episodes(p)[0]
    assert (first["node"], first["ended_at"], first["ended_why"]) == (
        "n01", clock.now(), "displaced by n02")  # fmt: skip
    clips = p.metrics.registry.get_sample_value(
        c.REMEDIATION_PLACEMENT_BUDGET_CLIPS.name, {"outcome": "displaced"}
    )
    assert clips == 1


def test_a_tier_whose_alert_the_journal_no_longer_shows_firing_expires_ttl_after_the_tick(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)  # its alert never journaled: a missed resolution
    p.avoid(avoid("n01"))
    clock.advance(100)
    assert p.tick() == []
    [row] = p.listing()
    assert (row["firing"], row["until"]) == (False, clock.now() + 86400)
    clock.advance(86399)
    assert p.tick() == []
    clock.advance(1)
    events = p.tick()
    assert (events[0].node, events[0].action) == ("n01", "placement_expire")
    v = events[0].verdict
    assert (v.allow, v.guard, v.reason) == (True, "placement", "marginal expired (ttl 86400s)")
    [ep] = episodes(p)  # one episode: the tick's resolution started none
    assert (ep["ended_at"], ep["ended_why"]) == (clock.now(), "expired")


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (OSError("connection refused"), "placement projection failed: connection refused"),
        (ValueError("bad"), "placement projection failed: ValueError: bad"),
    ],
)
def test_a_projection_that_fails_is_an_event_saying_why_except_under_dry_run(
    tmp_path: Path, clock: FakeClock, error: Exception, reason: str
) -> None:
    p = placement(tmp_path, clock)

    def broken(wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        raise error

    p.projection.reconcile = broken  # type: ignore[method-assign]
    [e] = p.avoid(avoid("n01"))[2]
    assert (e.node, e.action, e.verdict.allow, e.verdict.guard) == (
        "", "placement_error", False, "scheduler")  # fmt: skip
    assert e.verdict.reason == reason
    p.dry_run = True
    assert p.tick() == []


def test_a_failure_domain_caps_its_nodes_and_the_gauges_count_each_tier(
    tmp_path: Path, clock: FakeClock
) -> None:
    fleet = tuple(NodeView(n, domains={"leaf": "l1" if i < 4 else "l2"})
                  for i, n in enumerate(NODES))  # fmt: skip
    p = placement(tmp_path, clock, PlacementPolicy(max_fraction=0.5), fleet=fleet)
    assert p.avoid(avoid("n01"))[0].allow
    v = p.avoid(avoid("n02"))[0]  # l1 has 4 nodes: 25 % of it is 1
    assert (v.allow, v.reason) == (False, "placement budget full (domain:leaf=l1 1/1); "
                                          "score 99.5 not above")  # fmt: skip
    assert p.avoid(avoid("n05", tier="suspect"))[0].allow
    assert p.avoid(avoid("n06"))[0].allow is False  # l2: 6 nodes, 25 % is 1
    p.avoid(avoid("n03", fp="x", starts="2026-11-29T11:00:00Z"))
    gauge = p.metrics.registry.get_sample_value
    name = c.REMEDIATION_PLACEMENT_NODES.name
    assert (gauge(name, {"tier": "marginal"}), gauge(name, {"tier": "suspect"})) == (1, 1)
    p.release("n02", "x")
    fleet2 = (*fleet[:4], NodeView("n07", domains={"leaf": "l1"}))
    p.fleet = lambda: fleet2
    p.release("n05", "bob")
    assert p.avoid(avoid("n08"))[0].allow  # n08 in no failure domain now: the pool's cap only
    assert (gauge(name, {"tier": "marginal"}), gauge(name, {"tier": "suspect"})) == (2, 0)


def test_evidence_reads_labels_too_keeps_the_alertname_and_an_integer_group_size() -> None:
    a = Alert("fp", "2026-11-29T10:00:00Z", "firing",
              {"node": "n01", "metric": "nvlink", "group_size": "20.0"}, {})  # fmt: skip
    ev = evidence_of(a)
    assert ev == {"metric": "nvlink", "group_size": 20, "alertname": ""}
    assert isinstance(ev["group_size"], int)
    assert evidence_of(avoid("n01"))["alertname"] == "GpuwardenMarginalNode"
    assert score_of(dataclasses.replace(avoid("n01"), annotations={})) == 0.0  # no evidence


def test_a_repeat_with_a_higher_score_keeps_the_higher_one(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    p.avoid(avoid("n01", score="1"))
    p.avoid(avoid("n01", fp="b", score="7"))
    assert p.store.entries()[0].score == 7.0


def test_unreadable_placement_groups_deny_on_the_scheduler_guard(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)

    def down() -> Mapping[str, frozenset[str]]:
        raise OSError("sinfo: timed out")

    p.projection.groups = down  # type: ignore[method-assign]
    v, _, events = p.avoid(avoid("n01"))
    assert (v.allow, v.guard, v.reason) == (False, "scheduler",
                                            "placement groups unreadable: sinfo: timed out")  # fmt: skip
    assert events == [] and p.listing() == []


def test_live_changes_are_journaled_each_time_they_happen_with_their_kind_and_metric(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    assert (
        Placement(p.journal, PlacementPolicy(), p.projection, clock.now, Metrics()).dry_run is False
    )
    [e] = p.avoid(avoid("n01"))[2]
    assert (e.node, e.action, dict(e.evidence)) == ("n01", "placement_apply", {"kind": "apply"})
    assert (e.verdict.allow, e.verdict.guard, e.verdict.reason) == (
        True,
        "placement",
        "mark marginal",
    )
    for _ in range(2):  # the same drift twice (a reconfigure): repaired and journaled each time
        p.projection.shown.clear()  # type: ignore[attr-defined]
        assert [x.action for x in p.tick()] == ["placement_apply"]
    count = p.metrics.registry.get_sample_value(
        c.REMEDIATION_PLACEMENT_REPAIRS.name, {"projection": "fake", "kind": "apply"}
    )
    assert count == 3


def test_idle_ticks_reconcile_once_and_a_restart_lists_before_its_first_tick(
    tmp_path: Path, clock: FakeClock
) -> None:
    p = placement(tmp_path, clock)
    calls = []
    real = p.projection.reconcile

    def counted(wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        calls.append(dict(wanted))
        return real(wanted, dry_run)

    p.projection.reconcile = counted  # type: ignore[method-assign]
    for _ in range(4):
        p.tick()
    assert calls == [{}]  # nothing shown, nothing wanted: the node table is not read again
    p.avoid(avoid("n01"))
    again = placement(tmp_path, clock)  # a restart: listed before any tick
    assert [r["node"] for r in again.listing()] == ["n01"]
