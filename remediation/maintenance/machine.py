"""One tick of a maintenance run: from what the world shows to the next states and the
side effects to carry out. Pure (no I/O, no clock: ``World.now``), so a property test can
drive it through any interleaving of faults, jobs, acks, restarts and operator calls.

Rules, in the order a tick applies them:

1. Paused (the run, or the global pause): nothing moves.
2. Faults win: a node the fault path holds leaves the run (``skipped``) unless its
   operation already started; when faults push the nodes out over a budget, the run gives
   back the nodes it has not started to operate on (released, ``pending`` again).
3. Each node in flight moves on what the world shows: a draining node's jobs are asked to
   checkpoint; a job whose ack exists is requeued; a job that ended is gone; once the node
   is empty the operation starts. At the deadline a node with jobs left is ``stuck`` (the
   operator decides), or, forced, its jobs are requeued without a checkpoint. No job is
   requeued without its ack unless forced.
4. After the operation, the validation suite (when the spec names one); passed: released;
   failed (operation or suite): kept out with its reason and handed to the fault path.
5. More failures than ``max_failures``: the run stops (nothing new starts).
6. Admission: nodes of the current wave, up to the wave size, each only when every budget
   still holds with it out.
"""

from __future__ import annotations

from dataclasses import replace

from remediation.maintenance import planner
from remediation.maintenance.model import (
    ABORTED,
    COMPLETE,
    DONE,
    DRAINING,
    FAILED,
    FINAL,
    IN_FLIGHT,
    OPERATING,
    PAUSED,
    PENDING,
    RESIGNAL_S,
    RUNNING,
    SKIPPED,
    STOPPED,
    STUCK,
    VALIDATING,
    YIELDABLE,
    Effect,
    NodeRun,
    Run,
    World,
)
from remediation.policy import Policy

Step = tuple[NodeRun, list[Effect]]


def advance(run: Run, world: World, policy: Policy) -> tuple[Run, list[Effect]]:
    if run.state in (ABORTED, COMPLETE, PAUSED) or world.paused:
        return run, []
    effects: list[Effect] = []
    nodes: list[NodeRun] = []
    before = {n.node: n.state for n in run.nodes}
    for n in run.nodes:
        moved, eff = _node(n, world, run)
        nodes.append(moved)
        effects += eff
    nodes, eff = _yield_to_faults(nodes, world, policy)
    effects += eff
    run = replace(run, nodes=tuple(nodes))
    if run.state == RUNNING and run.failures() > run.spec.max_failures:
        run = replace(run, state=STOPPED, reason=f"{run.failures()} nodes failed "
                      f"(more than max_failures={run.spec.max_failures}): nothing new starts")  # fmt: skip
    if run.state == STOPPED:
        run, effects = _stop_new_work(run, effects, before, world.now)
    if run.state == RUNNING:
        run, eff = _admit(run, world, policy)
        effects += eff
    if all(n.state in FINAL for n in run.nodes) and run.state in (RUNNING, STOPPED):
        run = replace(run, state=COMPLETE if run.state == RUNNING else STOPPED)
    return run, effects


def _node(n: NodeRun, w: World, run: Run) -> Step:
    if n.state in (PENDING, DRAINING, STUCK) and n.node in w.faulted:
        # faults win: the fault path owns the node (and its drain) from now on
        return n.to(SKIPPED, w.now, "taken by the fault path", finished=w.now), []
    if n.state in (DRAINING, STUCK):
        return _draining(n, w, run)
    if n.state == OPERATING:
        return _operating(n, w, run)
    if n.state == VALIDATING:
        return _validating(n, w)
    return n, []


def _draining(n: NodeRun, w: World, run: Run) -> Step:
    view = next((v for v in w.fleet if v.name == n.node), None)
    effects = [] if view is not None and view.ours else [Effect("drain", n.node)]
    jobs = w.jobs.get(n.node, ())
    force = run.spec.force or n.forced
    late = w.now >= n.deadline
    signalled, requeued = list(n.signalled), list(n.requeued)
    again = w.now - n.signalled_at >= RESIGNAL_S
    asked = False
    for job in jobs:
        if job.job_id in requeued:
            continue  # requeued, not yet off the node: looked at again next tick
        if job.job_id not in signalled or (again and job.job_id not in w.acked):
            if job.job_id not in signalled:
                signalled.append(job.job_id)
            effects.append(Effect("checkpoint", n.node, job.job_id))
            asked = True
        elif job.job_id in w.acked or (force and late):
            requeued.append(job.job_id)
            why = "checkpointed" if job.job_id in w.acked else "forced: no checkpoint"
            effects.append(Effect("requeue", n.node, job.job_id, why))
    n = replace(n, signalled=tuple(signalled), requeued=tuple(requeued),
                signalled_at=w.now if asked else n.signalled_at)  # fmt: skip
    if not jobs and not effects:
        return n.to(OPERATING, w.now, "empty", attempt=n.attempt + 1, handle=""), [
            Effect("operate", n.node)
        ]
    if late and not force and n.state == DRAINING:
        left = ", ".join(j.job_id for j in jobs)
        return n.to(STUCK, w.now, f"deadline passed, jobs left: {left}; operator: "
                    "skip the node or force its jobs"), effects  # fmt: skip
    return n, effects


