"""Fail-slow without a job to compare with: a busy GPU whose SM clock sits below its model's
busy peers across the fleet, with no clock-event reason that explains it.

Part of the straggler detector (:mod:`analyzer.detectors.straggler`), for the GPUs its job
comparison cannot reach: a single-node job, a job with fewer than three nodes of one
configuration, a fleet without any job map (a dcgm-exporter fleet without HPC job mapping).
A healthy GPU under load runs at its boost clock whatever it computes; throttling (power cap,
thermal, an administrator's application clocks) says so in its clock-event reasons and is the
throttling detector's finding. So "under load, clocks below the same configuration's, no
reason" is evidence of a slow part without any job. An idle GPU shows nothing: its clock is
the idle clock whatever its health. Peers are the same model and power limit
(:func:`~analyzer.detectors.groups.configurations`); with fewer than ``min_nodes`` such nodes
busy, the model's specified maximum clock is the reference and the finding only notifies.
"""

from __future__ import annotations

from collections.abc import Collection, Set
from typing import Any

import numpy as np

from analyzer.detectors import capsight, workload
from analyzer.detectors.groups import configurations, models, split_by_model
from analyzer.detectors.recall import entries, first, replaced
from analyzer.findings import Finding
from analyzer.pools import BUSY_CLOCK, Pool, medians, pool_of
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog, catalog_specs

BUSY = 0.05
LOAD = 0.25  # "under load": a GPU this busy on average runs at its boost clock (light work may not)
# clock-event reasons that are not an explanation: an idle GPU, a display clock
NOT_A_REASON = frozenset({"gpu_idle", "display_clock_setting"})


