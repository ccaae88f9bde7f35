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
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

import numpy as np

from analyzer.detectors.emit import ev
from analyzer.detectors.series import nanmedian
from analyzer.findings import CLUSTER, Finding
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

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any] | None) -> StorageDetector:
        """From the analyzer config's ``detectors.storage``; ValueError names a bad key."""
        cfg = dict(cfg or {})
        unknown = sorted(set(cfg) - set(inspect.signature(cls).parameters))
        if unknown:
            raise ValueError(f"detectors.storage: unknown key(s) {', '.join(unknown)}")
        return cls(**cfg)

    def detect(self, window: Window) -> list[Finding]:
        up = window.get(catalog.STORAGE_PROBE_UP)
        if window.empty or up is None or not window.mounts:
            return []
        fsync = window.get(catalog.STORAGE_PROBE_DURATION)
        sl = window.tail(self.window_s)
        out = []
        for m, mount in enumerate(window.mounts):
            u = up[sl, :, m]
            probing = ~np.isnan(u).all(axis=0)
            with np.errstate(all="ignore"):
                fail_share = np.nansum(u < 0.5, axis=0) / np.maximum((~np.isnan(u)).sum(axis=0), 1)
            failing = probing & (fail_share >= self.failing_share)
            p50 = np.full(len(window.nodes), np.nan)
            if fsync is not None and fsync.shape[2] > m:
                p50 = nanmedian(fsync[sl, :, m], axis=0)[0]
            slow = probing & ~failing & (np.nan_to_num(p50, nan=0.0) > self.slow_fsync_s)
            f = self._finding(window, mount, u, probing, failing, slow, p50, sl)
            if f is not None:
                out.append(f)
        return out

    def _finding(self, w: Window, mount: str, u: np.ndarray, probing: np.ndarray,
                 failing: np.ndarray, slow: np.ndarray, p50: np.ndarray,
                 sl: slice) -> Finding | None:  # fmt: skip
        n_probe, n_fail, n_slow = int(probing.sum()), int(failing.sum()), int(slow.sum())
        bad = n_fail + n_slow
        if bad < self.min_nodes or bad < self.min_fraction * n_probe:
            return None
        # since: the first sample in the window at which a bad node's probe failed (or, for
        # slow nodes only, the window's start: a median has no single onset)
        t = w.t[sl]
        fails = (u[:, failing] < 0.5).any(axis=1) if n_fail else np.zeros(len(t), dtype=bool)
        since = float(t[int(np.argmax(fails))]) if fails.any() else float(t[0])
        worst = float(np.nanmax(p50[slow])) if n_slow else float("nan")
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
