"""The maintenance machine's edges that the property test reaches only by chance, each pinned
by hand: progress and its ETA, the operator's skip and force, an abort and a stopped run
giving nodes back, admission around a full domain, and what the journal keeps of a run
(round trip, one CloudEvent per transition)."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest

from remediation.journal import Journal
from remediation.maintenance import machine, store
from remediation.maintenance.model import NodeRun, Operation, Run, Spec, World
from remediation.model import NodeView
from remediation.policy import Budget
from tests.remediation.helpers import live_policy

POLICY = live_policy(fleet_budget=Budget(1.0, 8))


def _run(*nodes: NodeRun, wave_size: int = 1, max_failures: int = 0) -> Run:
    s = Spec(tuple(n.node for n in nodes), Operation("none"), wave_size, max_failures, 100.0)
    return Run(1, s, "running", nodes, 100.0)


def _fleet(*names: str, drained: tuple[str, ...] = (), leaf: dict[str, str] | None = None
           ) -> tuple[NodeView, ...]:  # fmt: skip
    leaf = leaf or {}
    return tuple(NodeView(n, n in drained, n in drained, "gpuwarden: maintenance",
                          {"leaf": leaf[n]} if n in leaf else {}) for n in names)  # fmt: skip


# ------------------------------------------------------------------ progress
def test_progress_is_the_share_of_nodes_finished_and_the_eta_the_pace_times_what_is_left() -> None:
    run = _run(
        NodeRun("a", 0, "done", started=100.0, finished=200.0),
        NodeRun("b", 0, "failed", started=100.0, finished=300.0),
        NodeRun("c", 1, "skipped", finished=150.0),
        NodeRun("d", 1, "draining", started=300.0),
        NodeRun("e", 2),
    )
    done, eta = machine.progress(run, now=350.0)
    assert done == pytest.approx(3 / 5)
    # pace: (300 - 100) / 2 finished by the operation = 100 s a node; 2 left, 50 s since
    assert eta == pytest.approx(100.0 * 2 - 50.0)
    assert machine.progress(run, now=10_000.0)[1] == 0.0  # late: never negative


def test_progress_has_no_eta_before_a_node_finished_and_zero_left_when_all_are() -> None:
    fresh = _run(NodeRun("a", 0, "draining", started=100.0), NodeRun("b", 1))
    assert machine.progress(fresh, 150.0) == (0.0, None)
    skipped_only = _run(NodeRun("a", 0, "skipped", finished=120.0), NodeRun("b", 1))
    assert machine.progress(skipped_only, 150.0) == (0.5, None)  # no pace from a skip
    over = _run(NodeRun("a", 0, "done", started=100.0, finished=200.0),
                NodeRun("b", 0, "skipped", finished=250.0))  # fmt: skip
    assert machine.progress(over, 300.0) == (1.0, 0.0)
    empty = replace(fresh, nodes=())
    assert machine.progress(empty, 150.0) == (0.0, None)  # nothing to divide by, no pace


def test_the_eta_starts_from_the_runs_creation_when_no_node_was_taken_yet() -> None:
    run = _run(NodeRun("a", 0, "failed", finished=160.0), NodeRun("b", 1))
    _, eta = machine.progress(run, now=160.0)
    assert eta == pytest.approx(60.0)  # created at 100, one node in 60 s, one left


# ------------------------------------------------------------------ the operator's calls
def test_skip_releases_a_drained_node_but_not_a_pending_one_and_force_only_a_drained_one() -> None:
    run = _run(NodeRun("a", 0, "draining", deadline=500.0), NodeRun("b", 1),
               NodeRun("c", 0, "operating"), NodeRun("d", 0, "stuck"))  # fmt: skip
    new, eff = machine.decide(run, "a", "skip", 200.0)
    a = new.node("a")
    assert a is not None and (a.state, a.reason, a.since, a.finished) == (
        "skipped",
        "skipped by the operator",
        200.0,
        200.0,
    )
    assert [(e.kind, e.node, e.detail) for e in eff] == [("release", "a", "skip")]
    new, eff = machine.decide(run, "b", "skip", 200.0)
    assert eff == [] and new.node("b").state == "skipped"  # type: ignore[union-attr]
    new, eff = machine.decide(run, "d", "force", 210.0)
    d = new.node("d")
    assert d is not None and eff == []
    assert (d.state, d.forced, d.deadline, d.reason) == ("draining", True, 210.0,
                                                         "forced by the operator")  # fmt: skip
    with pytest.raises(ValueError, match="node c is operating: only a pending, draining or stuck"):
        machine.decide(run, "c", "skip", 200.0)
    with pytest.raises(ValueError, match="node b is pending: only a draining or stuck node"):
        machine.decide(run, "b", "force", 200.0)
    with pytest.raises(ValueError, match="node z is not in run 1"):
        machine.decide(run, "z", "skip", 200.0)
    with pytest.raises(ValueError, match="choice must be skip or force, not 'drop'"):
        machine.decide(run, "a", "drop", 200.0)


def test_an_abort_gives_back_what_was_not_operated_on_and_lets_the_rest_finish() -> None:
    run = _run(NodeRun("a", 0, "draining"), NodeRun("b", 0, "operating"), NodeRun("c", 1),
               NodeRun("d", 0, "done"), NodeRun("e", 0, "stuck"))  # fmt: skip
    new, eff = machine.abort(run, 300.0, "by erin")
    assert new.state == "aborted" and new.reason == "by erin"
    states = {n.node: (n.state, n.reason) for n in new.nodes}
    assert states == {"a": ("skipped", "aborted: by erin"), "b": ("operating", ""),
                      "c": ("skipped", "aborted: by erin"), "d": ("done", ""),
                      "e": ("skipped", "aborted: by erin")}  # fmt: skip
    assert all(n.finished == 300.0 and n.since == 300.0 for n in new.nodes if n.state == "skipped")
    assert [(e.kind, e.node, e.detail) for e in eff] == [("release", "a", "abort"),
                                                         ("release", "e", "abort")]  # fmt: skip


def test_a_stopped_run_gives_back_a_node_admitted_this_tick_and_cancels_its_drain() -> None:
    run = _run(NodeRun("a", 0, "operating", handle="{}"), NodeRun("b", 0), NodeRun("c", 0),
               wave_size=3)  # fmt: skip
    world = World(400.0, False, _fleet("a", "b", "c", drained=("a",)), frozenset(),
                  op={"a": "failed: exit 2"})  # fmt: skip
    new, eff = machine.advance(run, world, POLICY)
    assert new.state == "stopped" and new.reason.startswith("1 nodes failed")
    assert "max_failures=0" in new.reason
    b = new.node("b")
    assert b is not None and b.state == "skipped" and b.finished == 400.0
    assert b.reason == f"run stopped: {new.reason}"
    assert [(e.kind, e.node, e.detail) for e in eff] == [
        ("keep_out", "a", "operation failed: exit 2")
    ]


def test_a_node_draining_when_the_run_stops_is_released_with_the_stop_as_reason() -> None:
    run = _run(NodeRun("a", 0, "operating", handle="{}"), NodeRun("b", 0, "draining",
               deadline=900.0), wave_size=2)  # fmt: skip
    world = World(400.0, False, _fleet("a", "b", drained=("a", "b")), frozenset(),
                  op={"a": "failed: exit 2"})  # fmt: skip
    new, eff = machine.advance(run, world, POLICY)
    assert [(e.kind, e.node, e.detail) for e in eff] == [
        ("keep_out", "a", "operation failed: exit 2"),
        ("release", "b", "stopped"),
    ]
    assert new.node("b").state == "skipped"  # type: ignore[union-attr]


def test_a_failed_node_is_finished_now_and_kept_out_with_its_reason() -> None:
    run = _run(NodeRun("a", 0, "validating", handle="{}"), NodeRun("b", 1), wave_size=1,
               max_failures=1)  # fmt: skip
    world = World(500.0, False, _fleet("a", "b", drained=("a",)), frozenset(),
                  validation={"a": "failed: busbw 80 < 100"})  # fmt: skip
    new, eff = machine.advance(run, world, POLICY)
    a = new.node("a")
    assert a is not None
    assert (a.state, a.since, a.finished, a.reason) == ("failed", 500.0, 500.0,
                                                        "validation failed: busbw 80 < 100")  # fmt: skip
    assert ("keep_out", "a", "validation failed: busbw 80 < 100") in [
        (e.kind, e.node, e.detail) for e in eff
    ]
    assert new.node("b").state == "draining"  # type: ignore[union-attr]  # within max_failures


# ------------------------------------------------------------------ admission
def test_admission_skips_a_node_whose_domain_is_full_and_takes_a_later_one_of_another() -> None:
    leaf_budget = replace(POLICY, domain_budgets={"leaf": Budget(1.0, 1)})
    leaf = {"a": "l1", "b": "l1", "c": "l2", "x": "l1"}
    run = _run(NodeRun("a", 0), NodeRun("b", 0), NodeRun("c", 0), wave_size=3)
    world = World(100.0, False, _fleet("a", "b", "c", "x", drained=("x",), leaf=leaf),
                  frozenset({"x"}))  # fmt: skip
    new, eff = machine.advance(run, world, leaf_budget)
    assert [(n.node, n.state) for n in new.nodes] == [("a", "pending"), ("b", "pending"),
                                                      ("c", "draining")]  # fmt: skip
    assert [(e.kind, e.node) for e in eff] == [("drain", "c")]
    c = new.node("c")
    assert c is not None and (c.started, c.deadline, c.reason) == (100.0, 200.0, "taken out")


def test_admission_takes_only_the_current_waves_pending_nodes_up_to_the_wave_size() -> None:
    run = _run(NodeRun("a", 0, "done"), NodeRun("b", 0), NodeRun("c", 1), NodeRun("d", 0),
               NodeRun("e", 0), wave_size=2)  # fmt: skip
    new, eff = machine.advance(run, World(100.0, False, _fleet(*"abcde"), frozenset()), POLICY)
    assert [e.node for e in eff] == ["b", "d"]
    assert [n.state for n in new.nodes] == ["done", "draining", "pending", "draining", "pending"]


def test_admission_skips_a_node_the_scheduler_does_not_know_or_someone_else_drained() -> None:
    run = _run(NodeRun("a", 0), NodeRun("b", 0), NodeRun("c", 0), wave_size=3)
    fleet = (NodeView("b", True, False, "admin: fan"), NodeView("c"))
    new, eff = machine.advance(run, World(100.0, False, fleet, frozenset()), POLICY)
    got = {n.node: (n.state, n.reason) for n in new.nodes}
    assert got["a"] == ("skipped", "unknown to the scheduler")
    assert got["b"] == ("skipped", "out of service by someone else: 'admin: fan'")
    assert got["c"] == ("draining", "taken out")
    assert [e.node for e in eff] == ["c"]


# ------------------------------------------------------------------ the journal
def test_a_run_round_trips_through_the_journal_with_every_node_field(tmp_path: Path) -> None:
    j = Journal(tmp_path / "state.db")
    store.ensure(j)
    spec = Spec(("a", "b"), Operation("command", ("fw", "{node}"), 60.0), 2, 1, 30.0,
                "post-maintenance", True, "fw 2.1", {"nodes": ["a", "b"]})  # fmt: skip
    run = store.create(j, spec, (NodeRun("a", 0), NodeRun("b", 0)), 5.0, "alice")
    assert store.load(j, run.id) == run and store.load(j, run.id, reader=True) == run
    moved = replace(run, state="paused", reason="by bob", nodes=(
        NodeRun("a", 0, "draining", 6.0, "taken out", 36.0, ("7",), 6.0, ("7",), True, 2,
                '{"h": 1}', 6.0, 0.0), run.nodes[1]))  # fmt: skip
    store.save(j, run, moved, 7.0, None)
    assert store.load(j, run.id) == moved
    assert store.ids(j) == [run.id] and store.ids(j, live_only=True) == [run.id]
    store.save(j, moved, replace(moved, state="done"), 8.0, None)
    assert store.ids(j, live_only=True) == [] and store.ids(j, reader=True) == [run.id]
    assert store.load(j, run.id + 1) is None


def test_each_transition_is_one_cloudevent_in_the_same_transaction(tmp_path: Path) -> None:
    j = Journal(tmp_path / "state.db")
    store.ensure(j)
    spec = Spec(("a",), Operation("none"), 1)
    run = store.create(j, spec, (NodeRun("a", 0),), 5.0, "alice")
    drained = replace(run, nodes=(run.nodes[0].to("draining", 6.0, "taken out"),))
    store.save(j, run, drained, 6.0, "gpuwarden/test")
    again = replace(drained, nodes=(replace(drained.nodes[0], signalled=("7",)),))
    store.save(j, drained, again, 7.0, "gpuwarden/test")  # no state change: no event
    stopped = replace(again, state="aborted", reason="by bob")
    store.save(j, again, stopped, 8.0, "gpuwarden/test")
    rows = j.rows("SELECT * FROM outbox ORDER BY rowid")
    events = [json.loads(r["event"]) if "event" in r else r for r in rows]
    ids = [r["id"] if "id" in r else r.get("event_id") for r in rows]
    assert len(rows) == 2, rows
    assert ids[0] == f"maintenance-{run.id}-a-draining-6.000000"
    assert ids[1] == f"maintenance-{run.id}-run-aborted-8.000000"
    node_event = json.dumps(events[0])
    for want in ('"node": "a"', '"state": "draining"', '"reason": "taken out"',
                 f'"run": {run.id}', '"operation": "none"'):  # fmt: skip
        assert want in node_event, node_event
    assert '"reason": "by bob"' in json.dumps(events[1])
    assert store.load(j, run.id).state == "aborted"  # type: ignore[union-attr]
    assert math.isclose(store.load(j, run.id).nodes[0].since, 6.0)  # type: ignore[union-attr]
