"""The maintenance runner's edge, effect by effect, on a hand-written scheduler that records
every call: what each effect asks the scheduler for (and what it must not), what an effect
that raises leaves behind so that the next tick retries it or the node fails closed, and the
operator's verbs. The machine decides; these tests pin that the runner does what it decided."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from remediation.backends.base import BackendError
from remediation.executor import ack_path
from remediation.journal import Journal
from remediation.maintenance import runner as runner_mod
from remediation.maintenance import store
from remediation.maintenance.model import Effect, NodeRun, Run, SpecError
from remediation.maintenance.runner import Maintenance
from remediation.model import Job, NodeView
from remediation.policy import Budget
from tests.remediation.helpers import live_policy

NODES = ("n1", "n2", "n3", "n4")
JOB = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "fw"},
    "spec": {"template": {"spec": {"containers": [{"name": "fw", "image": "fw:1"}]}}},
}


class Scheduler:
    """Nodes with their drain state and jobs; every call recorded; ``fail`` makes the named
    call raise BackendError (once per entry)."""

    name = "slurm"

    def __init__(self) -> None:
        self.views = {n: NodeView(n) for n in NODES}
        self.jobs: dict[str, Job] = {}
        self.calls: list[tuple[Any, ...]] = []
        self.fail: list[str] = []

    def _maybe_fail(self, call: str) -> None:
        if call in self.fail:
            self.fail.remove(call)
            raise BackendError(f"{call}: slurmctld said no")

    def fleet(self) -> tuple[NodeView, ...]:
        return tuple(self.views.values())

    def node(self, name: str) -> NodeView | None:
        return self.views.get(name)

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return tuple(j for j in self.jobs.values() if node in j.nodes)

    def job(self, job_id: str) -> Job | None:
        return self.jobs.get(job_id)

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        self.calls.append(("take_out", node, reason, evict))
        self._maybe_fail("take_out")
        self.views[node] = replace(self.views[node], out_of_service=True, ours=True, reason=reason)
        return "drained"

    def is_taken_out(self, node: str) -> bool:
        return self.views[node].ours

    def release(self, node: str) -> str:
        self.calls.append(("release", node))
        self._maybe_fail("release")
        self.views[node] = NodeView(node)
        return "resumed"

    def request_checkpoint(self, job: Job) -> None:
        self.calls.append(("checkpoint", job.job_id))
        self._maybe_fail("checkpoint")

    def requeue(self, job: Job, exclude: str) -> None:
        self.calls.append(("requeue", job.job_id, exclude))
        self._maybe_fail("requeue")

    def reboot(self, node: str, reason: str) -> str:
        raise AssertionError("maintenance never reboots through the fault path's verb")

    def mark(self, node: str, state: str) -> None:
        self.calls.append(("mark", node, state))

    def kinds(self) -> list[tuple[Any, ...]]:
        return [c for c in self.calls if c[0] != "mark"]


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _maint(tmp_path: Path, sched: Scheduler | None = None, **kw: Any) -> Maintenance:
    pol = live_policy(fleet_budget=Budget(1.0, 4))
    pol = replace(pol, checkpoint=replace(pol.checkpoint, ack_dir=str(tmp_path / "acks")))
    (tmp_path / "acks").mkdir(exist_ok=True)
    journal = Journal(tmp_path / "state.db")
    return Maintenance(journal, sched or Scheduler(), pol, Clock(), lambda: False, None,
                       tmp_path / "state", **kw)  # fmt: skip


def _run(m: Maintenance, nodes: tuple[str, ...] = ("n1",), **spec: Any) -> Run:
    raw = {"select": {"nodes": list(nodes)}, "operation": {"kind": "none"},
           "reason": "driver 570", **spec}  # fmt: skip
    return m.start(raw, "alice")


def _node(m: Maintenance, run_id: int, node: str) -> NodeRun:
    run = store.load(m.journal, run_id)
    assert run is not None
    n = run.node(node)
    assert n is not None
    return n


# ------------------------------------------------------------------ each effect
def test_a_drain_takes_the_node_out_without_eviction_with_the_runs_id_and_reason(
    tmp_path: Path,
) -> None:
    m = _maint(tmp_path)
    run = _run(m)
    m.tick()
    (call,) = m.backend.kinds()  # type: ignore[attr-defined]
    assert call == ("take_out", "n1", f"gpuwarden: maintenance {run.id} driver 570", False)


def test_a_drain_reason_is_cut_to_what_a_scheduler_keeps(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m)
    long = replace(run, id=10**150, spec=replace(run.spec, reason="x" * 120))
    m._effect(long, Effect("drain", "n1"))
    reason = m.backend.kinds()[0][2]  # type: ignore[attr-defined]
    assert len(reason) == 200 and reason.startswith("gpuwarden: maintenance 1000")
    assert reason.endswith("x" * 23)


def test_a_running_job_is_asked_to_checkpoint_and_a_stale_ack_of_it_does_not_count(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    sched.jobs["7"] = Job("7", "RUNNING", ("n1",))
    m = _maint(tmp_path, sched)
    stale = ack_path(m.policy.checkpoint.ack_dir, "7")
    stale.write_text("an ack from a checkpoint before this run\n")
    run = _run(m)
    m.tick()  # drain
    m.tick()  # the job asked to checkpoint
    assert ("checkpoint", "7") in sched.calls
    assert not stale.exists()  # a stale ack must not release the node at once
    assert _node(m, run.id, "n1").signalled == ("7",)
    assert not [c for c in sched.calls if c[0] == "requeue"]


def test_a_job_that_is_not_running_is_not_asked_to_checkpoint(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m)
    for state in ("PENDING", "COMPLETING", "SUSPENDED"):
        sched.jobs["7"] = Job("7", state, ("n1",))
        m._effect(run, Effect("checkpoint", "n1", job="7"))
    del sched.jobs["7"]
    m._effect(run, Effect("checkpoint", "n1", job="7"))  # gone meanwhile
    assert sched.calls == []


def test_an_acked_job_is_requeued_off_its_node(tmp_path: Path) -> None:
    sched = Scheduler()
    sched.jobs["7"] = Job("7", "RUNNING", ("n1", "n2"))
    m = _maint(tmp_path, sched)
    run = _run(m)
    m.tick()
    m.tick()
    ack_path(m.policy.checkpoint.ack_dir, "7").write_text("ok\n")
    m.tick()
    assert ("requeue", "7", "n1") in sched.calls
    assert _node(m, run.id, "n1").requeued == ("7",)


def test_a_requeue_is_only_of_a_job_still_running_on_the_node(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m)
    for job in (Job("7", "RUNNING", ("n2",)), Job("7", "PENDING", ("n1",)),
                Job("7", "COMPLETED", ("n1",))):  # fmt: skip
        sched.jobs["7"] = job
        m._effect(run, Effect("requeue", "n1", job="7"))
    del sched.jobs["7"]
    m._effect(run, Effect("requeue", "n1", job="7"))
    assert sched.calls == []
    sched.jobs["7"] = Job("7", "SUSPENDED", ("n1",))
    m._effect(run, Effect("requeue", "n1", job="7"))
    assert sched.calls == [("requeue", "7", "n1")]


def test_a_release_is_only_of_a_node_gpuwarden_drained_and_no_fault_holds(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m)
    sched.views["n1"] = NodeView("n1", True, False, "admin: bad fan")  # someone else's drain
    sched.views["n2"] = NodeView("n2")  # in service
    sched.views["n3"] = NodeView("n3", True, True, "gpuwarden: maintenance 1")
    sched.views["n4"] = NodeView("n4", True, True, "gpuwarden: xid 79")
    with m.journal.tx() as db:
        m.journal.set_node(db, "n4", state="quarantined", fault_class="xid_fatal")
    for n in NODES:
        m._effect(run, Effect("release", n))
    assert sched.calls == [("release", "n3")]


def test_a_node_kept_out_enters_the_fault_path_with_its_reason_and_a_decision(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m, nodes=("n1", "n2"))
    sched.views["n2"] = NodeView("n2", True, True, "gpuwarden: maintenance")
    m._effect(run, Effect("keep_out", "n1", detail="validation failed: busbw 80"))
    m._effect(run, Effect("keep_out", "n2", detail="operation exit 3"))
    takes = [c for c in sched.calls if c[0] == "take_out"]
    assert takes == [("take_out", "n1",
                      f"gpuwarden: maintenance {run.id} failed: validation failed: busbw 80",
                      False)]  # fmt: skip  # n2 is out already: not drained again
    assert m.journal.held_nodes() >= {"n1", "n2"}
    row = m.journal.node("n1")
    assert row is not None
    assert (row["state"], row["fault_class"], row["action"]) == ("quarantined", "maintenance",
                                                                 "drain")  # fmt: skip
    assert row["reason"] == f"maintenance {run.id}: validation failed: busbw 80"
    assert row["since"] == m.clock() and row["resolved_at"] is None
    decisions = m.journal.rows("SELECT * FROM decisions WHERE node='n1'")
    assert len(decisions) == 1
    d = decisions[0]
    assert (d["alert_key"], d["fault_class"], d["action"], d["verdict"], d["guard"]) == (
        f"maintenance-{run.id}-n1",
        "maintenance",
        "drain",
        "allow",
        "maintenance",
    )
    assert d["reason"] == f"run {run.id}: validation failed: busbw 80"
    assert json.loads(d["evidence"]) == {"run": run.id} and d["at"] == m.clock()


# ------------------------------------------------------------------ effects that raise
def test_a_checkpoint_request_that_fails_is_asked_again_on_the_next_tick(tmp_path: Path) -> None:
    sched = Scheduler()
    sched.jobs["7"] = Job("7", "RUNNING", ("n1",))
    sched.jobs["8"] = Job("8", "RUNNING", ("n1",))
    m = _maint(tmp_path, sched)
    run = _run(m)
    m.tick()
    sched.fail.append("checkpoint")
    m.tick()  # the first request raises, the second is still asked
    assert [c for c in sched.calls if c[0] == "checkpoint"] == [("checkpoint", "7"),
                                                                ("checkpoint", "8")]  # fmt: skip
    n = _node(m, run.id, "n1")
    assert n.signalled == ("8",) and n.state == "draining"
    m.tick()
    assert [c for c in sched.calls if c[0] == "checkpoint"][-1] == ("checkpoint", "7")
    assert sorted(_node(m, run.id, "n1").signalled) == ["7", "8"]


def test_a_requeue_that_fails_is_tried_again(tmp_path: Path) -> None:
    sched = Scheduler()
    sched.jobs["7"] = Job("7", "RUNNING", ("n1",))
    m = _maint(tmp_path, sched)
    run = _run(m)
    m.tick()
    m.tick()
    ack_path(m.policy.checkpoint.ack_dir, "7").write_text("ok\n")
    sched.fail.append("requeue")
    m.tick()
    assert _node(m, run.id, "n1").requeued == ()
    m.tick()
    assert [c for c in sched.calls if c[0] == "requeue"] == [("requeue", "7", "n1")] * 2
    assert _node(m, run.id, "n1").requeued == ("7",)


def test_an_operation_that_cannot_start_fails_its_node_closed(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m, nodes=("n1", "n2"), wave_size=2, max_failures=2)

    class Refusing:
        def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
            if node == "n1":
                raise OSError("no such file: /opt/fw/flash")
            return {"node": node}

        def poll(self, handle: dict[str, Any]) -> str:
            return "running"

    m.operators[run.id] = Refusing()  # type: ignore[assignment]
    for _ in range(3):
        m.tick()
    n1, n2 = _node(m, run.id, "n1"), _node(m, run.id, "n2")
    assert n1.state == "failed" and "operate failed: OSError: no such file" in n1.reason
    assert n2.state == "operating" and json.loads(n2.handle) == {"node": "n2"}
    assert "n1" in m.journal.held_nodes() and "n2" not in m.journal.held_nodes()


def test_a_validation_without_a_suite_runner_fails_its_node_closed(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m)
    cur = store.load(m.journal, run.id)
    assert cur is not None
    out = m._apply(cur, [Effect("validate", "n1")], before=cur)
    n = out.node("n1")
    assert n is not None and n.state == "failed" and "no suite runner" in n.reason
    assert n.finished == m.clock() and n.since == m.clock()
    assert "n1" in m.journal.held_nodes()


def test_a_drain_someone_else_holds_skips_the_node_and_any_other_drain_failure_retries(
    tmp_path: Path,
) -> None:
    run = Run(1, runner_mod.store_spec({"operation": {"kind": "none"}}, ("n1",), frozenset()),
              "running", (NodeRun("n1", 0, "draining", 5.0),), 0.0)  # fmt: skip
    skipped = runner_mod._undo(run, Effect("drain", "n1"), "drained by someone else", 9.0)
    assert skipped.nodes[0].state == "skipped" and skipped.nodes[0].finished == 9.0
    assert skipped.nodes[0].reason == "drained by someone else"
    assert runner_mod._undo(run, Effect("drain", "n1"), "timed out", 9.0) == run
    pending = replace(run, nodes=(NodeRun("n1", 0),))
    assert runner_mod._undo(pending, Effect("drain", "n1"), "by someone else", 9.0) == pending
    assert runner_mod._undo(run, Effect("release", "n1"), "HTTP 500", 9.0) == run
    assert runner_mod._undo(run, Effect("drain", "n9"), "by someone else", 9.0) == run


def test_one_failed_effect_does_not_stop_the_others(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m, nodes=("n1", "n2", "n3"), wave_size=3)
    sched.fail.append("take_out")
    m.tick()
    assert [c[1] for c in sched.calls if c[0] == "take_out"] == ["n1", "n2", "n3"]
    assert not sched.views["n1"].out_of_service
    assert sched.views["n2"].ours and sched.views["n3"].ours
    m.tick()  # the failed drain read back and asked again
    assert sched.views["n1"].ours
    assert _node(m, run.id, "n1").state in ("draining", "operating")
    assert [c[1] for c in sched.calls if c[0] == "take_out"].count("n1") == 2


# ------------------------------------------------------------------ reconciliation
def test_a_done_node_still_drained_by_us_is_released_again_unless_kept_or_faulted(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m, nodes=NODES, wave_size=4)
    cur = store.load(m.journal, run.id)
    assert cur is not None
    done = tuple(
        n.to("done", 5.0, why, finished=5.0)
        for n, why in zip(
            cur.nodes,
            (
                "validation passed",
                "validation passed",
                "validation passed; kept out: the fault path holds it",
                "validation passed",
            ),
            strict=True,
        )
    )
    store.save(m.journal, cur, replace(cur, nodes=done), 5.0, None)
    for n in NODES:
        sched.views[n] = NodeView(n, True, n != "n2", "gpuwarden: maintenance")
    with m.journal.tx() as db:
        m.journal.set_node(db, "n4", state="quarantined", fault_class="xid_fatal")
    m.tick()
    assert [c for c in sched.calls if c[0] == "release"] == [("release", "n1")]


# ------------------------------------------------------------------ the operator's verbs
def test_pause_resume_and_abort_move_the_run_and_refuse_what_cannot_be(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m, nodes=("n1", "n2"))
    m.tick()  # n1 draining
    paused = m.set_state(run.id, "pause", "bob")
    assert paused.state == "paused" and paused.reason == "paused by bob"
    assert store.load(m.journal, run.id).state == "paused"  # type: ignore[union-attr]
    m.tick()
    assert [c[0] for c in sched.kinds()] == ["take_out"]  # nothing moves while paused
    other = _run(m, nodes=("n3",))
    with pytest.raises(ValueError, match=f"run {other.id} is running, not paused"):
        m.set_state(other.id, "resume", "bob")
    resumed = m.set_state(run.id, "resume", "bob")
    assert resumed.state == "running" and resumed.reason == ""
    with pytest.raises(ValueError, match="unknown verb"):
        m.set_state(run.id, "restart", "bob")
    aborted = m.set_state(run.id, "abort", "carol")
    assert aborted.state == "aborted" and aborted.reason == "by carol"
    assert ("release", "n1") in sched.calls  # drained, not operated on: given back
    assert {n.state for n in aborted.nodes} == {"skipped"}
    with pytest.raises(ValueError, match="is aborted"):
        m.set_state(run.id, "resume", "bob")
    with pytest.raises(LookupError, match="no maintenance run 99"):
        m.set_state(99, "pause", "bob")


def test_the_operators_skip_releases_a_drained_node_and_unknown_runs_are_refused(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    run = _run(m)
    m.tick()
    new = m.decide(run.id, "n1", "skip", "dave")
    assert new.node("n1").state == "skipped"  # type: ignore[union-attr]
    assert store.load(m.journal, run.id).node("n1").state == "skipped"  # type: ignore[union-attr]
    assert sched.calls[-1] == ("release", "n1")
    with pytest.raises(LookupError, match="no maintenance run 42"):
        m.decide(42, "n1", "skip", "dave")


def test_a_plan_says_what_is_out_and_what_room_the_budgets_leave_changing_nothing(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    sched.views["n4"] = NodeView("n4", True, True, "gpuwarden: xid 79")
    m = _maint(tmp_path, sched)
    with m.journal.tx() as db:
        m.journal.set_node(db, "n4", state="quarantined", fault_class="xid_fatal")
    spec, waves, room = m.plan({"select": {"nodes": ["n1", "n2", "n3", "n4"]}, "wave_size": 2,
                                "operation": {"kind": "none"}})  # fmt: skip
    assert spec.nodes == ("n1", "n2", "n3", "n4") and spec.wave_size == 2
    assert [len(w) for w in waves] == [2, 2]
    assert room["out_now"] == ["n4"] and room["fleet_size"] == 4
    assert room["skipped"] == ["n4"] and room["over_budget"] == []
    assert room["headroom"]
    assert sched.calls == [] and store.ids(m.journal) == []


def test_a_plan_refuses_what_this_backend_cannot_run(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    with pytest.raises(SpecError, match="expected a JSON object"):
        m.plan(["n1"])
    with pytest.raises(SpecError, match="this backend has no partitions"):
        m.plan({"select": {"partition": "gpu"}, "operation": {"kind": "none"}})
    m.backend.name = "kubernetes"  # type: ignore[misc]
    with pytest.raises(SpecError, match="only with --backend slurm"):
        m.plan({"select": {"nodes": ["n1"]}, "operation": {"kind": "slurm_reboot"}})
    with pytest.raises(SpecError, match="kube_job: only with --backend kubernetes"):
        m.plan({"select": {"nodes": ["n1"]}, "operation": {"kind": "kube_job", "job": JOB}})


def test_a_plan_by_partition_asks_the_scheduler_for_its_members(tmp_path: Path) -> None:
    asked = []

    def members(p: str) -> tuple[str, ...]:
        asked.append(p)
        return ("n2", "n3")

    m = _maint(tmp_path, partition=members)
    spec, _, _ = m.plan({"select": {"partition": "gpu"}, "operation": {"kind": "none"}})
    assert asked == ["gpu"] and spec.nodes == ("n2", "n3")


def test_a_started_run_is_journaled_with_its_nodes_in_waves_and_who_started_it(
    tmp_path: Path,
) -> None:
    m = _maint(tmp_path)
    run = _run(m, nodes=("n1", "n2", "n3"), wave_size=2)
    got = m.get(run.id)
    assert got is not None and got == run
    assert (got.who, got.state, got.created_at) == ("alice", "running", m.clock())
    assert [(n.node, n.wave, n.state) for n in got.nodes] == [
        ("n1", 0, "pending"),
        ("n2", 0, "pending"),
        ("n3", 1, "pending"),
    ]
    assert [r.id for r in m.runs()] == [run.id]
    assert m.get(run.id + 1) is None


class Gauges:
    def __init__(self) -> None:
        self.values: dict[tuple[str, ...], float] = {}
        self.cleared = 0

    def clear(self) -> None:
        self.cleared += 1
        self.values.clear()

    def labels(self, *labels: str) -> Gauges:
        self._at = labels
        return self

    def set(self, v: float) -> None:
        self.values[self._at] = v


def _metrics() -> Any:
    """The three maintenance gauges the runner's refresh sets, recording."""
    metrics = type("M", (), {})()
    metrics.maintenance_nodes, metrics.maintenance_progress, metrics.maintenance_eta = (
        Gauges(), Gauges(), Gauges())  # fmt: skip
    return metrics


