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
from remediation.model import Job, NodeView
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


# ------------------------------------------------------------------ one node, one tick
def _one(n: NodeRun, suite: str = "", timeout_s: float = 60.0, force: bool = False) -> Run:
    s = Spec((n.node,), Operation("command", ("fw",), timeout_s), 1, 5, 100.0, suite, force)
    return Run(1, s, "running", (n,), 0.0)


def _step(run: Run, **world: object) -> tuple[NodeRun, list[tuple[str, str, str, str]]]:
    fleet = world.pop("fleet", _fleet("a", drained=("a",)))
    w = World(world.pop("now", 1000.0), False, fleet, world.pop("faulted", frozenset()),  # type: ignore[arg-type]
              **world)  # type: ignore[arg-type]  # fmt: skip
    new, eff = machine.advance(run, w, POLICY)
    return new.nodes[0], [(e.kind, e.node, e.job, e.detail) for e in eff]


OPERATING = NodeRun("a", 0, "operating", 950.0, "empty", attempt=1, handle='{"pid": 1}')


def test_an_operation_not_yet_reported_is_running_until_its_timeout_then_fails() -> None:
    assert _step(_one(OPERATING)) == (OPERATING, [])  # nothing seen: still running
    assert _step(_one(OPERATING), op={"a": "running"}) == (OPERATING, [])
    at_limit = _step(_one(OPERATING, timeout_s=50.0), op={"a": "running"})
    assert at_limit == (OPERATING, [])  # exactly at the timeout: not yet
    n, eff = _step(_one(OPERATING, timeout_s=49.0), op={"a": "running"})
    assert (n.state, n.reason, n.since, n.finished) == (
        "failed",
        "operation timed out after 49s",
        1000.0,
        1000.0,
    )
    assert eff == [("keep_out", "a", "", "operation timed out after 49s")]


def test_a_lost_operation_is_started_again_and_a_failed_one_fails_its_node() -> None:
    n, eff = _step(_one(OPERATING), op={"a": "lost"})
    assert n == replace(OPERATING, handle="") and eff == [("operate", "a", "", "")]
    n, eff = _step(_one(OPERATING), op={"a": "failed: exit 3"})
    assert (n.state, n.reason) == ("failed", "operation failed: exit 3")
    assert eff == [("keep_out", "a", "", "operation failed: exit 3")]


def test_an_operation_that_ended_well_goes_to_its_suite_or_is_released() -> None:
    n, eff = _step(_one(OPERATING, suite="post"), op={"a": "ok"})
    assert (n.state, n.reason, n.attempt, n.handle, n.since) == (
        "validating",
        "suite post",
        2,
        "",
        1000.0,
    )
    assert eff == [("validate", "a", "", "")]
    n, eff = _step(_one(OPERATING), op={"a": "ok"})
    assert (n.state, n.reason, n.finished) == ("done", "operation ok; no validation suite", 1000.0)
    assert eff == [("release", "a", "", "")]
    n, eff = _step(_one(OPERATING), op={"a": "ok"}, faulted=frozenset({"a"}))
    assert n.state == "done" and eff == []  # a fault arrived meanwhile: it keeps the node
    assert n.reason == "operation ok; no validation suite; kept out: the fault path holds it"


VALIDATING = NodeRun("a", 0, "validating", 900.0, "suite post", attempt=2, handle='{"j": 1}')


def test_a_suite_is_waited_for_restarted_when_lost_and_its_verdict_applied() -> None:
    run = _one(VALIDATING, suite="post")
    assert _step(run) == (VALIDATING, [])
    assert _step(run, validation={"a": "running"}) == (VALIDATING, [])
    n, eff = _step(run, validation={"a": "lost"})
    assert n == replace(VALIDATING, handle="") and eff == [("validate", "a", "", "restart")]
    n, eff = _step(run, validation={"a": "passed"})
    assert (n.state, n.reason, n.finished) == ("done", "validation passed", 1000.0)
    assert eff == [("release", "a", "", "")]
    n, eff = _step(run, validation={"a": "failed: busbw 80"})
    assert (n.state, n.reason) == ("failed", "validation failed: busbw 80")
    assert eff == [("keep_out", "a", "", "validation failed: busbw 80")]


