"""Checkpoint storage: a mount that many nodes see failing, hung or slow is one cluster finding.

Reads the exporter's storage probes per (node, mount) (``storage_probe_up`` and the fsync
``storage_probe_duration_seconds``, ``(T, nodes, mounts)``). A node *sees the mount bad*
when, over the last ``window_s``, at least ``failing_share`` of its probes failed or hung,
or its median fsync took over ``slow_fsync_s``. When at least ``min_nodes`` nodes and
``min_fraction`` of the nodes probing the mount see it bad, that is a shared storage fault:
one ``storage_degraded`` finding for the cluster (``node="cluster"``, subject
``mount=<path>``), never one per node, and never more than ``notify`` (draining nodes for a
shared file system is wrong; remediation holds back checkpoints into it instead).

Fewer nodes than that is a client-side problem of those nodes; it is not reported here: the
per-node alert CheckpointStorageProbeFailing (alerts/storage.rules.yml) covers it from the
same series, and one node's slow fsync under load is not a storage fault.

The counts are the fleet's: a replica of the sharded analyzer leaves its part's tally of
each mount (:meth:`StorageDetector.pools`: the nodes probing, failing and slow, the first
failure, the slowest median) with its marginal scores, and the one replica that reports
fleet-wide findings (:attr:`StorageDetector.fleet`) judges its tally joined with the
others' (``Window.elsewhere``): the finding one analyzer makes, once.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from analyzer.detectors.emit import ev
from analyzer.detectors.series import nanmedian
from analyzer.findings import CLUSTER, Finding
from analyzer.pools import Pool
from analyzer.window import Window
from exporter import catalog


class StorageDetector:
    name = "storage"

    def __init__(
        self,
        min_nodes: int = 3,
        min_fraction: float = 0.2,
        slow_fsync_s: float = 2.0,
        window_s: float = 300.0,
        failing_share: float = 0.5,
    ) -> None:
        if min_nodes < 1 or not 0.0 < min_fraction <= 1.0 or not 0.0 < failing_share <= 1.0:
            raise ValueError(
                "storage detector: min_nodes >= 1, min_fraction and failing_share in (0, 1]"
            )
        if slow_fsync_s <= 0 or window_s <= 0:
            raise ValueError("storage detector: slow_fsync_s and window_s must be > 0")
        self.min_nodes, self.min_fraction = min_nodes, min_fraction
        self.slow_fsync_s, self.window_s, self.failing_share = slow_fsync_s, window_s, failing_share
        self.fleet = True  # a replica's: whether it reports the cluster's findings (one does)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> StorageDetector:
        """From the analyzer config's ``detectors.storage``; ValueError names a bad key."""
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - set(inspect.signature(cls).parameters))
        if unknown:
            raise ValueError(f"detectors.storage: unknown key(s) {', '.join(unknown)}")
        return cls(**cfg)

    def detect(self, window: Window) -> list[Finding]:
        if window.empty or not self.fleet:
            return []
        mine = self._tallies(window)
        mounts = {*mine, *(q[len(TALLY) :] for q in window.elsewhere if q.startswith(TALLY))}
        out = []
        for mount in sorted(mounts, key=_in(window.mounts)):
            tally = mine.get(mount, Pool())
            there = window.elsewhere.get(TALLY + mount)
            f = self._finding(window, mount, tally if there is None else tally.join(there))
            if f is not None:
                out.append(f)
        return out

    def pools(self, window: Window) -> dict[str, Pool]:
        """Per mount, this window's tally (a replica's part, for the one that reports)."""
        return {TALLY + mount: t for mount, t in self._tallies(window).items()}

    def _tallies(self, window: Window) -> dict[str, Pool]:
        """Per mount some node probes: a :class:`Pool` whose counts are the nodes probing,
        failing and slow, and whose values are the first time in the look-back a failing
        node's probe failed and the slow nodes' slowest median fsync (joined: the fleet's)."""
        up = window.get(catalog.STORAGE_PROBE_UP)
        if window.empty or up is None or not window.mounts:
            return {}
        fsync = window.get(catalog.STORAGE_PROBE_DURATION)
        sl = window.tail(self.window_s)
        t = window.t[sl]
        out = {}
        for m, mount in enumerate(window.mounts):
            u = up[sl, :, m]
            probing = ~np.isnan(u).all(axis=0)
            if not probing.any():
                continue
            with np.errstate(all="ignore"):
                fail_share = np.nansum(u < 0.5, axis=0) / np.maximum((~np.isnan(u)).sum(axis=0), 1)
            failing = probing & (fail_share >= self.failing_share)
            p50 = np.full(len(window.nodes), np.nan)
            if fsync is not None and fsync.shape[2] > m:
                p50 = nanmedian(fsync[sl, :, m], axis=0)[0]
            slow = probing & ~failing & (np.nan_to_num(p50, nan=0.0) > self.slow_fsync_s)
            fails = (u[:, failing] < 0.5).any(axis=1)
            first = [float(t[int(np.argmax(fails))])] if fails.any() else []
            worst = [float(np.nanmax(p50[slow]))] if slow.any() else []
            out[mount] = Pool(
                {"failed_at": np.array(first), "fsync_p50": np.array(worst)},
                {"probing": int(probing.sum()), "failing": int(failing.sum()),
                 "slow": int(slow.sum())},
            )  # fmt: skip
        return out

    def _finding(self, w: Window, mount: str, tally: Pool) -> Finding | None:
        n_probe, n_fail, n_slow = (tally.nodes.get(k, 0) for k in ("probing", "failing", "slow"))
        bad = n_fail + n_slow
        if bad < self.min_nodes or bad < self.min_fraction * n_probe:
            return None
        # since: the first sample in the window at which a bad node's probe failed (or, for
        # slow nodes only, the window's start: a median has no single onset)
        failed_at = tally.values.get("failed_at", np.zeros(0))
        since = float(failed_at.min()) if len(failed_at) else float(w.t[w.tail(self.window_s)][0])
        slowest = tally.values.get("fsync_p50", np.zeros(0))
        worst = float(slowest.max()) if n_slow and len(slowest) else float("nan")
        what = f"fails or hangs on {n_fail}" if n_fail else ""
        what += (" and " if n_fail and n_slow else "") + (f"is slow on {n_slow}" if n_slow else "")
        return Finding(
            CLUSTER,
            f"mount={mount}",
            "storage_degraded",
            "critical" if n_fail >= self.min_nodes else "warning",
            "notify",
            self.name,
            bad / max(n_probe, 1),
            since,
            ev(nodes=n_probe, failing=n_fail, slow=n_slow, fsync_p50_max=worst),
            f"checkpoint storage {mount} {what} of {n_probe} nodes: a shared storage fault",
        )


TALLY = "storage:"  # a mount's tally's key among a replica's pools


def _in(order: tuple[str, ...]) -> Callable[[str], tuple[int, str]]:
    """Mounts in the window's order, then those only other replicas' nodes probe."""
    return lambda m: (order.index(m) if m in order else len(order), m)