def test_progress_gauges_count_each_state_of_each_live_run(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m, nodes=("n1", "n2", "n3", "n4"), wave_size=2)
    m.tick()
    metrics = _metrics()
    metrics.maintenance_nodes.values[("stale", "done")] = 1.0
    m.refresh(metrics)
    rid = str(run.id)
    nodes = metrics.maintenance_nodes.values
    assert ("stale", "done") not in nodes
    assert nodes[(rid, "draining")] == 2 and nodes[(rid, "pending")] == 2
    assert nodes[(rid, "done")] == 0 and len(nodes) == 8
    assert metrics.maintenance_progress.values == {(rid,): 0.0}
    eta = metrics.maintenance_eta.values[(rid,)]
    assert eta != eta  # NaN: no pace yet


def test_only_nodes_not_yet_operated_on_are_offered_to_faults(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m, nodes=("n1", "n2"), wave_size=2)
    m.tick()
    assert m.out_for_faults() == {"n1", "n2"}
    cur = store.load(m.journal, run.id)
    assert cur is not None
    operating = replace(cur, nodes=(cur.nodes[0].to("operating", 2.0), cur.nodes[1]))
    store.save(m.journal, cur, operating, 2.0, None)
    assert m.out_for_faults() == {"n2"}
    assert store.out_for_maintenance(m.journal) == {"n1", "n2"}


