"""The seam between the engine and a scheduler: one protocol every backend implements.

The executor calls these; each call is synchronous I/O (run in a worker thread) and must
read the scheduler's state back rather than trust an exit code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from remediation.model import Job, NodeView


class BackendError(RuntimeError):
    """The scheduler refused or could not be asked; the action is recorded as failed."""


class Unavailable(BackendError):
    """The scheduler or API server did not answer (a timeout, a refused connection, an
    overloaded or failing server: HTTP 429/5xx, slurmctld unreachable): its state could not
    be read, so nothing can be decided from it. An alert met while deciding is left
    undecided and tried again when the backend answers (remediation/worker.py); never turned
    into a denial."""


class NodePath(BackendError):
    """One GPU cannot be taken out alone here (the message says why, e.g. the API server
    serves no DeviceTaintRules): the whole node is taken out instead, and the reason is
    journaled with the action (never a silent fallback)."""


@dataclass(frozen=True)
class BlockedPod:
    """One pod whose eviction the API server refused: its HTTP status and the server's own
    words (the Status body's reason, message and causes)."""

    pod: str  # namespace/name
    status: int
    reason: str  # the Status reason: TooManyRequests, Forbidden, BadRequest, ...
    message: str  # the Status message and causes, as the server said them


class EvacuationBlocked(BackendError):
    """The node (or one GPU) is out of service but some of its pods could not be evicted:
    a PodDisruptionBudget, a budget not yet computed, an API error. Nothing is deleted
    around it; the executor retries with the policy's backoff and records the block (the
    node API, metrics and log show it with the server's words)."""

    def __init__(self, node: str, pods: tuple[BlockedPod, ...], scope: str = "node") -> None:
        self.node, self.pods, self.scope = node, pods, scope
        what = "; ".join(f"{p.pod}: {p.message or p.reason} (HTTP {p.status})" for p in pods)
        super().__init__(
            f"evacuation of {scope} {node} blocked: {len(pods)} pod(s) not evicted: {what}; "
            "not deleted, retried with the action's backoff"
        )


class Backend(Protocol):
    name: str

    def fleet(self) -> tuple[NodeView, ...]:
        """Every node the scheduler knows, with out-of-service state and failure domains."""
        ...

    def node(self, name: str) -> NodeView | None: ...

    def jobs_on(self, node: str) -> tuple[Job, ...]: ...

    def job(self, job_id: str) -> Job | None: ...

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        """Drain (Slurm) or cordon + taint (+ evict when ``evict``) (Kubernetes)."""
        ...

    def is_taken_out(self, node: str) -> bool:
        """True when the node is out of service by a gpuwarden drain (reconciliation)."""
        ...

    def release(self, node: str) -> str:
        """Back in service; only a drain/cordon gpuwarden wrote. Raises BackendError."""
        ...

    def request_checkpoint(self, job: Job) -> None: ...

    def requeue(self, job: Job, exclude: str) -> None:
        """Requeue/evict the job so that it restarts without ``exclude``."""
        ...

    def reboot(self, node: str, reason: str) -> str: ...

    def mark(self, node: str, state: str) -> None:
        """Record the quarantine state on the node where the scheduler can show it."""
        ...