def _operating(n: NodeRun, w: World, run: Run) -> Step:
    seen = w.op.get(n.node, "running")
    if seen == "lost":
        return replace(n, handle=""), [Effect("operate", n.node)]
    if seen == "running":
        if w.now - n.since > run.spec.operation.timeout_s:
            return _failed(n, w, f"operation timed out after {run.spec.operation.timeout_s:.0f}s")
        return n, []
    if seen != "ok":
        return _failed(n, w, f"operation {seen}")
    if not run.spec.suite:
        return _release(n, w, "operation ok; no validation suite")
    return n.to(VALIDATING, w.now, f"suite {run.spec.suite}", attempt=n.attempt + 1,
                handle=""), [Effect("validate", n.node)]  # fmt: skip


def _validating(n: NodeRun, w: World) -> Step:
    seen = w.validation.get(n.node, "running")
    if seen == "lost":
        return replace(n, handle=""), [Effect("validate", n.node, detail="restart")]
    if seen == "running":
        return n, []
    if seen == "passed":
        return _release(n, w, "validation passed")
    return _failed(n, w, f"validation {seen}")


def _release(n: NodeRun, w: World, why: str) -> Step:
    if n.node in w.faulted:  # a fault arrived meanwhile: the fault path keeps it out
        return n.to(DONE, w.now, f"{why}; kept out: the fault path holds it", finished=w.now), []
    return n.to(DONE, w.now, why, finished=w.now), [Effect("release", n.node)]


def _failed(n: NodeRun, w: World, why: str) -> Step:
    return n.to(FAILED, w.now, why, finished=w.now), [Effect("keep_out", n.node, detail=why)]


def _out(nodes: list[NodeRun], w: World) -> frozenset[str]:
    # a node failed this tick is kept out (its keep_out effect not yet carried out, the
    # scheduler read before it: e.g. still in the suite's reservation)
    mine = frozenset(n.node for n in nodes if n.state in IN_FLIGHT
                     or (n.state == FAILED and n.since == w.now))  # fmt: skip
    return planner.out_now(w.fleet, w.faulted) | mine | w.others


def _yield_to_faults(
    nodes: list[NodeRun], w: World, policy: Policy
) -> tuple[list[NodeRun], list[Effect]]:
    """Over a budget: give back the newest nodes not yet operated on, until within. A node
    given back counts as in service from then on (its release is among the effects; the
    scheduler's view, read before, still shows it drained), so no more go than needed."""
    effects: list[Effect] = []
    given: set[str] = set()
    for i in sorted(range(len(nodes)), key=lambda i: -nodes[i].started):
        if not planner.violations(_out(nodes, w) - given, w.fleet, policy):
            break
        n = nodes[i]
        if n.state in YIELDABLE:
            nodes[i] = replace(n.to(PENDING, w.now, "given back: faults need the budget"),
                               signalled=(), requeued=(), forced=False)  # fmt: skip
            effects.append(Effect("release", n.node, detail="yield"))
            given.add(n.node)
    return nodes, effects


def _admit(run: Run, w: World, policy: Policy) -> tuple[Run, list[Effect]]:
    open_waves = [n.wave for n in run.nodes if n.state not in FINAL]
    if not open_waves:
        return run, []
    wave = min(open_waves)
    nodes, effects = list(run.nodes), []
    flying = sum(1 for n in nodes if n.state in IN_FLIGHT)
    for i, n in enumerate(nodes):
        if flying >= run.spec.wave_size:
            break
        if n.wave != wave or n.state != PENDING:
            continue
        if planner.violations(_out(nodes, w) | {n.node}, w.fleet, policy):
            continue  # waits for room; a later node of another domain may fit
        view = next((v for v in w.fleet if v.name == n.node), None)
        if view is None or (view.out_of_service and not view.ours):
            nodes[i] = n.to(SKIPPED, w.now, "unknown to the scheduler" if view is None
                            else f"out of service by someone else: {view.reason!r}",
                            finished=w.now)  # fmt: skip
            continue
        nodes[i] = n.to(DRAINING, w.now, "taken out", deadline=w.now + run.spec.drain_deadline_s,
                        started=w.now)  # fmt: skip
        effects.append(Effect("drain", n.node))
        flying += 1
    return replace(run, nodes=tuple(nodes)), effects