# ------------------------------------------------------------------ the tick's edges
def test_a_paused_run_is_not_ticked_and_does_not_hold_up_the_next_run(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    first = _run(m, nodes=("n1",))
    cur = store.load(m.journal, first.id)
    assert cur is not None
    done = replace(cur, nodes=(cur.nodes[0].to("done", 5.0, "validation passed", finished=5.0),))
    store.save(m.journal, cur, done, 5.0, None)
    sched.views["n1"] = NodeView("n1", True, True, "gpuwarden: maintenance")  # release lost
    m.set_state(first.id, "pause", "bob")
    second = _run(m, nodes=("n2",))
    m.tick()
    assert ("release", "n1") not in sched.calls  # paused: nothing moves, not even this
    assert _node(m, second.id, "n2").state == "draining"
    m.set_state(first.id, "resume", "bob")
    m.tick()
    assert ("release", "n1") in sched.calls


def test_the_global_pause_stops_every_run(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    m.paused = lambda: True
    run = _run(m, nodes=("n1", "n2"), wave_size=2)
    m.tick()
    assert sched.calls == [] and _node(m, run.id, "n1").state == "pending"
    m.paused = lambda: False
    m.tick()
    assert _node(m, run.id, "n1").state == "draining"


def test_nodes_out_for_another_run_count_against_the_budget(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched)
    m.policy = replace(m.policy, fleet_budget=Budget(1.0, 1))
    first = _run(m, nodes=("n1",))
    m.tick()
    assert _node(m, first.id, "n1").state == "draining"
    second = _run(m, nodes=("n2",))
    sched.jobs["7"] = Job("7", "RUNNING", ("n1",))  # n1 stays out a while
    m.tick()
    assert _node(m, second.id, "n2").state == "pending"  # one out already: no room
    assert not sched.views["n2"].out_of_service


class Suites:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def start(self, node: str, suite: Any, run_id: str, view: NodeView) -> dict[str, Any]:
        self.calls.append(("start", node, run_id, view.name))
        return {"node": node, "run_id": run_id}

    def poll(self, handle: dict[str, Any]) -> None:
        return None

    def stop(self, handle: dict[str, Any], verdict: str | None) -> None:
        self.calls.append(("stop", handle["node"], verdict))

    def stop_lost(self, node: str, run_id: str, verdict: str) -> None:
        self.calls.append(("stop_lost", node, run_id, verdict))


SUITE_POLICY = """
validation:
  suites:
    post:
      - {name: nccl, command: [all_reduce_perf], timeout_s: 60, parser: nccl-tests,
         min: {busbw_at_max_size_gbps: 100}}
"""


def _with_suite(tmp_path: Path, sched: Scheduler) -> Maintenance:
    from remediation import policy as policy_mod

    m = _maint(tmp_path, sched, events_source="gpuwarden/test")
    suites = policy_mod.loads(SUITE_POLICY).validation
    m.policy = replace(m.policy, validation=suites)
    m.suites = Suites()  # type: ignore[assignment]
    return m


def test_a_suite_starts_with_the_runs_name_for_it_and_a_lost_one_is_stopped_first(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    m = _with_suite(tmp_path, sched)
    run = _run(m, suite="post")
    m.tick()  # drained
    m.tick()  # empty: operating (none)
    m.tick()  # ok: validating, the suite started
    suites = m.suites.calls  # type: ignore[union-attr]
    assert suites == [("start", "n1", f"maint{run.id}-n1-2", "n1")]
    n = _node(m, run.id, "n1")
    assert n.state == "validating" and json.loads(n.handle)["run_id"] == f"maint{run.id}-n1-2"
    outbox = [r["id"] for r in m.journal.rows("SELECT id FROM outbox ORDER BY rowid")]
    assert outbox[-1].startswith(f"maintenance-{run.id}-n1-validating-")  # the intent, first
    cur = store.load(m.journal, run.id)
    assert cur is not None
    m._apply(cur, [Effect("validate", "n1", detail="restart")], before=cur)
    assert suites[1:] == [("stop_lost", "n1", f"maint{run.id}-n1-2", "lost"),
                          ("start", "n1", f"maint{run.id}-n1-2", "n1")]  # fmt: skip


def test_the_operators_calls_and_each_tick_are_cloudevents_at_their_time(tmp_path: Path) -> None:
    sched = Scheduler()
    m = _maint(tmp_path, sched, events_source="gpuwarden/test")
    run = _run(m, nodes=("n1", "n2"))
    m.clock.t = 1100.0  # type: ignore[attr-defined]
    m.tick()
    m.clock.t = 1200.0  # type: ignore[attr-defined]
    m.decide(run.id, "n1", "skip", "dave")
    m.clock.t = 1300.0  # type: ignore[attr-defined]
    m.set_state(run.id, "abort", "erin")
    rows = m.journal.rows("SELECT id FROM outbox ORDER BY rowid")
    assert [r["id"] for r in rows] == [
        f"maintenance-{run.id}-n1-draining-1100.000000",
        f"maintenance-{run.id}-n1-skipped-1200.000000",
        f"maintenance-{run.id}-run-aborted-1300.000000",
        f"maintenance-{run.id}-n2-skipped-1300.000000",
    ]


def test_a_checkpoint_asked_again_keeps_an_ack_written_since_the_tick_read_the_world(
    tmp_path: Path,
) -> None:
    sched = Scheduler()
    sched.jobs["7"] = Job("7", "RUNNING", ("n1",))
    m = _maint(tmp_path, sched)
    run = _run(m)
    m.tick()
    m.tick()
    cur = store.load(m.journal, run.id)
    assert cur is not None and cur.node("n1").signalled == ("7",)  # type: ignore[union-attr]
    ack = ack_path(m.policy.checkpoint.ack_dir, "7")
    ack.write_text("ok\n")  # written between the world's read and the second request
    m._apply(cur, [Effect("checkpoint", "n1", job="7")], before=cur)
    assert ack.exists()
    fresh = replace(cur, nodes=(replace(cur.nodes[0], signalled=()),))
    m._apply(fresh, [Effect("checkpoint", "n1", job="7")], before=fresh)
    assert not ack.exists()  # not asked before: an ack already there is stale
    ack.write_text("ok\n")
    m._apply(cur, [Effect("checkpoint", "n1", job="7")])  # no tick-start state: stale
    assert not ack.exists()


def test_a_failed_operation_start_is_journaled_with_its_error_as_the_reason(
    tmp_path: Path,
) -> None:
    m = _maint(tmp_path)
    run = _run(m)

    class Refusing:
        def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
            raise OSError("flash tool missing")

        def poll(self, handle: dict[str, Any]) -> str:
            return "running"

    m.operators[run.id] = Refusing()  # type: ignore[assignment]
    for _ in range(2):
        m.tick()
    row = m.journal.node("n1")
    assert row is not None
    assert row["reason"] == f"maintenance {run.id}: operate failed: OSError: flash tool missing"


def test_a_finished_run_takes_no_more_calls_and_its_gauges_are_gone(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m)
    cur = store.load(m.journal, run.id)
    assert cur is not None
    store.save(m.journal, cur, replace(cur, state="done"), 5.0, None)
    with pytest.raises(ValueError, match=f"run {run.id} is done"):
        m.set_state(run.id, "pause", "bob")
    metrics = _metrics()
    m.refresh(metrics)
    assert metrics.maintenance_nodes.values == {} and metrics.maintenance_eta.values == {}


def test_the_eta_gauge_is_the_pace_times_what_is_left(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m, nodes=("n1", "n2", "n3"))
    cur = store.load(m.journal, run.id)
    assert cur is not None
    n1 = cur.nodes[0].to("done", 1100.0, "ok", started=1000.0, finished=1100.0)
    store.save(m.journal, cur, replace(cur, nodes=(n1, *cur.nodes[1:])), 1100.0, None)
    m.clock.t = 1150.0  # type: ignore[attr-defined]
    metrics = _metrics()
    m.refresh(metrics)
    assert metrics.maintenance_eta.values == {(str(run.id),): 150.0}  # 100 s a node, 2 left
    assert metrics.maintenance_progress.values == {(str(run.id),): pytest.approx(1 / 3)}


def test_an_abort_is_dated_by_the_clock(tmp_path: Path) -> None:
    m = _maint(tmp_path)
    run = _run(m, nodes=("n1", "n2"))
    m.clock.t = 1234.0  # type: ignore[attr-defined]
    aborted = m.set_state(run.id, "abort", "erin")
    assert {(n.since, n.finished) for n in aborted.nodes} == {(1234.0, 1234.0)}
    m.clock.t = 1300.0  # type: ignore[attr-defined]
    forced = _run(m, nodes=("n3",))
    m.tick()
    m.clock.t = 1400.0  # type: ignore[attr-defined]
    n3 = m.decide(forced.id, "n3", "force", "dave").node("n3")
    assert n3 is not None and n3.since == 1400.0 and n3.deadline == 1400.0
