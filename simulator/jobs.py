"""Jobs on the fleet: placement on groups of nodes, synchronous step rhythm, churn.

Sits between the scheduler side of the world and :mod:`simulator.model`: the model asks
for per-node arrays (step period, compute share, GPUs in use, phase origin) and the jobs'
membership, so that peers of one job move together. All draws come from the fleet's one
``numpy.random.Generator``; no wall clock.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from simulator.topology import GPUS

MULTI_NODE_SIZES = (2, 4, 8, 16)
QUEUE_GAP_S = 300.0  # a freed node is cleaned up and requeued before the next job lands


@dataclass
class Job:
    id: int
    nodes: np.ndarray  # node indices
    gpus: int  # GPUs per node in use
    start: float
    end: float  # planned end; a crash or a stop moves it earlier
    step_s: float  # one synchronous training step
    compute: float  # share of a step spent computing (the rest: collectives)
    ib_load: float  # share of the port rate used while communicating
    stages: int = 1  # pipeline stages (for the uneven-stage negative control)


@dataclass
class Jobs:
    """Who runs where. ``job_of[n]`` is the job id on node ``n`` or -1 when idle."""

    n_nodes: int
    idle_fraction: float = 0.1
    mean_duration_s: float = 8 * 3600.0
    small_job_share: float = 0.3  # share of placements that are single-node jobs
    running: dict[int, Job] = field(default_factory=dict)
    history: list[tuple[int, float, float, tuple[int, ...]]] = field(default_factory=list)
    _next_id: int = 1000

    def __post_init__(self) -> None:
        self.job_of = np.full(self.n_nodes, -1, dtype=np.int64)
        self.free_since = np.full(self.n_nodes, -np.inf)
        self.version = 0  # bumped whenever membership changes (the model caches per version)

    def advance(
        self, t: float, rng: np.random.Generator, blocked: np.ndarray | None = None
    ) -> None:
        """End jobs that are due, then fill free nodes until only the idle share is left.

        ``blocked`` nodes (a GPU lost or hung, rebooting) get no new job: the scheduler sees
        them as not ready.
        """
        for job in [j for j in self.running.values() if j.end <= t]:
            self._finish(job, job.end)
        target_idle = round(self.idle_fraction * self.n_nodes)
        free = (self.job_of < 0) & (self.free_since + QUEUE_GAP_S <= t)
        ready = np.flatnonzero(free if blocked is None else free & ~blocked)
        while ready.size > target_idle and ready.size > 0:
            size = self._draw_size(rng, ready.size - target_idle)
            self._start(ready[:size], t, rng)
            ready = ready[size:]

    def stop_on(self, node: int, t: float) -> Job | None:
        """The job on ``node`` ends now (it crashed or was stopped); its nodes go idle."""
        jid = int(self.job_of[node])
        if jid < 0:
            return None
        job = self.running[jid]
        self._finish(job, t)
        return job

    def at(self, t: float) -> dict[int, list[int]]:
        """Jobs that were running at ``t`` (from the history and the running set)."""
        out = {jid: list(nodes) for jid, s, e, nodes in self.history if s <= t < e}
        out.update({j.id: j.nodes.tolist() for j in self.running.values() if j.start <= t})
        return out

    def _draw_size(self, rng: np.random.Generator, room: int) -> int:
        if room < 2 or rng.random() < self.small_job_share:
            return 1
        sizes = [s for s in MULTI_NODE_SIZES if s <= room] or [1]
        return int(rng.choice(sizes))

    def _start(self, nodes: np.ndarray, t: float, rng: np.random.Generator) -> None:
        multi = nodes.size > 1
        mean = self.mean_duration_s if multi else self.mean_duration_s / 4
        job = Job(
            id=self._next_id,
            nodes=nodes.copy(),
            gpus=GPUS if multi else int(rng.integers(1, GPUS + 1)),
            start=t,
            end=t + max(600.0, float(rng.exponential(mean))),
            step_s=float(rng.uniform(2.0, 12.0) if multi else rng.uniform(0.2, 2.0)),
            compute=float(rng.uniform(0.70, 0.90) if multi else rng.uniform(0.3, 0.95)),
            ib_load=float(rng.uniform(0.3, 0.7) if multi else 0.02),
            stages=int(rng.choice([1, 2, 4])) if nodes.size >= 4 else 1,
        )
        self._next_id += 1
        self.running[job.id] = job
        self.job_of[nodes] = job.id
        self.version += 1

    def place(
        self,
        nodes: np.ndarray,
        t: float,
        rng: np.random.Generator,
        *,
        end: float | None = None,
        stages: int | None = None,
    ) -> Job:
        """End the jobs on ``nodes`` and start one job spanning them (for experiments)."""
        for job in [j for j in self.running.values() if np.isin(j.nodes, nodes).any()]:
            self._finish(job, t)
        self.free_since[nodes] = -np.inf
        self._start(np.asarray(nodes), t, rng)
        job = self.running[self._next_id - 1]
        job.end = job.end if end is None else end
        job.stages = job.stages if stages is None else stages
        return job

    def _finish(self, job: Job, t: float) -> None:
        job.end = t
        self.history.append((job.id, job.start, t, tuple(job.nodes.tolist())))
        del self.running[job.id]
        self.job_of[job.nodes] = -1
        self.free_since[job.nodes] = t
        self.version += 1