def decide(run: Run, node: str, choice: str, now: float) -> tuple[Run, list[Effect]]:
    """The operator's call on one node: ``skip`` (released, left out of the run) or
    ``force`` (its jobs requeued without a checkpoint). Raises ValueError when not allowed."""
    n = run.node(node)
    if n is None:
        raise ValueError(f"node {node} is not in run {run.id}")
    if choice == "skip":
        if n.state not in (PENDING, DRAINING, STUCK):
            raise ValueError(f"node {node} is {n.state}: only a pending, draining or stuck node "
                             "can be skipped")  # fmt: skip
        eff = [Effect("release", node, detail="skip")] if n.state != PENDING else []
        moved = n.to(SKIPPED, now, "skipped by the operator", finished=now)
    elif choice == "force":
        if n.state not in (DRAINING, STUCK):
            raise ValueError(f"node {node} is {n.state}: only a draining or stuck node is forced")
        moved, eff = replace(n.to(DRAINING, now, "forced by the operator"), forced=True,
                             deadline=now), []  # fmt: skip
    else:
        raise ValueError(f"choice must be skip or force, not {choice!r}")
    nodes = tuple(moved if x.node == node else x for x in run.nodes)
    return replace(run, nodes=nodes), eff


def abort(run: Run, now: float, why: str) -> tuple[Run, list[Effect]]:
    """Stop the run: nodes not yet operated on are released; an operation or validation
    under way finishes (its node is released or kept out by its verdict on later ticks)."""
    nodes, effects = _give_back(run.nodes, {}, now, f"aborted: {why}", "abort")
    return replace(run, nodes=tuple(nodes), state=ABORTED, reason=why), effects


def _give_back(nodes: tuple[NodeRun, ...], before: dict[str, str], now: float, why: str,
               detail: str) -> tuple[list[NodeRun], list[Effect]]:  # fmt: skip
    """Nodes not yet operated on (as they were at the tick's start, ``before``) leave the
    run, released where drained; an operation or validation under way finishes."""
    out, effects = [], []
    for n in nodes:
        was = before.get(n.node, n.state)
        if was in (PENDING, DRAINING, STUCK) and n.state not in FINAL:
            if was != PENDING or n.state != PENDING:
                effects.append(Effect("release", n.node, detail=detail))
            n = n.to(SKIPPED, now, why, finished=now)
        out.append(n)
    return out, effects


def _stop_new_work(run: Run, effects: list[Effect], before: dict[str, str],
                   now: float) -> tuple[Run, list[Effect]]:  # fmt: skip
    """A stopped run starts nothing new: a node that had not reached its operation by this
    tick's start (a drain under way included, even one that emptied this tick) is given
    back, its operation never started; what was operating or validating finishes."""
    nodes, released = _give_back(run.nodes, before, now, f"run stopped: {run.reason}", "stopped")
    gone = {e.node for e in released}
    kept = [e for e in effects if not (e.node in gone and e.kind in ("operate", "drain"))]
    return replace(run, nodes=tuple(nodes)), kept + released


def progress(run: Run, now: float) -> tuple[float, float | None]:
    """(fraction of nodes finished, seconds left at the pace so far; None: no pace yet)."""
    total = len(run.nodes) or 1
    finished = [n for n in run.nodes if n.state in FINAL]
    done_at = [n.finished for n in finished if n.state in (DONE, FAILED) and n.finished]
    left = total - len(finished)
    if not done_at or left == 0:
        return len(finished) / total, (0.0 if left == 0 else None)
    started = min((n.started for n in run.nodes if n.started), default=run.created_at)
    pace = (max(done_at) - started) / len(done_at)  # seconds per node, waves overlapping
    return len(finished) / total, max(0.0, pace * left - (now - max(done_at)))


__all__ = ["FAILED", "OPERATING", "VALIDATING", "abort", "advance", "decide", "progress"]
