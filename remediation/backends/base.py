"""The seam between the engine and a scheduler: one protocol every backend implements.

The executor calls these; each call is synchronous I/O (run in a worker thread) and must
read the scheduler's state back rather than trust an exit code.
"""

from __future__ import annotations

from typing import Protocol

from remediation.model import Job, NodeView


class BackendError(RuntimeError):
    """The scheduler refused or could not be asked; the action is recorded as failed."""


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
