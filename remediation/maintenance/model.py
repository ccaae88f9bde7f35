"""The nouns of rolling maintenance: frozen dataclasses, and the spec an operator sends.

Sits in the middle: ``planner`` and ``machine`` are pure functions over these; ``store``
persists them; ``runner`` fills ``World`` from the scheduler and carries out ``Effect``s.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from remediation.model import Job, NodeView

# A node's way through a run. pending -> draining (drained, jobs asked to checkpoint) ->
# operating -> validating -> done; failed (kept out, in the fault path); stuck (the
# deadline passed with jobs left: the operator decides, skip or force); skipped (a fault
# took it, or the operator skipped it).
PENDING, DRAINING, STUCK, OPERATING, VALIDATING = (
    "pending", "draining", "stuck", "operating", "validating",
)  # fmt: skip
DONE, FAILED, SKIPPED = "done", "failed", "skipped"
NODE_STATES = (PENDING, DRAINING, STUCK, OPERATING, VALIDATING, DONE, FAILED, SKIPPED)
IN_FLIGHT = frozenset({DRAINING, STUCK, OPERATING, VALIDATING})  # out for maintenance
YIELDABLE = frozenset({DRAINING, STUCK})  # given back when a fault needs the budget
FINAL = frozenset({DONE, FAILED, SKIPPED})
# A run: running; paused (by the operator, the global pause also stops it); stopped (more
# failures than allowed: nothing new starts, what runs finishes); aborted; done.
RUNNING, PAUSED, STOPPED, ABORTED, COMPLETE = "running", "paused", "stopped", "aborted", "done"
RUN_STATES = (RUNNING, PAUSED, STOPPED, ABORTED, COMPLETE)
OPERATIONS = ("command", "slurm_reboot", "kube_job", "none")
# A checkpoint request is a signal: nothing shows it arrived (a job starting up, a signal
# lost while slurmstepd was busy), so a job without an ack is asked again this often; a
# second request is acknowledged again (remediation/checkpoint.py), never harmful.
RESIGNAL_S = 20.0


_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class SpecError(ValueError):
    """A maintenance request that cannot be run as written (the message says why)."""


@dataclass(frozen=True)
class Operation:
    kind: str  # command | slurm_reboot | kube_job | none
    argv: tuple[str, ...] = ()  # command: {node} is replaced by the node's name
    timeout_s: float = 3600.0
    # kube_job: the operator's batch/v1 Job manifest ({node} replaced in every string), one
    # Job per node and attempt, bound to the node (remediation/maintenance/operations.py)
    job: Mapping[str, Any] = field(default_factory=dict)

    def describe(self) -> str:
        if self.kind == "command":
            return "command " + " ".join(self.argv)
        if self.kind == "kube_job":
            meta = self.job.get("metadata") or {}
            where = meta.get("namespace") or "the validation namespace"
            return f"kube_job {meta.get('name') or meta.get('generateName') or 'Job'} in {where}"
        return self.kind


@dataclass(frozen=True)
class Spec:
    """What the operator asked for. ``select`` is how the nodes were chosen (shown back)."""

    nodes: tuple[str, ...]
    operation: Operation
    wave_size: int = 1
    max_failures: int = 0  # the run stops once more nodes than this failed
    drain_deadline_s: float = 3600.0  # jobs checkpoint or end by then, or the operator decides
    suite: str = ""  # the validation suite run before release ("" : none)
    force: bool = False  # at the deadline, requeue jobs without a checkpoint
    reason: str = ""
    select: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRun:
    node: str
    wave: int
    state: str = PENDING
    since: float = 0.0
    reason: str = ""
    deadline: float = 0.0  # draining: jobs checkpointed or ended by then
    signalled: tuple[str, ...] = ()  # jobs asked to checkpoint
    signalled_at: float = 0.0  # the last request (asked again every RESIGNAL_S until acked)
    requeued: tuple[str, ...] = ()  # jobs requeued (after their ack, or forced)
    forced: bool = False  # the operator chose force for this node
    attempt: int = 0  # operation / validation attempt (a lost one starts again)
    handle: str = ""  # JSON: the running operation's or validation's handle
    started: float = 0.0  # when it was taken out (for the ETA)
    finished: float = 0.0

    def to(self, state: str, now: float, reason: str = "", **more: Any) -> NodeRun:
        return replace(self, state=state, since=now, reason=reason, **more)


@dataclass(frozen=True)
class Run:
    id: int
    spec: Spec
    state: str
    nodes: tuple[NodeRun, ...]
    created_at: float
    who: str = ""
    reason: str = ""  # why stopped / aborted

    def node(self, name: str) -> NodeRun | None:
        return next((n for n in self.nodes if n.node == name), None)

    def in_flight(self) -> frozenset[str]:
        return frozenset(n.node for n in self.nodes if n.state in IN_FLIGHT)

    def failures(self) -> int:
        return sum(1 for n in self.nodes if n.state == FAILED)


@dataclass(frozen=True)
class World:
    """What one tick sees. ``op`` and ``validation``: per node in that state, ``running``,
    ``ok`` / ``passed``, ``failed: <why>``, or ``lost`` (no handle: start it again)."""

    now: float
    paused: bool  # the global pause (``gpuwarden quarantine pause``)
    fleet: tuple[NodeView, ...]
    faulted: frozenset[str]  # nodes the fault path holds (journal)
    jobs: Mapping[str, tuple[Job, ...]] = field(default_factory=dict)  # draining nodes' jobs
    acked: frozenset[str] = frozenset()  # jobs whose checkpoint ack file exists
    op: Mapping[str, str] = field(default_factory=dict)
    validation: Mapping[str, str] = field(default_factory=dict)
    others: frozenset[str] = frozenset()  # nodes out for other maintenance runs


@dataclass(frozen=True)
class Effect:
    """One side effect for the edge: drain, checkpoint, requeue, operate, validate,
    release, keep_out (a failed node enters the fault path)."""

    kind: str
    node: str
    job: str = ""
    detail: str = ""


def _positive(raw: Mapping[str, Any], key: str, default: float, kind: type = float) -> Any:
    value = raw.get(key, default)
    try:
        number = kind(value)
    except (TypeError, ValueError):
        raise SpecError(f"{key}: expected a number, got {value!r}") from None
    if number < (0 if key == "max_failures" else 1e-9):
        raise SpecError(f"{key}: must be {'>= 0' if key == 'max_failures' else '> 0'}")
    return number


def operation(raw: Any) -> Operation:
    if not isinstance(raw, Mapping):
        raise SpecError("operation: expected {kind: command|slurm_reboot|kube_job|none, ...}")
    kind = raw.get("kind")
    if kind not in OPERATIONS:
        raise SpecError(f"operation.kind: {kind!r} is not one of {', '.join(OPERATIONS)}")
    argv = raw.get("argv") or ()
    if kind == "command" and (not argv or not all(isinstance(a, str) and a for a in argv)):
        raise SpecError("operation.argv: a command needs a non-empty list of strings")
    timeout = _positive(raw, "timeout_s", 3600.0)
    job = kube_job(raw.get("job")) if kind == "kube_job" else {}
    return Operation(kind, tuple(argv) if kind == "command" else (), timeout, job)


def kube_job(raw: Any) -> dict[str, Any]:
    """The ``kube_job`` operation's manifest (a JSON object, or its YAML text), checked to
    be one batch/v1 Job with a pod template and at least one container; the API server
    checks the rest when the run is planned (a server-side dry run of the first node's)."""
    if isinstance(raw, str):
        import yaml

        try:
            raw = yaml.safe_load(raw)
        except yaml.YAMLError as e:
            raise SpecError(f"operation.job: not YAML: {' '.join(str(e).split())}") from None
    if not isinstance(raw, Mapping) or not raw:
        raise SpecError("operation.job: a kube_job needs a batch/v1 Job manifest (an object)")
    if raw.get("apiVersion") != "batch/v1" or raw.get("kind") != "Job":
        raise SpecError(
            f"operation.job: expected apiVersion batch/v1, kind Job; got "
            f"{raw.get('apiVersion')!r}, {raw.get('kind')!r}"
        )
    meta = raw.get("metadata") or {}
    spec = raw.get("spec")
    template = spec.get("template") if isinstance(spec, Mapping) else None
    pod = template.get("spec") if isinstance(template, Mapping) else None
    containers = pod.get("containers") if isinstance(pod, Mapping) else None
    if not isinstance(meta, Mapping) or not isinstance(containers, list) or not containers:
        raise SpecError("operation.job: spec.template.spec.containers: at least one container")
    ns = meta.get("namespace")
    if ns is not None and not (isinstance(ns, str) and _DNS_LABEL.match(ns)):
        raise SpecError(f"operation.job: metadata.namespace {ns!r} is not a namespace name")
    try:  # stored as JSON with the run (YAML's dates and the like are not)
        return dict(json.loads(json.dumps(raw, allow_nan=False)))
    except (TypeError, ValueError) as e:
        raise SpecError(f"operation.job: not JSON-representable: {e}") from None


def spec(raw: Any, nodes: tuple[str, ...], suites: frozenset[str]) -> Spec:
    """A Spec from the API's JSON body, the node set already resolved (planner.select)."""
    if not isinstance(raw, Mapping):
        raise SpecError("expected a JSON object")
    if not nodes:
        raise SpecError("the selection matches no node")
    suite = raw.get("suite") or ""
    if suite and suite not in suites:
        have = ", ".join(sorted(suites)) or "none in the policy"
        raise SpecError(f"suite: no suite named {suite!r} (suites: {have})")
    return Spec(
        nodes=nodes,
        operation=operation(raw.get("operation")),
        wave_size=_positive(raw, "wave_size", 1, int),
        max_failures=_positive(raw, "max_failures", 0, int),
        drain_deadline_s=_positive(raw, "drain_deadline_s", 3600.0),
        suite=str(suite),
        force=bool(raw.get("force", False)),
        reason=str(raw.get("reason") or "")[:120],
        select=dict(raw.get("select") or {}),
    )
