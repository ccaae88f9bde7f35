"""Stragglers: within a synchronous job, the GPU the others wait for is the one that stays
busy while its peers idle at the collectives (Holmes; REFERENCE.md §5). Tells a hardware
straggler (one node, persistent, clocks below its peers or following the node across jobs)
from workload imbalance (a whole pipeline stage, or scattered nodes), which never
recommends a drain.

Reads ``gpu_utilization_ratio`` and ``gpu_sm_clock_hertz`` (T, node, gpu) and the job map;
averages over the last ``n`` samples (the per-sample noise is larger than a 3% slowdown).
Remembers per node the jobs in which it straggled, and per (job, node) the streak.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from analyzer.detectors.series import nanmedian, robust_z
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog

BUSY = 0.05


class StragglerDetector:
    name = "straggler"

    def __init__(
        self,
        z: float = 5.0,
        n: int = 12,
        floor: float = 0.005,
        clock_z: float = 3.0,
        min_nodes: int = 3,
        streak: int = 2,
        max_hardware_nodes: int = 1,
    ):
        self.z, self.n, self.floor, self.clock_z = z, n, floor, clock_z
        self.min_nodes, self.streak, self.max_hardware_nodes = min_nodes, streak, max_hardware_nodes
        self._jobs_seen: dict[str, set[str]] = defaultdict(set)
        self._streaks: dict[tuple[str, str], tuple[int, float]] = {}

    def detect(self, window: Window) -> list[Finding]:
        util = window.get(catalog.GPU_UTILIZATION)
        clock = window.get(catalog.GPU_SM_CLOCK)
        if window.empty or util is None or util.ndim != 3 or len(window.t) < self.n:
            return []
        out: list[Finding] = []
        streaks: dict[tuple[str, str], tuple[int, float]] = {}
        for job, members in sorted(window.jobs.items()):
            idx = np.array(sorted({m for m in members if 0 <= m < len(window.nodes)}), dtype=int)
            if len(idx) < self.min_nodes:
                continue
            u = util[-self.n :, idx, :]
            c = clock[-self.n :, idx, :] if clock is not None and clock.ndim == 3 else None
            f = self._job(window, job, idx, u, c, streaks)
            if f is not None:
                out.append(f)
        self._streaks = streaks
        return out

    def _job(self, w: Window, job: str, idx: np.ndarray, u: np.ndarray, c: np.ndarray | None,
             streaks: dict[tuple[str, str], tuple[int, float]]) -> Finding | None:  # fmt: skip
        busy = _busy_throughout(u)
        if busy.sum() < self.min_nodes:
            return None
        # deviation from the job's median at each sample first: the step rhythm moves every
        # peer together, and a scrape gap must not turn that rhythm into a difference
        ub = np.where(busy[None, :, None], u, np.nan)
        dev = ub - nanmedian(ub.reshape(ub.shape[0], -1), axis=1)[:, :, None]
        with np.errstate(all="ignore"):
            um = np.nanmean(dev, axis=0)  # (N, G)
        um[~busy] = np.nan
        zg = np.nan_to_num(robust_z(um.reshape(-1), axis=0, floor=self.floor), nan=0.0)
        zg = zg.reshape(um.shape)
        with np.errstate(all="ignore"):
            zn = np.nan_to_num(robust_z(np.nanmean(um, axis=1), 0, self.floor * 0.6), nan=0.0)
        hot_nodes = np.nonzero((zn > self.z) | (zg > self.z).any(axis=1))[0]
        if len(hot_nodes) == 0:
            return None
        if len(hot_nodes) > self.max_hardware_nodes:
            shape = "stage" if _contiguous(hot_nodes) else "scattered"
            return _imbalance(w, job, idx, hot_nodes, shape, self.name)
        n = int(hot_nodes[0])
        node = w.nodes[idx[n]]
        gpus = np.nonzero(zg[n] > self.z)[0]
        whole = zn[n] > self.z and (zg[n] > self.z / 2).sum() >= u.shape[2] // 2
        subject = "node" if whole or len(gpus) == 0 else f"gpu={int(gpus[0])}"
        if subject != "node":
            gpus = gpus[np.argsort(-zg[n, gpus])]
            subject = f"gpu={int(gpus[0])}"
        zval = float(zn[n]) if subject == "node" else float(zg[n, gpus[0]])
        count, since = self._streaks.get((job, node), (0, w.now))
        streaks[(job, node)] = (count + 1, since)
        slow_clock = self._clock_deficit(c, busy, n, None if subject == "node" else int(gpus[0]))
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
        return Finding(node, subject, "straggler", "warning", action, self.name,
                       float(min(1.0, 0.4 + zval / (4 * self.z) + 0.2 * slow_clock)), since,
                       {"z": zval, "busy_excess": float(np.nanmean(um[n]) - np.nanmedian(um)),
                        "jobs": float(len(self._jobs_seen[node])), "clock_deficit": float(slow_clock)},
                       f"job {job} waits on this {subject.split('=')[0]}: {why}")  # fmt: skip

    def _clock_deficit(self, c: np.ndarray | None, busy: np.ndarray, n: int, g: int | None) -> bool:
        if c is None:
            return False
        with np.errstate(all="ignore"):
            cm = np.nanmean(c, axis=0)
        cm[~busy] = np.nan
        med = float(np.nanmedian(cm)) if np.isfinite(cm).any() else 0.0
        z = robust_z(cm.reshape(-1), axis=0, floor=max(0.005 * abs(med), 1e-9)).reshape(cm.shape)
        mine = z[n] if g is None else z[n, g : g + 1]
        return bool(np.nanmedian(mine) < -self.clock_z)


def _imbalance(w: Window, job: str, idx: np.ndarray, nodes: np.ndarray, shape: str,
               detector: str) -> Finding:  # fmt: skip
    return Finding(w.nodes[idx[int(nodes[0])]], f"job={job}", "workload_imbalance", "info",
                   "notify", detector, 0.7, w.now, {"nodes": float(len(nodes))},
                   f"job {job}: {shape} imbalance across {len(nodes)} nodes (workload)")  # fmt: skip


def _busy_throughout(u: np.ndarray) -> np.ndarray:
    """Nodes with no known idle sample and at least half of their samples known (a scrape
    gap is not idleness)."""
    known = ~np.isnan(u)
    with np.errstate(invalid="ignore"):
        idle = known & (u <= BUSY)
    return np.asarray(~idle.any(axis=(0, 2)) & (known.mean(axis=(0, 2)) >= 0.5))


def _contiguous(nodes: np.ndarray) -> bool:
    return bool(len(nodes) > 1 and np.all(np.diff(np.sort(nodes)) == 1))