def test_a_node_the_fault_path_takes_before_its_operation_leaves_the_run() -> None:
    for state in ("pending", "draining", "stuck"):
        n, eff = _step(_one(NodeRun("a", 0, state, 900.0, deadline=2000.0)),
                       faulted=frozenset({"a"}))  # fmt: skip
        assert (n.state, n.reason, n.since, n.finished) == (
            "skipped",
            "taken by the fault path",
            1000.0,
            1000.0,
        ), state
        assert eff == []
    n, _ = _step(_one(OPERATING), faulted=frozenset({"a"}))
    assert n == OPERATING  # its operation started: it finishes


DRAINING = NodeRun("a", 0, "draining", 900.0, "taken out", deadline=2000.0, started=900.0)


def _jobs(*ids: str) -> dict[str, tuple[Job, ...]]:
    return {"a": tuple(Job(i, "RUNNING", ("a",)) for i in ids)}


def test_a_draining_node_is_drained_again_when_the_scheduler_lost_our_drain() -> None:
    n, eff = _step(_one(DRAINING), fleet=_fleet("a"), jobs=_jobs("7"))
    assert eff == [("drain", "a", "", ""), ("checkpoint", "a", "7", "")]
    n, eff = _step(_one(DRAINING), fleet=(), jobs=_jobs("7"))  # not in the fleet read
    assert eff[0] == ("drain", "a", "", "")
    n, eff = _step(_one(DRAINING), jobs=_jobs("7"))  # ours: not drained again
    assert eff == [("checkpoint", "a", "7", "")]
    assert n.signalled == ("7",) and n.signalled_at == 1000.0


def test_an_empty_node_goes_to_its_operation() -> None:
    n, eff = _step(_one(replace(DRAINING, attempt=3, handle="x")))
    assert (n.state, n.reason, n.attempt, n.handle, n.since) == (
        "operating",
        "empty",
        4,
        "",
        1000.0,
    )
    assert eff == [("operate", "a", "", "")]


def test_a_job_without_an_ack_is_asked_again_every_resignal_interval_and_not_before() -> None:
    asked = replace(DRAINING, signalled=("7",), signalled_at=1000.0 - machine_resignal())
    n, eff = _step(_one(asked), jobs=_jobs("7"))
    assert eff == [("checkpoint", "a", "7", "")] and n.signalled_at == 1000.0
    early = replace(asked, signalled_at=1000.0 - machine_resignal() + 0.5)
    n, eff = _step(_one(early), jobs=_jobs("7"))
    assert eff == [] and n.signalled_at == early.signalled_at and n.signalled == ("7",)
    n, eff = _step(_one(asked), jobs=_jobs("7"), acked=frozenset({"7"}))
    assert eff == [("requeue", "a", "7", "checkpointed")]  # acked: requeued, not asked again
    assert n.requeued == ("7",) and n.signalled_at == asked.signalled_at


def test_a_requeued_job_still_on_the_node_does_not_hold_up_the_others() -> None:
    node = replace(DRAINING, signalled=("7",), requeued=("7",), signalled_at=990.0)
    n, eff = _step(_one(node), jobs=_jobs("7", "8"))
    assert eff == [("checkpoint", "a", "8", "")]
    assert n.signalled == ("7", "8") and n.requeued == ("7",) and n.state == "draining"


def test_at_the_deadline_jobs_left_make_the_node_stuck_unless_forced() -> None:
    node = replace(DRAINING, deadline=1000.0, signalled=("7", "8"), signalled_at=995.0)
    n, eff = _step(_one(node), jobs=_jobs("7", "8"))
    assert (n.state, n.since) == ("stuck", 1000.0) and eff == []
    assert n.reason == "deadline passed, jobs left: 7, 8; operator: skip the node or force its jobs"
    before = replace(node, deadline=1000.5)
    assert _step(_one(before), jobs=_jobs("7", "8"))[0].state == "draining"
    n, eff = _step(_one(node, force=True), jobs=_jobs("7", "8"))
    assert eff == [("requeue", "a", "7", "forced: no checkpoint"),
                   ("requeue", "a", "8", "forced: no checkpoint")]  # fmt: skip
    assert n.state == "draining"
    stuck = replace(node, state="stuck")
    n, eff = _step(_one(stuck), jobs=_jobs("7", "8"))
    assert n.state == "stuck" and n.since == stuck.since  # not moved again


