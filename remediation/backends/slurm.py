"""Slurm backend: scontrol / squeue / sinfo --json / scancel, each with a timeout.

Drains carry the reason prefix ``gpuwarden:`` and are only ever resumed while they still
carry it (Node Health Check's rule). State is read back after every change: RESUME on a
never-registered node exits 1 yet clears the drain (real-components.md §3), so exit codes
are not trusted.

A node in gpuwarden's own validation reservation (``gpuwarden-validate-<node>``, MAINT) is
out of service by gpuwarden, not by someone else: ``sinfo --json`` names the reservation
from 23.02; 22.05 shows neither the reservation nor the MAINT flag there, and a node shown
MAINT without a reason or reservation is looked up in ``scontrol show reservation``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from remediation.backends import slurmstate
from remediation.backends.base import BackendError
from remediation.backends.hostlist import expand
from remediation.backends.runner import Runner, checked
from remediation.model import REASON_PREFIX, Job, NodeView

RESERVATION_PREFIX = "gpuwarden-validate-"  # the validation runner's reservations
MAINT = {"MAINT", "MAINTENANCE"}
LIVE_JOB = ("RUNNING", "SUSPENDED", "CONFIGURING")  # a job on the node, as jobs_on counts it


class SlurmBackend:
    name = "slurm"

    def __init__(
        self,
        runner: Runner,
        topology: Mapping[str, Mapping[str, str]] | None = None,
        timeout: float = 10.0,
        requeue_wait_s: float = 30.0,
    ) -> None:
        self.runner, self.topology, self.timeout = runner, topology or {}, timeout
        self.requeue_wait_s = requeue_wait_s  # the executor's deadline for PENDING

    def _run(self, *argv: str) -> str:
        return checked(self.runner, argv, self.timeout)

    def _json(self, *argv: str) -> dict[str, Any]:
        try:
            data = json.loads(self._run(*argv))
        except json.JSONDecodeError as e:
            raise BackendError(f"{argv[0]} --json: unreadable output ({e})") from None
        if not isinstance(data, dict):
            raise BackendError(f"{argv[0]} --json: unexpected output")
        return data

    def _view(self, n: Mapping[str, Any], reserved: frozenset[str] = frozenset()) -> NodeView:
        reason = str(n.get("reason") or "")
        out = slurmstate.out_of_service(n)
        name = str(n["name"])
        ours = out and (
            reason.startswith(REASON_PREFIX)  # a drain, or a reboot we asked for
            or str(n.get("reservation") or "").startswith(RESERVATION_PREFIX)
            or name in reserved
        )
        return NodeView(name, out, ours, reason, dict(self.topology.get(name, {})))

    def fleet(self) -> tuple[NodeView, ...]:
        nodes = self._json("sinfo", "--json").get("nodes", [])
        maint = [n for n in nodes if _maint_unexplained(n)]
        reserved = self._our_reservations() if maint else frozenset()
        return tuple(self._view(n, reserved) for n in nodes)

    def _our_reservations(self) -> frozenset[str]:
        """Nodes in a gpuwarden-validate-* reservation (``scontrol show -o reservation``)."""
        out: set[str] = set()
        for line in self._run("scontrol", "show", "-o", "reservation").splitlines():
            words = dict(w.split("=", 1) for w in line.split() if "=" in w)
            if words.get("ReservationName", "").startswith(RESERVATION_PREFIX):
                out.update(expand(words.get("Nodes", "")))
        return frozenset(out)

    def node(self, name: str) -> NodeView | None:
        return next((n for n in self.fleet() if n.name == name), None)

    @staticmethod
    def _job(j: Mapping[str, Any]) -> Job:
        return Job(
            str(slurmstate.number(j["job_id"])),
            slurmstate.job_state(j),
            expand(str(j.get("nodes") or "")),
            slurmstate.number(j.get("restart_cnt")),
            slurmstate.held(j),
        )

    def _jobs(self) -> list[Job]:
        return [self._job(j) for j in self._json("squeue", "--json").get("jobs", [])]

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return tuple(j for j in self._jobs() if node in j.nodes and j.state in LIVE_JOB)

    def jobs_on_gpu(self, node: str, gpu: str) -> tuple[tuple[Job, ...], str]:
        """The jobs a reset of GPU ``gpu`` must move, and how they were found: those whose
        allocation on the node (``gres_detail``, GRES ``IDX``) holds the GPU, and, failing
        closed, those whose GPUs cannot be told (no GPU GRES, an unreadable entry). Jobs
        holding only other GPUs of the node keep running."""
        moved: list[Job] = []
        kept: list[Job] = []
        for j in self._json("squeue", "--json").get("jobs", []):
            job = self._job(j)
            if node not in job.nodes or job.state not in LIVE_JOB:
                continue
            gpus = slurmstate.gpu_indices(j, node, job.nodes)
            (kept if gpus is not None and gpu not in gpus else moved).append(job)
        others = ", ".join(j.job_id for j in kept) or "none"
        return tuple(moved), (
            f"the jobs holding GPU {gpu} or whose GPUs are unknown (gres IDX); kept on other "
            f"GPUs: {others}"
        )

    def job(self, job_id: str) -> Job | None:
        return next((j for j in self._jobs() if j.job_id == job_id), None)

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        before = self.node(node)
        if before is None:
            raise BackendError(f"node {node} unknown to slurm")
        if before.out_of_service and not before.ours:
            raise BackendError(f"node {node} is out of service by someone else: {before.reason!r}")
        if before.ours and before.reason.startswith(REASON_PREFIX):
            return "already drained by gpuwarden"  # (our reservation alone is no drain)
        self.runner.run(
            ["scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"],
            self.timeout,
        )
        after = self.node(node)
        if after is None or not after.ours:
            raise BackendError(f"drain of {node} not visible in sinfo: {after}")
        return "drained"

    def is_taken_out(self, node: str) -> bool:
        n = self.node(node)  # a drain we wrote (our reservation alone is no drain)
        return n is not None and n.ours and n.reason.startswith(REASON_PREFIX)

    def release(self, node: str) -> str:
        before = self.node(node)
        if before is None:
            raise BackendError(f"node {node} unknown to slurm")
        if not before.out_of_service:
            return "already in service"
        if not before.ours:
            raise BackendError(f"refusing to resume {node}: reason {before.reason!r} is not ours")
        if not before.reason.startswith(REASON_PREFIX):  # out only by our reservation
            self.runner.run(
                ["scontrol", "delete", f"ReservationName={RESERVATION_PREFIX}{node}"], self.timeout
            )
        # rc is not trusted (see module docstring); the state read back decides.
        self.runner.run(["scontrol", "update", f"NodeName={node}", "State=RESUME"], self.timeout)
        after = self.node(node)
        if after is None or after.ours:
            raise BackendError(f"resume of {node} did not clear the drain")
        return "resumed"

    def request_checkpoint(self, job: Job) -> None:
        self._run("scancel", "--signal=USR1", "--full", job.job_id)

    def requeue_hold(self, job: Job) -> str:
        """The saga's first step: requeuehold (the job cannot start before its exclusion is
        set). A job found pending and held already (an interrupted saga) is not held again."""
        now = self.job(job.job_id)
        if now is None:
            raise BackendError(f"job {job.job_id} vanished before its requeue")
        if now.state == "PENDING" and now.held:
            return "already held"
        self._run("scontrol", "requeuehold", job.job_id)
        return "requeuehold"

    def requeue_pending(self, job_id: str) -> bool:
        """Read once, never slept on: the executor's tick re-checks until its deadline
        (``requeue_wait_s``); a COMPLETING job takes a while to become PENDING."""
        j = self.job(job_id)
        if j is None:
            raise BackendError(f"job {job_id} vanished during requeue")
        return j.state == "PENDING"

    def requeue_finish(self, job: Job, exclude: str) -> str:
        """The saga's end: exclude the node, StartTime=now, release; when the exclusion
        fails the job is released anyway (compensation). Read back: not held at the end."""
        try:
            self._run("scontrol", "update", f"JobId={job.job_id}", f"ExcNodeList={exclude}")
            self._run("scontrol", "update", f"JobId={job.job_id}", "StartTime=now")
        except BackendError as e:
            self._compensate(job.job_id, e)
        self._run("scontrol", "release", job.job_id)
        after = self.job(job.job_id)
        if after is not None and after.held:
            raise BackendError(f"job {job.job_id} still held after release")
        return "requeued"

    def requeue(self, job: Job, exclude: str) -> None:
        """A saga: requeuehold -> (pending) -> exclude the node -> StartTime=now -> release.

        requeuehold keeps it from starting before the exclusion is set; StartTime=now skips
        the cred_expire BeginTime delay, which Slurm overwrites while COMPLETING. The
        executor runs the three parts as journaled steps, waiting for PENDING across ticks
        (``requeue_hold``, ``requeue_pending``, ``requeue_finish``); this one-shot form never
        sleeps either: a job not PENDING right after the hold is released again
        (compensation) and the caller retries.
        """
        self.requeue_hold(job)
        if not self.requeue_pending(job.job_id):
            err = BackendError(f"job {job.job_id} not pending right after requeuehold")
            self._compensate(job.job_id, err)
        self.requeue_finish(job, exclude)

    def _compensate(self, job_id: str, error: BackendError) -> None:
        try:
            self._run("scontrol", "release", job_id)
        except BackendError as e:
            raise BackendError(f"{error}; compensation failed, job {job_id} held: {e}") from None
        raise BackendError(f"{error}; compensated: job {job_id} released, not excluded")

    def hold(self, job_id: str) -> None:
        """Keep a job from starting (a running job keeps running, reason JobHeldAdmin)."""
        self._run("scontrol", "hold", job_id)

    def release_job(self, job_id: str) -> None:
        self._run("scontrol", "release", job_id)

    def reboot(self, node: str, reason: str) -> str:
        self._run("scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={reason}", node)
        return "reboot requested"

    def mark(self, node: str, state: str) -> None:
        return None  # the drain reason already carries the state


def _maint_unexplained(n: Mapping[str, Any]) -> bool:
    """Shown in maintenance with no reason and no reservation name (22.05's sinfo --json)."""
    if n.get("reason") or n.get("reservation"):
        return False
    base, flags = slurmstate.node_state(n)
    return base == "maint" or bool(flags & MAINT)
