"""A hand-written, fault-injecting Slurm for the property test: answers the commands the
Slurm backend runs (sinfo/squeue --json, scontrol, scancel) from an in-memory cluster.

Faults: a command named in ``fail`` exits 1 without effect; one named in ``partial`` takes
effect and still exits 1 (the reply was lost); ``raise_on`` raises OSError (a runner bug).
``behind_our_back`` lets the test change state as an operator would; ``completing`` keeps a
requeued job COMPLETING for that many ``schedule()`` ticks before it turns PENDING. The real slurmctld is
exercised by test_slurm.py and test_checkpoint_restart.py; this fake exists to run
thousands of interleavings.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from remediation.backends.runner import Result


@dataclass
class FakeNode:
    state: str = "idle"
    flags: set[str] = field(default_factory=set)
    reason: str = ""


@dataclass
class FakeJob:
    state: str
    nodes: list[str]
    restarts: int = 0
    held: bool = False
    excluded: set[str] = field(default_factory=set)
    signals: int = 0
    completing: int = 0  # ticks left in COMPLETING after a requeue
    gpus: tuple[int, ...] | None = None  # GRES IDX on each of its nodes (None: no GPU GRES)


class FakeSlurm:
    def __init__(self, nodes: Sequence[str]) -> None:
        self.nodes = {n: FakeNode() for n in nodes}
        self.jobs: dict[str, FakeJob] = {}
        self.fail: set[str] = set()
        self.partial: set[str] = set()
        self.raise_on: set[str] = set()
        self.calls: list[list[str]] = []
        self.completing = 0  # ticks a requeued job stays COMPLETING before PENDING (real: a few s)

    # ------------------------------------------------------------------ runner protocol
    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        argv = list(argv)
        self.calls.append(argv)
        verb = self._verb(argv)
        if verb in self.raise_on:
            raise OSError(5, f"I/O error running {verb}")
        if verb in self.fail:
            return Result(1, "", f"{verb}: Unable to contact slurm controller (injected)")
        out = self._do(argv)
        if verb in self.partial:
            return Result(1, "", f"{verb}: Socket timed out on send/recv (injected)")
        return Result(0, out, "")

    @staticmethod
    def _verb(argv: list[str]) -> str:
        if argv[0] != "scontrol":
            return argv[0]
        if argv[1] == "update":
            return (
                "drain"
                if "State=DRAIN" in argv
                else "resume"
                if "State=RESUME" in argv
                else "job_update"
            )
        return argv[1]

    def _do(self, argv: list[str]) -> str:
        if argv[0] == "sinfo":
            return json.dumps({"nodes": [self._node_json(n) for n in self.nodes]})
        if argv[0] == "squeue":
            return json.dumps({"jobs": [self._job_json(j) for j in self.jobs]})
        if argv[0] == "scancel":
            job = self.jobs.get(argv[-1])
            if job is not None:
                job.signals += 1
            return ""
        args = dict(a.split("=", 1) for a in argv[2:] if "=" in a)
        if argv[1] == "update" and "NodeName" in args:
            node = self.nodes[args["NodeName"]]
            if args["State"] == "DRAIN":
                node.flags.add("DRAIN")
                node.reason = args.get("Reason", "")
            elif args["State"] == "RESUME":
                node.flags.discard("DRAIN")
                node.reason = ""
        elif argv[1] == "update" and "JobId" in args:
            job = self.jobs[args["JobId"]]
            if "ExcNodeList" in args:
                job.excluded.add(args["ExcNodeList"])
        elif argv[1] == "requeuehold":
            job = self.jobs[argv[2]]
            job.held, job.restarts = True, job.restarts + 1
            if self.completing:
                job.state, job.completing = "COMPLETING", self.completing
            else:
                job.state, job.nodes = "PENDING", []
        elif argv[1] == "release":
            self.jobs[argv[2]].held = False
        elif argv[1] == "reboot":
            node = self.nodes[argv[-1]]
            node.flags.add("REBOOT_REQUESTED")
        return ""

    def _node_json(self, name: str) -> dict[str, object]:
        n = self.nodes[name]
        busy = any(name in j.nodes and j.state == "RUNNING" for j in self.jobs.values())
        base = n.state if n.state != "idle" else ("mixed" if busy else "idle")
        return {"name": name, "state": base, "state_flags": sorted(n.flags), "reason": n.reason}

    def _job_json(self, jid: str) -> dict[str, object]:
        j = self.jobs[jid]
        return {
            "job_id": int(jid),
            "job_state": j.state,
            "state_reason": "JobHeldAdmin" if j.held else "None",
            "nodes": ",".join(j.nodes),
            "restart_cnt": j.restarts,
            # as squeue --json 22.05 shows it: one string per node of the job
            "gres_detail": []
            if j.gpus is None
            else [f"gpu:{len(j.gpus)}(IDX:{','.join(map(str, j.gpus))})" for _ in j.nodes],
        }

    # ------------------------------------------------------------------ the world moves
    def schedule(self) -> None:
        """Start pending, unheld jobs on a node in service that they do not exclude."""
        for j in self.jobs.values():
            if j.state == "COMPLETING":
                j.completing -= 1
                if j.completing <= 0:
                    j.state, j.nodes = "PENDING", []
                continue
            if j.state != "PENDING" or j.held:
                continue
            free = [
                n
                for n, v in self.nodes.items()
                if not v.flags
                and v.state == "idle"
                and n not in j.excluded
                and not any(n in o.nodes for o in self.jobs.values())
            ]
            if free:
                j.state, j.nodes = "RUNNING", [free[0]]

    def ours(self, name: str) -> bool:
        n = self.nodes[name]
        return "DRAIN" in n.flags and n.reason.startswith("gpuwarden:")
