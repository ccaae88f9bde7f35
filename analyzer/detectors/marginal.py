"""Marginal hardware: a node whose signal sits in the worst 1 % of its peers (same GPU model
and configuration), above an absolute floor, in two consecutive windows, gets an ``avoid``
finding: not broken enough to drain, but the next large job should not land there
(remediation de-prefers it for a while). The signals (:mod:`.marginal_signals`): NVLink
error rate, IB symbol-error rate, a GPU a few percent slow under load, a PCIe link below its
maximum now and then, a handful of correctable row remaps.

Two consecutive windows: the detector remembers each cycle's verdicts (the engine keeps one
detector for the service's life) and a node is marginal when this cycle's window and the
window just before it, the one that ended where this one starts, both put it in the worst
1 %. Where no such window is remembered (the first window after a start, or a caller that
judges windows far apart) the two halves of this window stand in for the two windows. The
choice depends on the windows' times only, never on when the scrapes fell.

A fleet-wide shift (most of a peer group above the floor at once, e.g. after a firmware or
driver update) flags nobody in that group: in both windows it is one ``fleet_shift``
finding for the group instead, since the peers are no longer a baseline. Groups with fewer
than ``min_group`` judged nodes are not judged (a percentile of a handful of nodes is
noise). Where another detector recommends taking the node out, the engine drops the avoid
(:func:`analyzer.engine.fold_avoid`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np

from analyzer.detectors.groups import split_by_model
from analyzer.detectors.marginal_signals import SIGNALS, Reading, Signal
from analyzer.findings import CLUSTER, Finding
from analyzer.window import Window

Group = tuple[str, np.ndarray]  # (configuration, node indices)


@dataclass(frozen=True)
class Verdicts:
    """One window's judgement: (signal, node) in the worst 1 %, (signal, group) shifted."""

    end: float
    flagged: frozenset[tuple[str, str]]
    shifted: frozenset[tuple[str, str]]


def promql_for(signal: str) -> str:
    return next((s.promql for s in SIGNALS if s.name == signal), "")