def machine_resignal() -> float:
    from remediation.maintenance.model import RESIGNAL_S

    return RESIGNAL_S


def test_a_release_is_dated_now_whether_or_not_a_fault_keeps_the_node() -> None:
    run = _one(VALIDATING, suite="post")
    n, _ = _step(run, validation={"a": "passed"})
    assert (n.since, n.finished) == (1000.0, 1000.0)
    n, eff = _step(run, validation={"a": "passed"}, faulted=frozenset({"a"}))
    assert (n.state, n.since, n.finished, eff) == ("done", 1000.0, 1000.0, [])
    assert n.reason == "validation passed; kept out: the fault path holds it"


def test_admission_counts_each_node_in_flight_once_against_the_wave_size() -> None:
    run = _run(NodeRun("a", 0, "operating", 50.0, handle="{}"), NodeRun("b", 0),
               NodeRun("c", 0), wave_size=2)  # fmt: skip
    world = World(100.0, False, _fleet("a", "b", "c", drained=("a",)), frozenset())
    new, eff = machine.advance(run, world, POLICY)
    assert [(e.kind, e.node) for e in eff] == [("drain", "b")]
    b = new.node("b")
    assert b is not None and (b.since, b.started, b.deadline) == (100.0, 100.0, 200.0)
    skipped = _run(NodeRun("z", 0), wave_size=1)
    new, _ = machine.advance(skipped, World(100.0, False, _fleet("y"), frozenset()), POLICY)
    assert new.nodes[0].state == "skipped"
    assert (new.nodes[0].since, new.nodes[0].finished) == (100.0, 100.0)


def test_an_operators_call_changes_only_the_node_it_names() -> None:
    run = _run(NodeRun("a", 0, "stuck", 10.0), NodeRun("b", 0, "draining", 20.0), wave_size=2)
    new, _ = machine.decide(run, "a", "force", 30.0)
    assert new.nodes[1] == run.nodes[1]
    new, _ = machine.decide(run, "b", "skip", 30.0)
    assert new.nodes[0] == run.nodes[0]


def test_a_stopped_run_still_restarts_a_lost_operation_it_had_begun() -> None:
    run = _run(NodeRun("a", 0, "operating", 950.0, handle="{}"),
               NodeRun("b", 0, "operating", 950.0, handle=""), wave_size=2)  # fmt: skip
    world = World(1000.0, False, _fleet("a", "b", drained=("a", "b")), frozenset(),
                  op={"a": "failed: exit 2", "b": "lost"})  # fmt: skip
    new, eff = machine.advance(run, world, POLICY)
    assert new.state == "stopped"
    assert [(e.kind, e.node) for e in eff] == [("keep_out", "a"), ("operate", "b")]


# ------------------------------------------------------------------ selection
def test_a_selection_by_domain_hostlist_and_partition_keeps_the_fleets_order() -> None:
    from remediation.maintenance import planner
    from remediation.maintenance.model import SpecError

    leaf = {"n1": "l1", "n2": "l2", "n3": "l1", "n4": "l2"}
    fleet = _fleet("n1", "n2", "n3", "n4", leaf=leaf)
    assert planner.select(fleet, {"leaf": "l1"}) == ("n1", "n3")
    assert planner.select(fleet, {"nodes": "n[3-4],n1"}) == ("n1", "n3", "n4")
    assert planner.select(fleet, {"nodes": ["n4", "n2"], "leaf": "l2"}) == ("n2", "n4")
    assert planner.select(fleet, {"leaf": "l2", "partition": "p"}, ("n4", "n1")) == ("n4",)
    with pytest.raises(SpecError, match=r"select.leaf: no node in leaf 'l9' \(topology\)"):
        planner.select(fleet, {"leaf": "l9"})
    with pytest.raises(SpecError, match=r"select.rack: no node in rack .l1."):
        planner.select(fleet, {"rack": "l1"})  # a value of another kind is not this one
    with pytest.raises(SpecError, match="unknown to the scheduler: n7, n8"):
        planner.select(fleet, {"nodes": ["n1", "n8", "n7"]})
    with pytest.raises(SpecError, match=r"select.partition: .p. has no node"):
        planner.select(fleet, {"partition": "p"}, ())
    with pytest.raises(SpecError, match="a list of names or a hostlist expression"):
        planner.select(fleet, {"nodes": ["n1", 2]})
    with pytest.raises(SpecError, match="a list of names or a hostlist expression"):
        planner.select(fleet, {"nodes": 3})
    with pytest.raises(SpecError, match=r"name nodes, a partition or a domain"):
        planner.select(fleet, {})