class FailSlow:
    def __init__(self, n: int = 12, deficit: float = 0.03, min_nodes: int = 3, streak: int = 2):
        self.n, self.deficit, self.min_nodes, self.streak = n, deficit, min_nodes, streak
        self._streaks: dict[tuple[str, str], tuple[int, float]] = {}

    def detect(self, window: Window, judged: Collection[int], detector: str) -> list[Finding]:
        """Findings for the nodes not in ``judged`` (those a job comparison already covered)."""
        got = self._clocks(window)
        if got is None:
            return []
        busy, cm = got
        ref, from_spec = self._reference(window, cm, window.elsewhere.get(BUSY_CLOCK))
        with np.errstate(invalid="ignore", divide="ignore"):
            rel = cm / ref[:, None]  # 0.9: 10 % below the reference
        slow = np.nan_to_num(rel, nan=1.0) < 1.0 - self.deficit
        skip = np.zeros(len(window.nodes), dtype=bool)
        skip[[i for i in judged if 0 <= i < len(skip)]] = True
        out: list[Finding] = []
        streaks: dict[tuple[str, str], tuple[int, float]] = {}
        blind = capsight.blind(window)
        for n in np.flatnonzero(slow.any(axis=1) & ~skip):
            out += self._node(window, int(n), slow[n], busy[n], rel[n], bool(from_spec[n]),
                              bool(blind[n]), streaks, detector)  # fmt: skip
        self._streaks = streaks
        return out

    def pools(self, window: Window) -> dict[str, Pool]:
        """The busy GPUs' mean clocks by configuration (a replica's part: the others'
        reference is the configuration's whole median)."""
        got = self._clocks(window)
        if got is None:
            return {}
        groups = split_by_model(window, np.arange(len(window.nodes)), config=True)
        return {BUSY_CLOCK: pool_of(got[1], groups)}

    def _clocks(self, window: Window) -> tuple[np.ndarray, np.ndarray] | None:
        """``(busy, mean clock)``, each (N, G), over the last ``n`` samples: busy with no
        reason that explains a low clock, and the clock's mean while so (NaN where never)."""
        util, clock = window.get(catalog.GPU_UTILIZATION), window.get(catalog.GPU_SM_CLOCK)
        if util is None or clock is None or util.ndim != 3 or clock.shape != util.shape:
            return None
        busy = _busy(util[-self.n :]) & ~self._explained(window)
        return busy, workload.mean_clock(clock[-self.n :], busy)

    def remember(self, nodes: Set[str]) -> list[list[Any]]:
        return [[n, subj, c, s] for (n, subj), (c, s) in entries(self._streaks, nodes, first)]

    def adopted(self, doc: Any, nodes: Set[str]) -> dict[tuple[str, str], tuple[int, float]]:
        """The streaks with those of ``nodes`` replaced by ``doc``'s (read whole first)."""
        got = [((str(n), str(subj)), (int(c), float(s))) for n, subj, c, s in doc]
        return replaced(self._streaks, nodes, first, got)

    def _explained(self, window: Window) -> np.ndarray:
        """(N, G): a clock-event reason other than idle was active in the look-back."""
        a = window.get(catalog.GPU_THROTTLE)
        if a is None or a.ndim != 4 or a.shape[-1] != len(THROTTLE_REASONS):
            # unknown: no excuse here; such nodes only notify (capsight.downgrade)
            return np.zeros((len(window.nodes), window.gpus), dtype=bool)
        idx = [i for i, r in enumerate(THROTTLE_REASONS) if r not in NOT_A_REASON]
        with np.errstate(invalid="ignore"):  # NaN (no sample) is no reason: False
            hot = a[-self.n :] >= 0.5
        return np.asarray(hot[..., idx].any(axis=(0, 3)))

    def _reference(self, window: Window, cm: np.ndarray, elsewhere: Pool | None = None
                   ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Per node, its configuration's median busy clock (``elsewhere``: the other
        replicas' busy clocks count too), else the model's maximum clock (and whether it
        came from the specification)."""
        n = len(window.nodes)
        ref, from_spec = np.full(n, np.nan), np.zeros(n, dtype=bool)
        keys = models(window)
        groups = split_by_model(window, np.arange(n), config=True)
        med = medians(pool_of(cm, groups), elsewhere, self.min_nodes)
        for config, idx in groups:
            if config in med:
                ref[idx] = med[config]
                continue
            spec = catalog_specs.spec(keys[int(idx[0])]) if keys[int(idx[0])] else None
            if spec is not None:
                ref[idx], from_spec[idx] = spec.sm_clock_max_hz, True
        return ref, from_spec

    def _node(self, w: Window, n: int, slow: np.ndarray, busy: np.ndarray, rel: np.ndarray,
              from_spec: bool, blind: bool, streaks: dict[tuple[str, str], tuple[int, float]],
              detector: str) -> list[Finding]:  # fmt: skip
        gpus = np.flatnonzero(slow)
        whole = len(gpus) >= max(busy.sum() // 2, 1) and len(gpus) >= w.gpus // 2
        subjects = [("node", gpus)] if whole else [(f"gpu={g}", np.array([g])) for g in gpus]
        node, config = w.nodes[n], configurations(w)[n] or "its model"
        reasons = "clock-event reasons unknown" if blind else "no clock-event reason"
        out = []
        for subject, gs in subjects:
            count, since = self._streaks.get((node, subject), (0, w.now))
            streaks[(node, subject)] = (count + 1, since)
            below = float(1.0 - np.nanmean(rel[gs]))
            persistent = count + 1 >= self.streak
            action = "drain" if persistent and not from_spec else "notify"
            peers = (
                "the model's specified clock" if from_spec else f"the median of its {config} peers"
            )
            out.append(Finding(
                node, subject, "straggler", "warning", action, detector,
                float(min(1.0, 0.5 + 2 * below)), since,
                {"clock_below": below, "gpus": float(len(gs)), "clock_deficit": 1.0,
                 "job_peers": 0.0, "from_spec": float(from_spec)},
                f"fail-slow under load: SM clock {100 * below:.0f} % below {peers}, "
                f"{reasons} (judged without job peers)"))  # fmt: skip
        return out


def _busy(u: np.ndarray) -> np.ndarray:
    """(N, G): under load: no known idle sample, a mean utilisation of at least ``LOAD``, and
    at least half of the samples known (a scrape gap is not idleness)."""
    known = ~np.isnan(u)
    with np.errstate(invalid="ignore"):
        idle = known & (u <= BUSY)
        loaded = np.where(known, u, 0.0).sum(axis=0) >= LOAD * np.maximum(known.sum(axis=0), 1)
    return np.asarray(~idle.any(axis=0) & loaded & (known.mean(axis=0) >= 0.5))
