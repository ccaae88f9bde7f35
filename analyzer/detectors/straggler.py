"""Stragglers: within a synchronous job, the GPU the others wait for is the one that stays
busy while its peers idle at the collectives (Holmes; REFERENCE.md §5). Tells a hardware
straggler (one node, persistent, clocks below its peers or following the node across jobs)
from workload imbalance (a whole pipeline stage, or scattered nodes), which never
recommends a drain.

Where NCCL's collective waits keep every rank at ~100 % utilisation, utilisation cannot tell,
so the rank signal is, best first: the step time the job publishes per rank
(``job_step_seconds``, ``checkpoint.publish_step``: the slow rank's compute takes longer),
SM or tensor-pipe activity (``gpu_sm_active_ratio``/``gpu_tensor_pipe_active_ratio``, DCGM's
PROF_SM_ACTIVE/PIPE_TENSOR_ACTIVE: a rank waiting in a collective kernel keeps few SMs busy,
the slow one keeps computing), else utilisation; and whatever the signal, the rank whose SM
clock sits below the job's (same model) ranks' is the hardware's doing.

Reads those, ``gpu_utilization_ratio`` and ``gpu_sm_clock_hertz`` (T, node, gpu) and the job map;
averages over the last ``n`` samples (the per-sample noise is larger than a 3% slowdown).
Remembers per node the jobs in which it straggled, and per (job, node) the streak. Nodes no
job comparison reaches (a single-node job, a small job, no job map) are judged against their
model's busy peers by :mod:`analyzer.detectors.failslow`; the clock test that tells hardware
from workload is shared with the peer detector (:mod:`analyzer.detectors.workload`).
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from collections.abc import Mapping, Set
from typing import Any

import numpy as np

from analyzer.detectors import capsight, workload
from analyzer.detectors.failslow import NOT_A_REASON, FailSlow
from analyzer.detectors.groups import split_by_model
from analyzer.detectors.recall import entries, ident, replaced, second
from analyzer.detectors.series import nanmedian, robust_z
from analyzer.findings import Finding
from analyzer.pools import Pool
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog

BUSY = 0.05
SIGNALS = (  # rank signals that survive collective waits, best first
    ("step time", catalog.JOB_STEP_SECONDS),
    ("SM activity", catalog.GPU_SM_ACTIVE),
    ("tensor activity", catalog.GPU_TENSOR_ACTIVE),
)


class StragglerDetector:
    name = "straggler"

    def __init__(
        self,
        z: float = 5.0,
        n: int = 12,
        floor: float = 0.005,
        clock_z: float = workload.CLOCK_Z,
        min_nodes: int = 3,
        streak: int = 2,
        max_hardware_nodes: int = 1,
    ):
        self.z, self.n, self.floor, self.clock_z = z, n, floor, clock_z
        self.min_nodes, self.streak, self.max_hardware_nodes = min_nodes, streak, max_hardware_nodes
        self._jobs_seen: dict[str, set[str]] = defaultdict(set)
        self._by = "utilisation"  # the rank signal of the job being judged, for the message
        self._streaks: dict[tuple[str, str], tuple[int, float]] = {}
        self.fail_slow = FailSlow(n=n, min_nodes=min_nodes, streak=streak)

    def detect(self, window: Window) -> list[Finding]:
        util = window.get(catalog.GPU_UTILIZATION)
        clock = window.get(catalog.GPU_SM_CLOCK)
        if window.empty or util is None or util.ndim != 3 or len(window.t) < self.n:
            return []
        signals = [(name, a) for name, m in SIGNALS
                   if (a := window.get(m)) is not None and a.shape == util.shape]  # fmt: skip
        out: list[Finding] = []
        streaks: dict[tuple[str, str], tuple[int, float]] = {}
        judged: set[int] = set()  # nodes a job comparison covers; the rest: fail-slow alone
        for job, members in sorted(window.jobs.items()):
            all_idx = np.array(
                sorted({m for m in members if 0 <= m < len(window.nodes)}), dtype=int
            )
            # ranks on another GPU generation run at another speed: compare like with like
            for _, idx in split_by_model(window, all_idx, config=True):
                if len(idx) < self.min_nodes:
                    continue
                judged.update(int(i) for i in idx)
                u = util[-self.n :, idx, :]
                c = clock[-self.n :, idx, :] if clock is not None and clock.ndim == 3 else None
                sig = self._signal(u, [(name, a[-self.n :, idx, :]) for name, a in signals])
                out += self._job(window, job, idx, u, c, streaks, sig)
        self._streaks = streaks
        out += self.fail_slow.detect(window, judged, self.name)
        # clocks below the peers' without the power limit or reasons may be an admin's cap
        return capsight.downgrade(out, window, lambda f: f.kind == "straggler")

    def pools(self, window: Window) -> dict[str, Pool]:
        return self.fail_slow.pools(window)

    def remember(self, nodes: Set[str]) -> dict[str, Any]:
        """The streaks and straggling jobs of ``nodes`` (:mod:`analyzer.detectors.recall`)."""
        return {
            "streaks": [[j, n, c, s] for (j, n), (c, s) in entries(self._streaks, nodes, second)],
            "jobs": {n: sorted(js) for n, js in entries(self._jobs_seen, nodes, ident)},
            "fail_slow": self.fail_slow.remember(nodes),
        }

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> None:
        streaks = [((str(j), str(n)), (int(c), float(s)))
                   for j, n, c, s in doc.get("streaks", [])]  # fmt: skip
        jobs = [(str(n), {str(j) for j in js}) for n, js in dict(doc.get("jobs", {})).items()]
        fail_slow = self.fail_slow.adopted(doc.get("fail_slow", []), nodes)
        self._streaks = replaced(self._streaks, nodes, second, streaks)
        self._jobs_seen = defaultdict(set, replaced(self._jobs_seen, nodes, ident, jobs))
        self.fail_slow._streaks = fail_slow

    def _signal(self, u: np.ndarray, signals: list[tuple[str, np.ndarray]]
                ) -> tuple[str, np.ndarray]:  # fmt: skip
        """The best rank signal this job has on enough busy nodes, higher = slower: step time
        relative to the job's median, or activity; else utilisation."""
        busy = _busy_throughout(u)
        for name, a in signals:
            covered = np.isfinite(a).any(axis=(0, 2)) & busy
            if covered.sum() < self.min_nodes:
                continue
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                level = np.nanmedian(a[:, covered, :])
            if not level > (0 if name == "step time" else BUSY):
                continue  # zeros from busy GPUs (profiling not really sampled): no signal
            if name == "step time":
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    med = np.nanmedian(a.reshape(a.shape[0], -1), axis=1)[:, None, None]
                a = a / np.where(med > 0, med, np.nan)  # a 3 % slower rank: 1.03
            return name, a
        return "utilisation", u

    def _job(self, w: Window, job: str, idx: np.ndarray, u: np.ndarray, c: np.ndarray | None,
             streaks: dict[tuple[str, str], tuple[int, float]],
             sig: tuple[str, np.ndarray] | None = None) -> list[Finding]:  # fmt: skip
        busy = _busy_throughout(u)
        if busy.sum() < self.min_nodes:
            return []
        self._by, u = sig or ("utilisation", u)
        # deviation from the job's median at each sample first: the step rhythm moves every
        # peer together, and a scrape gap must not turn that rhythm into a difference
        ub = np.where(busy[None, :, None], u, np.nan)
        with warnings.catch_warnings():  # an all-NaN column is expected: a node not busy
            warnings.simplefilter("ignore", RuntimeWarning)
            dev = ub - nanmedian(ub.reshape(ub.shape[0], -1), axis=1)[:, :, None]
            um = np.nanmean(dev, axis=0)  # (N, G)
            um[~busy] = np.nan
            zg = np.nan_to_num(robust_z(um.reshape(-1), axis=0, floor=self.floor), nan=0.0)
            zg = zg.reshape(um.shape)
            zn = np.nan_to_num(robust_z(np.nanmean(um, axis=1), 0, self.floor * 0.6), nan=0.0)
        # A mean over fewer samples (scrape gaps) is noisier than its peers': its z shrinks.
        known = np.sum(~np.isnan(dev), axis=0).astype(float)  # (N, G)
        zg = zg * _evidence(known, busy)
        zn = zn * _evidence(known.sum(axis=1), busy)
        hot_nodes = np.nonzero((zn > self.z) | (zg > self.z).any(axis=1))[0]
        clock_z = self._clock_z(c, busy)
        if len(hot_nodes) == 0:  # NCCL peers wait at ~100 %: the slow rank's clocks tell
            return self._by_clock(w, job, idx, clock_z, um, streaks)
        slow: list[tuple[int, str, int | None, bool]] = []
        for n in map(int, hot_nodes):
            subject, g = self._subject(zn, zg, n, u.shape[2])
            slow.append((n, subject, g, self._clock_deficit(clock_z, n, g)))
        if len(hot_nodes) <= self.max_hardware_nodes:
            return [self._finding(w, job, idx, n, subject, g, deficit, zn, zg, um, streaks)
                    for n, subject, g, deficit in slow]  # fmt: skip
        # Several nodes stand out. Clocks below the peers' are the hardware's doing whatever
        # else is going on (a throttled node and a slow one can share a job); the others
        # are a pipeline stage or scattered imbalance: workload, never more than notify.
        out = [self._finding(w, job, idx, n, subject, g, True, zn, zg, um, streaks)
               for n, subject, g, deficit in slow if deficit]  # fmt: skip
        rest = np.array([n for n, _, _, deficit in slow if not deficit], dtype=int)
        if len(rest):
            shape = "stage" if _contiguous(rest) else "scattered"
            out.append(_imbalance(w, job, idx, rest, shape, self.name))
        return out

    def _by_clock(self, w: Window, job: str, idx: np.ndarray, clock_z: np.ndarray | None,
                  um: np.ndarray, streaks: dict[tuple[str, str], tuple[int, float]]) -> list[Finding]:  # fmt: skip
        """Ranks whose SM clocks sit below the job's same-model ranks (z < -z): the signal
        that survives collective waits, where every rank shows ~100 % utilisation."""
        if clock_z is None:
            return []
        slow = -np.nan_to_num(clock_z, nan=0.0)  # (N, G), positive = slower
        node_z = np.median(slow, axis=1)
        hot = np.nonzero((node_z > self.z) | (slow > self.z).any(axis=1))[0]
        if len(hot) == 0 or len(hot) > max(self.max_hardware_nodes, len(idx) // 4):
            return []  # many ranks slow at once: the job's shape, not one part
        return [self._finding(w, job, idx, int(n), *self._subject(node_z, slow, int(n), slow.shape[1]),
                              True, node_z, slow, um, streaks) for n in hot]  # fmt: skip

    def _subject(self, zn: np.ndarray, zg: np.ndarray, n: int, gpus: int) -> tuple[str, int | None]:
        """The whole node, or its most deviating GPU when only some of its GPUs stand out."""
        hot = np.nonzero(zg[n] > self.z)[0]
        whole = zn[n] > self.z and (zg[n] > self.z / 2).sum() >= gpus // 2
        if whole or len(hot) == 0:
            return "node", None
        g = int(hot[np.argmax(zg[n, hot])])
        return f"gpu={g}", g

    def _finding(self, w: Window, job: str, idx: np.ndarray, n: int, subject: str,
                 g: int | None, slow_clock: bool, zn: np.ndarray, zg: np.ndarray,
                 um: np.ndarray, streaks: dict[tuple[str, str], tuple[int, float]]) -> Finding:  # fmt: skip
        node = w.nodes[idx[n]]
        zval = float(zn[n]) if g is None else float(zg[n, g])
        count, since = self._streaks.get((job, node), (0, w.now))
        streaks[(job, node)] = (count + 1, since)
        self._jobs_seen[node].add(job)
        follows = len(self._jobs_seen[node]) >= 2
        # Only clocks below the peers' prove hardware: a node that straggles again in another
        # job may simply hold a slow pipeline stage again, so that alone earns a cordon.
        persistent = count + 1 >= self.streak
        action = (
            "drain"
            if persistent and slow_clock
            else "cordon"
            if persistent and follows
            else "notify"
        )
        why = "clocks below its peers" if slow_clock else "no clock deficit (may be workload)"
        held = reasons_held(w, int(idx[n]), g, self.n)
        if held:  # what holds its clocks down (thermal, a cap): the throttling detector's too
            why += f" (held down by {', '.join(held)})"
        why += f"; by {self._by}"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            excess = float(np.nanmean(um[n]) - np.nanmedian(um))
        return Finding(node, subject, "straggler", "warning", action, self.name,
                       float(min(1.0, 0.4 + zval / (4 * self.z) + 0.2 * slow_clock)), since,
                       {"z": zval, "busy_excess": excess,
                        "jobs": float(len(self._jobs_seen[node])), "clock_deficit": float(slow_clock)},
                       f"job {job} waits on this {subject.split('=')[0]}: {why}")  # fmt: skip

    @staticmethod
    def _clock_z(c: np.ndarray | None, busy: np.ndarray) -> np.ndarray | None:
        """Robust z of each busy GPU's mean clock against the job's busy GPUs, (N, G)."""
        if c is None:
            return None
        return workload.clock_z(workload.mean_clock(c, busy[:, None]))

    def _clock_deficit(self, z: np.ndarray | None, n: int, g: int | None) -> bool:
        if z is None:
            return False
        mine = z[n] if g is None else z[n, g : g + 1]
        return bool(workload.clocks_behind(np.nanmedian(mine)[None], self.clock_z)[0])


def reasons_held(w: Window, node: int, gpu: int | None, n: int) -> list[str]:
    """The clock-event reasons (not idle or display) held for at least half of the last ``n``
    known samples on the node's GPU ``gpu`` (None: any of its GPUs), in NVML's bit order."""
    a = w.get(catalog.GPU_THROTTLE)
    if a is None or a.ndim != 4 or a.shape[-1] != len(THROTTLE_REASONS):
        return []
    tail = a[-n:, node] if gpu is None else a[-n:, node, gpu : gpu + 1]
    known = ~np.isnan(tail).all(axis=2)  # (T, G): a sample of that GPU's reasons
    with np.errstate(invalid="ignore"):
        on = np.nan_to_num(tail, nan=0.0) >= 0.5
    share = on.sum(axis=0) / np.maximum(known.sum(axis=0), 1)[:, None]  # (G, reasons)
    hot = (share >= 0.5) & (known.sum(axis=0) > 0)[:, None]
    return [r for i, r in enumerate(THROTTLE_REASONS)
            if r not in NOT_A_REASON and bool(hot[:, i].any())]  # fmt: skip


def _imbalance(w: Window, job: str, idx: np.ndarray, nodes: np.ndarray, shape: str,
               detector: str) -> Finding:  # fmt: skip
    return Finding(w.nodes[idx[int(nodes[0])]], f"job={job}", "workload_imbalance", "info",
                   "notify", detector, 0.7, w.now, {"nodes": float(len(nodes))},
                   f"job {job}: {shape} imbalance across {len(nodes)} nodes (workload)")  # fmt: skip


def _evidence(known: np.ndarray, busy: np.ndarray) -> np.ndarray:
    """sqrt(samples behind each mean / the typical busy peer's), at most 1: the standard
    error of a mean grows as 1/sqrt(n), so a z from a gappy series counts for less."""
    ref = float(np.median(known[busy])) if busy.any() else 0.0
    if ref <= 0:
        return np.ones_like(known)
    return np.asarray(np.minimum(1.0, np.sqrt(known / ref)))


def _busy_throughout(u: np.ndarray) -> np.ndarray:
    """Nodes with no known idle sample and at least half of their samples known (a scrape
    gap is not idleness)."""
    known = ~np.isnan(u)
    with np.errstate(invalid="ignore"):
        idle = known & (u <= BUSY)
    return np.asarray(~idle.any(axis=(0, 2)) & (known.mean(axis=(0, 2)) >= 0.5))


def _contiguous(nodes: np.ndarray) -> bool:
    return bool(len(nodes) > 1 and np.all(np.diff(np.sort(nodes)) == 1))