# ------------------------------------------------------------------ faults win
def test_faults_over_budget_take_back_the_newest_nodes_not_yet_operated_on_first() -> None:
    policy = replace(POLICY, fleet_budget=Budget(1.0, 2))
    run = _run(NodeRun("a", 0, "draining", 10.0, started=10.0, deadline=999.0),
               NodeRun("b", 0, "draining", 30.0, started=30.0, deadline=999.0),
               NodeRun("c", 0, "operating", 20.0, started=20.0, handle="{}"), wave_size=3)  # fmt: skip
    fleet = _fleet("a", "b", "c", "x", drained=("a", "b", "c", "x"))
    jobs = {"a": (Job("1", "RUNNING", ("a",)),), "b": (Job("2", "RUNNING", ("b",)),)}
    world = World(100.0, False, fleet, frozenset({"x"}), jobs, op={"c": "running"})
    new, eff = machine.advance(run, world, policy)
    states = {n.node: n.state for n in new.nodes}
    # 4 out (x for a fault), room for 2: b (taken last) and then a go back; c operates on
    assert states == {"a": "pending", "b": "pending", "c": "operating"}
    assert [(e.kind, e.node, e.detail) for e in eff if e.kind == "release"] == [
        ("release", "b", "yield"),
        ("release", "a", "yield"),
    ]
    policy3 = replace(POLICY, fleet_budget=Budget(1.0, 3))
    new, eff = machine.advance(run, world, policy3)
    assert {n.node: n.state for n in new.nodes}["a"] == "draining"  # only b, the newest
    assert [e.node for e in eff if e.kind == "release"] == ["b"]


def test_a_run_stopped_in_the_tick_that_admitted_a_node_releases_that_node() -> None:
    run = _run(NodeRun("a", 0, "operating", 950.0, handle="{}"), NodeRun("b", 0), wave_size=2)
    world = World(1000.0, False, _fleet("a", "b", drained=("a",)), frozenset(),
                  op={"a": "failed: exit 2"})  # fmt: skip
    new, eff = machine.advance(run, world, POLICY)
    assert new.state == "stopped" and new.node("b").state == "skipped"  # type: ignore[union-attr]
    assert ("release", "b") not in [(e.kind, e.node) for e in eff]  # never drained
    admitted = _run(NodeRun("a", 0, "operating", 950.0, handle="{}"),
                    NodeRun("b", 0, "draining", 1000.0, deadline=2000.0), wave_size=2)  # fmt: skip
    before = {"a": "operating", "b": "pending"}  # b admitted earlier in this same tick
    nodes, eff2 = machine._give_back(admitted.nodes, before, 1000.0, "stopped", "stopped")
    assert [(e.kind, e.node) for e in eff2] == [("release", "b")]
    assert nodes[1].state == "skipped"


def test_a_failed_nodes_event_is_a_warning_and_others_are_info(tmp_path: Path) -> None:
    j = Journal(tmp_path / "state.db")
    store.ensure(j)
    run = store.create(j, Spec(("a", "b"), Operation("none"), 2), (NodeRun("a", 0),
                       NodeRun("b", 0)), 5.0, "alice")  # fmt: skip
    moved = replace(run, nodes=(run.nodes[0].to("failed", 6.0, "exit 3"),
                                run.nodes[1].to("draining", 6.0, "taken out")))  # fmt: skip
    store.save(j, run, moved, 7.0, "gpuwarden/test")
    rows = {r["partition"]: r for r in j.rows("SELECT * FROM outbox")}
    assert set(rows) == {"a", "b"}
    a, b = json.loads(rows["a"]["event"]), json.loads(rows["b"]["event"])
    assert (a["severity"], b["severity"]) == ("warning", "info")
    assert (a["partitionkey"], a["subject"]) == ("a", "a")
    assert rows["a"]["created_at"] == 7.0