class MarginalDetector:
    name = "marginal"

    def __init__(
        self,
        quantile: float = 0.99,
        min_group: int = 20,
        ratio: float = 3.0,
        fleet_fraction: float = 0.5,
        floors: Mapping[str, float] | None = None,
    ) -> None:
        self.quantile, self.min_group, self.ratio = quantile, min_group, ratio
        self.fleet_fraction = fleet_fraction
        self.floors = dict(floors or {})
        self._seen: list[Verdicts] = []  # earlier cycles' whole-window verdicts, oldest first

    def detect(self, window: Window) -> list[Finding]:
        n = len(window.t)
        if window.empty or n < 4:
            return []
        groups = [g for g in split_by_model(window, np.arange(len(window.nodes)), config=True)
                  if len(g[1]) >= self.min_group]  # fmt: skip
        whole, readings = self._judge(window, groups)
        prev = self._previous(window)
        cur, since = whole, float(window.t[0])
        if prev is None:  # nothing remembered just before: the halves are the two windows
            first, second = halves(window)
            prev, _ = self._judge(first, groups)
            cur, readings = self._judge(second, groups)
            since = float(second.t[0])
        self._remember(window, whole)
        out: list[Finding] = []
        for sig in SIGNALS:
            if sig.name in readings:
                for config, idx in groups:
                    out += self._findings(window, sig, readings[sig.name], config, idx,
                                          cur, prev, since)  # fmt: skip
        return out

    def floor(self, sig: Signal) -> float:
        return self.floors.get(sig.name, sig.floor)

    def _judge(self, w: Window, groups: list[Group]) -> tuple[Verdicts, dict[str, Reading]]:
        flagged: set[tuple[str, str]] = set()
        shifted: set[tuple[str, str]] = set()
        readings = {}
        for sig in SIGNALS:
            r = sig.read(w)
            if r is None:
                continue
            readings[sig.name] = r
            for config, idx in groups:
                have = idx[np.isfinite(r.score[idx])]
                if len(have) < self.min_group:
                    continue
                v, floor = r.score[have], self.floor(sig)
                if float(np.mean(v > floor)) >= self.fleet_fraction:
                    shifted.add((sig.name, config))
                    continue
                med, q = float(np.median(v)), float(np.quantile(v, self.quantile))
                worst = (v >= q) & (v > floor) & (v > self.ratio * med)
                flagged |= {(sig.name, w.nodes[int(i)]) for i in have[worst]}
        return Verdicts(w.now, frozenset(flagged), frozenset(shifted)), readings

    def _previous(self, w: Window) -> Verdicts | None:
        """The remembered verdicts of the window that ended where this one starts (within
        half a step after, half a window before), the latest such; None when there is none."""
        t0, span = float(w.t[0]), w.now - float(w.t[0])
        fit = [v for v in self._seen if t0 - span / 2 <= v.end <= t0 + w.step / 2]
        return fit[-1] if fit else None

    def _remember(self, w: Window, v: Verdicts) -> None:
        if self._seen and w.now <= self._seen[-1].end:  # the same window again, or a rewind
            self._seen = [s for s in self._seen if s.end < w.now]
        span = w.now - float(w.t[0])
        self._seen = [s for s in self._seen if s.end >= w.now - 2 * span] + [v]

    def _findings(self, w: Window, sig: Signal, r: Reading, config: str, idx: np.ndarray,
                  cur: Verdicts, prev: Verdicts, since: float) -> list[Finding]:  # fmt: skip
        have = idx[np.isfinite(r.score[idx])]
        v, floor, key = r.score[have], self.floor(sig), (sig.name, config)
        if key in cur.shifted:
            if key not in prev.shifted or not len(v):
                return []
            return [Finding(CLUSTER, f"group={config or 'unknown'}", "fleet_shift", "warning",
                            "notify", self.name, 1.0, since,
                            {"median": float(np.median(v)), "group_size": float(len(have)),
                             "fraction_above_floor": float(np.mean(v > floor)), "floor": floor},
                            f"{sig.name} is up across the whole peer group {config or '-'} "
                            "(a fleet-wide shift: nobody is de-preferred)")]  # fmt: skip
        out = []
        for j, i in enumerate(have):
            node = w.nodes[int(i)]
            if (sig.name, node) not in cur.flagged or (sig.name, node) not in prev.flagged:
                continue
            pct = 100.0 * float(np.mean(v < v[j]))
            gpu = int(r.gpu[i])
            out.append(Finding(
                node, f"signal={sig.name}", "marginal", "info", "avoid", self.name,
                min(1.0, pct / 100.0), since,
                {"value": float(r.value[i]), "score": float(v[j]), "peer_percentile": pct,
                 "group_size": float(len(have)), "median": float(np.median(v)), "floor": floor,
                 **({"gpu": float(gpu)} if gpu >= 0 else {})},
                f"{sig.name} {v[j]:.3g}{sig.unit}{f' on gpu {gpu}' if gpu >= 0 else ''}, worst "
                f"{100 - pct:.1f}% of {len(have)} peers ({config or 'unknown model'}); "
                f"query: {sig.promql}",
            ))  # fmt: skip
        return out


def halves(w: Window) -> tuple[Window, Window]:
    """The window's first and second half by time (the second starts at the sample the first
    ends on, so a counter's increase across the middle counts in the second)."""
    k = int(np.searchsorted(w.t, float(w.t[0]) + (w.now - float(w.t[0])) / 2))
    k = min(max(k, 2), len(w.t) - 2)
    return _slice(w, slice(0, k)), _slice(w, slice(k - 1, None))


def _slice(w: Window, sl: slice) -> Window:
    return replace(w, t=w.t[sl], metrics={k: a[sl] for k, a in w.metrics.items()},
                   ib_counters={k: a[sl] for k, a in w.ib_counters.items()}, xids=())  # fmt: skip
