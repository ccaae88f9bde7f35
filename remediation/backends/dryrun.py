"""Dry-run backend: records what would be done, touches nothing.

Keeps a simulated node state (from its own records) so that budgets and reconciliation
behave as they would for real. Records go to the journal's ``dry_run_effects`` table in a
commit of their own, like a real scheduler call would happen outside the journal.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping

from remediation.backends.base import Backend, BackendError, NodePath
from remediation.journal import Journal
from remediation.model import REASON_PREFIX, Job, NodeView


class DryRunBackend:
    name = "dry-run"

    def __init__(
        self,
        journal: Journal,
        topology: Mapping[str, Mapping[str, str]] | None = None,
        clock: Callable[[], float] = time.time,
        source: Backend | None = None,
    ) -> None:
        """``source``: a real scheduler to read the fleet and jobs from (writes never go there)."""
        self.journal, self.topology, self.clock = journal, topology or {}, clock
        self.source = source
        self._local = threading.local()  # actions run in parallel worker threads
        self._lock = threading.RLock()
        self._cache: dict[str, str] | None = None
        self._base: tuple[NodeView, ...] | None = None
        self._fleet: tuple[NodeView, ...] | None = None  # the topology's fleet, kept in step

    @property
    def action_id(self) -> int:
        """The action being executed in this thread (set by the executor), for the record."""
        return int(getattr(self._local, "action_id", 0))

    @action_id.setter
    def action_id(self, value: int) -> None:
        self._local.action_id = value

    def _record(self, node: str, op: str, **detail: object) -> None:
        self._out()  # the cache is loaded before it is kept in step
        with self._lock:
            with self.journal.tx() as db:
                db.execute(
                    "INSERT INTO dry_run_effects(action_id,node,op,detail,at) VALUES(?,?,?,?,?)",
                    (self.action_id, node, op, json.dumps(detail, sort_keys=True), self.clock()),
                )
            self._apply(node, op, detail)

    def _out(self) -> dict[str, str]:
        """Nodes this backend took out (reason by node): read once, then kept in step.

        This backend is the only writer of its records, so the cache cannot go stale."""
        with self._lock:
            if self._cache is None:
                rows = self.journal.rows(
                    "SELECT node, op, detail FROM dry_run_effects "
                    "WHERE op IN ('take_out','release') ORDER BY id"
                )
                self._cache = {}
                for r in rows:
                    self._apply(r["node"], r["op"], json.loads(r["detail"]))
            return dict(self._cache)

    def _apply(self, node: str, op: str, detail: dict[str, object]) -> None:
        assert self._cache is not None
        self._fleet = None
        if op == "take_out":
            self._cache[node] = str(detail.get("reason", REASON_PREFIX))
        elif op == "release":
            self._cache.pop(node, None)

    def fleet(self) -> tuple[NodeView, ...]:
        if self.source is not None:
            out = self._out()
            return tuple(
                NodeView(n.name, True, True, out[n.name], n.domains) if n.name in out else n
                for n in self.source.fleet()
            )
        with self._lock:  # every decision reads the whole fleet: built once per change
            if self._fleet is None:
                out = self._out()
                if self._base is None:
                    self._base = tuple(
                        NodeView(n, domains=dict(d)) for n, d in sorted(self.topology.items())
                    )
                self._fleet = tuple(
                    NodeView(n.name, True, True, out[n.name], n.domains) if n.name in out else n
                    for n in self._base
                )
            return self._fleet

    def node(self, name: str) -> NodeView | None:
        """None for a node it cannot know (not in the topology, nor the real scheduler)."""
        if self.source is not None:
            return next((n for n in self.fleet() if n.name == name), None)
        if name not in self.topology:
            return None
        out = self._out()
        return NodeView(
            name, name in out, name in out, out.get(name, ""), dict(self.topology.get(name, {}))
        )

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return self.source.jobs_on(node) if self.source is not None else ()

    def job(self, job_id: str) -> Job | None:
        return self.source.job(job_id) if self.source is not None else None

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        if self.node(node) is None:
            raise BackendError(f"node {node} unknown (not in the topology or the scheduler)")
        self._record(node, "take_out", reason=reason, evict=evict)
        health = getattr(self.source, "health", None)  # Kubernetes: said on the Node too
        if health is not None:  # an Event only: conditions are for what gpuwarden did
            what = "cordon, taint and drain" if evict else "cordon and taint"
            health.event(node, "Normal", "WouldQuarantine",
                         f"observe-first (dry-run): gpuwarden would {what} the node: {reason}")  # fmt: skip
        return "would drain"

    def is_taken_out(self, node: str) -> bool:
        return node in self._out()

    def release(self, node: str) -> str:
        if self.node(node) is None:
            raise BackendError(f"node {node} unknown (not in the topology or the scheduler)")
        self._record(node, "release")
        dra = getattr(self.source, "dra", None)
        if dra is not None:  # our previews go with the node's release (effect None only)
            try:
                gpus = dra.release_node(node, previews_only=True)
            except Exception as e:  # a preview left behind has no effect: observing goes on
                return f"would resume; preview DeviceTaintRules left: {type(e).__name__}: {e}"
            if gpus:
                return (
                    f"would resume; preview DeviceTaintRule(s) of GPU(s) {', '.join(gpus)} deleted"
                )
        return "would resume"

    def isolate_gpu(self, node: str, gpu: str, reason: str, effect: str) -> str | None:
        """Kubernetes with DRA: the one-GPU path previewed for real, as a DeviceTaintRule with
        effect ``None`` (visible to the operator, no effect on scheduling or running pods);
        None where the node path applies (no scheduler to read, no DRA device for the GPU)."""
        dra = getattr(self.source, "dra", None)
        if dra is None:
            return None
        try:
            out = str(dra.isolate(node, gpu, reason, effect, dry_run=True))
        except NodePath:
            raise  # said, and journaled by the executor: not a silent fallback
        except BackendError as e:
            if "node path" in str(e):  # no DRA device for this GPU: the usual node path
                return None
            raise
        self._record(node, "isolate_gpu", gpu=gpu, effect=effect, preview=out)
        return f"would taint GPU {gpu} {effect} ({out})"

    def request_checkpoint(self, job: Job) -> None:
        self._record(job.nodes[0] if job.nodes else "", "checkpoint", job=job.job_id)

    def requeue(self, job: Job, exclude: str) -> None:
        self._record(exclude, "requeue", job=job.job_id)

    def reboot(self, node: str, reason: str) -> str:
        self._record(node, "reboot", reason=reason)
        return "would reboot"

    def mark(self, node: str, state: str) -> None:
        self._record(node, "mark", state=state)
