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

Analyzer replicas (:mod:`analyzer.replicas`) each hold a part of a peer group. Each publishes
its part's :class:`Scores` (:meth:`MarginalDetector.scores`: per window, signal and group the
finite scores and the group's size), and judges its own nodes against its scores joined with
the others' (:attr:`MarginalDetector.others`): the percentile, median and share above the
floor are of the same values as one analyzer's, so the verdicts are the same. The group-wide
``fleet_shift`` is reported by one replica only (:attr:`MarginalDetector.fleet`).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Set
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar

import numpy as np

from analyzer.detectors.failslow import FailSlow
from analyzer.detectors.groups import models, split_by_model
from analyzer.detectors.marginal_signals import (
    SIGNALS,
    Reading,
    Signal,
    busy_clocks,
    sm_clock_deficit,
)
from analyzer.findings import CLUSTER, Finding
from analyzer.pools import Pool, joined
from analyzer.window import Window
from exporter import catalog_specs

Group = tuple[str, np.ndarray]  # (configuration, node indices)


VARIANTS = ("whole", "first", "second")  # the window, its first half, its second half
CLOCK = "sm_clock_deficit"  # scored against the group's median busy clock


@dataclass(frozen=True)
class Scores:
    """What peers judge by, of a set of nodes: per (window variant, signal, group) the finite
    scores, per group the node count; for the clock signal, whose score is relative to the
    group's median busy clock, the inputs of that median instead (per (variant, group) the
    finite busy clocks and how many nodes have one) and each such node's slowest busy clock.
    ``names``: the node of each score (of each slowest clock under the key ``(variant,
    CLOCK, group)``), so every replica remembers the whole fleet's verdicts and a node handed
    over keeps its history. ``pools``: per pooled quantity, what the nodes add to the other
    detectors' like-with-like medians (:mod:`analyzer.pools`: a power limit against its
    model's, a busy clock against its configuration's), exchanged with the scores. Mergeable:
    the scores of disjoint node sets, joined, are the scores of their union."""

    values: Mapping[tuple[str, str, str], np.ndarray] = field(default_factory=dict)
    sizes: Mapping[str, int] = field(default_factory=dict)
    clocks: Mapping[tuple[str, str], np.ndarray] = field(default_factory=dict)
    clock_nodes: Mapping[tuple[str, str], int] = field(default_factory=dict)
    slowest: Mapping[tuple[str, str], np.ndarray] = field(default_factory=dict)
    names: Mapping[tuple[str, str, str], tuple[str, ...]] = field(default_factory=dict)
    pools: Mapping[str, Pool] = field(default_factory=dict)

    def join(self, other: Scores) -> Scores:
        return Scores(_cat(self.values, other.values), _add(self.sizes, other.sizes),
                      _cat(self.clocks, other.clocks), _add(self.clock_nodes, other.clock_nodes),
                      _cat(self.slowest, other.slowest),
                      {k: (*self.names.get(k, ()), *other.names.get(k, ()))
                       for k in {*self.names, *other.names}},
                      joined([self.pools, other.pools]))  # fmt: skip


K = TypeVar("K")


def _cat(a: Mapping[K, np.ndarray], b: Mapping[K, np.ndarray]) -> dict[K, np.ndarray]:
    empty = np.zeros(0)
    return {k: np.concatenate([a.get(k, empty), b.get(k, empty)]) for k in {*a, *b}}


def _add(a: Mapping[K, int], b: Mapping[K, int]) -> dict[K, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


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
        # a replica's: the other replicas' scores for the window judged next (None: this
        # process sees the whole fleet), and whether it reports group-wide findings
        self.others: Scores | None = None
        self.fleet = True
        self._refs: dict[tuple[str, str], float] = {}  # the fleet's median busy clocks

    def scores(self, window: Window) -> Scores:
        """This window's scores, for the other replicas to judge their nodes against."""
        if window.empty or len(window.t) < 4:
            return Scores()
        groups = split_by_model(window, np.arange(len(window.nodes)), config=True)
        values: dict[tuple[str, str, str], np.ndarray] = {}
        clocks: dict[tuple[str, str], np.ndarray] = {}
        counts: dict[tuple[str, str], int] = {}
        slowest: dict[tuple[str, str], np.ndarray] = {}
        names: dict[tuple[str, str, str], tuple[str, ...]] = {}
        for variant, w in zip(VARIANTS, (window, *halves(window)), strict=True):
            for sig in SIGNALS:
                if sig.name == CLOCK:
                    continue
                r = sig.read(w)
                if r is None:
                    continue
                for config, idx in groups:
                    v = r.score[idx]
                    ok = np.isfinite(v)
                    values[(variant, sig.name, config)] = v[ok]
                    names[(variant, sig.name, config)] = tuple(window.nodes[i] for i in idx[ok])
            cm = busy_clocks(w)
            if cm is None:
                continue
            for config, idx in groups:
                busy = idx[np.isfinite(cm[idx]).any(axis=1)]
                have = cm[busy]
                names[(variant, CLOCK, config)] = tuple(window.nodes[i] for i in busy)
                clocks[(variant, config)] = have[np.isfinite(have)]
                counts[(variant, config)] = len(have)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)
                    slowest[(variant, config)] = np.nanmin(have, axis=1)
        sizes = {config: len(idx) for config, idx in groups}
        return Scores(values, sizes, clocks, counts, slowest, names)

    def detect(self, window: Window) -> list[Finding]:
        n = len(window.t)
        if n < 4 or (window.empty and self.others is None):
            return []  # (a replica owning no node still judges, to remember the fleet's)
        others = self.others or Scores()
        self._refs = {}
        local = split_by_model(window, np.arange(len(window.nodes)), config=True)
        seen = {config for config, _ in local}  # groups of other replicas' nodes only: their
        local += [(g, np.zeros(0, int)) for g in sorted(others.sizes) if g not in seen]  # shift
        groups = [g for g in local if len(g[1]) + others.sizes.get(g[0], 0) >= self.min_group]
        whole, readings = self._judge(window, groups, "whole")
        prev = self._previous(window)
        cur, since = whole, float(window.t[0])
        variant = "whole"
        if prev is None:  # nothing remembered just before: the halves are the two windows
            first, second = halves(window)
            prev, _ = self._judge(first, groups, "first")
            cur, readings = self._judge(second, groups, "second")
            since, variant = float(second.t[0]), "second"
        self._remember(window, whole)
        out: list[Finding] = []
        for sig in SIGNALS:
            if sig.name in readings:
                for config, idx in groups:
                    peers, _ = self._peers(variant, sig.name, config)
                    out += self._findings(window, sig, readings[sig.name], config, idx,
                                          cur, prev, since, peers)  # fmt: skip
        return out

    def floor(self, sig: Signal) -> float:
        return self.floors.get(sig.name, sig.floor)

    def _peers(self, variant: str, signal: str, config: str
               ) -> tuple[np.ndarray, tuple[str, ...]]:  # fmt: skip
        """The other replicas' finite scores of this group and their nodes (none in one
        process); of the clock signal, their slowest clocks against the fleet's median."""
        if self.others is None:
            return np.zeros(0), ()
        key = (variant, signal, config)
        names = self.others.names.get(key, ())
        if signal != CLOCK:
            return np.asarray(self.others.values.get(key, np.zeros(0))), names
        ref = self._refs.get((variant, config))
        if ref is None:  # no node of this group here: the others' median alone
            pooled = self.others.clocks.get((variant, config), np.zeros(0))
            enough = self.others.clock_nodes.get((variant, config), 0) >= FailSlow().min_nodes
            ref = float(np.nanmedian(pooled)) if enough and len(pooled) else np.nan
        slow = self.others.slowest.get((variant, config), np.zeros(0))
        with np.errstate(invalid="ignore", divide="ignore"):
            deficit = 1.0 - slow / ref
        ok = np.isfinite(deficit)
        return deficit[ok], tuple(n for n, good in zip(names, ok, strict=True) if good)

    def _read(self, sig: Signal, w: Window, variant: str) -> Reading | None:
        if not w.nodes:  # a replica owning no node: the others' scores only
            return None
        if sig.name != CLOCK or self.others is None:
            return sig.read(w)
        return sm_clock_deficit(w, lambda w, cm: self._reference(w, cm, variant))

    def _reference(self, w: Window, cm: np.ndarray, variant: str
                   ) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """:meth:`FailSlow._reference` over the fleet: per node its configuration's median
        busy clock among this part's GPUs and the other replicas' (else the specification's
        maximum clock)."""
        assert self.others is not None
        n, fs = len(w.nodes), FailSlow(n=len(w.t))
        ref, from_spec = np.full(n, np.nan), np.zeros(n, dtype=bool)
        keys = models(w)
        for config, idx in split_by_model(w, np.arange(n), config=True):
            have = cm[idx[np.isfinite(cm[idx]).any(axis=1)]]
            key = (variant, config)
            if len(have) + self.others.clock_nodes.get(key, 0) >= fs.min_nodes:
                pooled = np.concatenate([have[np.isfinite(have)],
                                         self.others.clocks.get(key, np.zeros(0))])  # fmt: skip
                ref[idx] = self._refs[key] = float(np.nanmedian(pooled))
                continue
            self._refs[key] = np.nan
            spec = catalog_specs.spec(keys[int(idx[0])]) if keys[int(idx[0])] else None
            if spec is not None:
                ref[idx], from_spec[idx] = spec.sm_clock_max_hz, True
        return ref, from_spec

    def _judge(self, w: Window, groups: list[Group],
               variant: str) -> tuple[Verdicts, dict[str, Reading]]:  # fmt: skip
        flagged: set[tuple[str, str]] = set()
        shifted: set[tuple[str, str]] = set()
        readings = {}
        for sig in SIGNALS:
            r = self._read(sig, w, variant)
            if r is not None:
                readings[sig.name] = r
            elif self.others is None:
                continue
            for config, idx in groups:
                have = idx[np.isfinite(r.score[idx])] if r is not None else np.zeros(0, int)
                mine = r.score[have] if r is not None else np.zeros(0)
                theirs, who = self._peers(variant, sig.name, config)
                v = np.concatenate([mine, theirs])
                if len(v) < self.min_group:
                    continue
                floor = self.floor(sig)
                if float(np.mean(v > floor)) >= self.fleet_fraction:
                    shifted.add((sig.name, config))
                    continue
                med, q = float(np.median(v)), float(np.quantile(v, self.quantile))
                worst = (v >= q) & (v > floor) & (v > self.ratio * med)
                flagged |= {(sig.name, w.nodes[int(i)]) for i in have[worst[: len(have)]]}
                # the others' too: remembered, they judge a node handed over to this replica
                flagged |= {(sig.name, who[j]) for j in np.flatnonzero(worst[len(have) :])}
        return Verdicts(w.now, frozenset(flagged), frozenset(shifted)), readings

    def _previous(self, w: Window) -> Verdicts | None:
        """The remembered verdicts of the window that ended where this one starts (within
        half a step after, half a window before), the latest such; None when there is none."""
        t0, span = float(w.t[0]), w.now - float(w.t[0])
        fit = [v for v in self._seen if t0 - span / 2 <= v.end <= t0 + w.step / 2]
        return fit[-1] if fit else None

    def remember(self, nodes: Set[str]) -> dict[str, Any]:
        """The earlier windows' verdicts: the worst 1 % among ``nodes``, and the peer groups
        that shifted (the same on every replica: judged against the others' scores)."""
        return {"seen": [[v.end, sorted([s, n] for s, n in v.flagged if n in nodes),
                          sorted([s, g] for s, g in v.shifted)] for v in self._seen]}  # fmt: skip

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> None:
        got = {float(end): ({(str(s), str(n)) for s, n in flagged if str(n) in nodes},
                            frozenset((str(s), str(g)) for s, g in shifted))
               for end, flagged, shifted in doc.get("seen", [])}  # fmt: skip
        mine = {v.end: v for v in self._seen}
        seen = []
        for end in sorted(mine.keys() | got.keys()):
            flagged, shifted = got.get(end, (set(), frozenset()))
            own = mine.get(end)  # a window this engine judged too keeps its own group verdicts
            kept = {x for x in own.flagged if x[1] not in nodes} if own else set()
            seen.append(Verdicts(end, frozenset(kept | flagged), own.shifted if own else shifted))
        self._seen = seen

    def _remember(self, w: Window, v: Verdicts) -> None:
        if self._seen and w.now <= self._seen[-1].end:  # the same window again, or a rewind
            self._seen = [s for s in self._seen if s.end < w.now]
        span = w.now - float(w.t[0])
        self._seen = [s for s in self._seen if s.end >= w.now - 2 * span] + [v]

    def _findings(self, w: Window, sig: Signal, r: Reading, config: str, idx: np.ndarray,
                  cur: Verdicts, prev: Verdicts, since: float,
                  peers: np.ndarray) -> list[Finding]:  # fmt: skip
        have = idx[np.isfinite(r.score[idx])]
        mine, floor, key = r.score[have], self.floor(sig), (sig.name, config)
        v = np.concatenate([mine, peers])  # the whole group's scores (this part's first)
        if key in cur.shifted:
            if key not in prev.shifted or not len(v) or not self.fleet:
                return []
            return [Finding(CLUSTER, f"group={config or 'unknown'}", "fleet_shift", "warning",
                            "notify", self.name, 1.0, since,
                            {"median": float(np.median(v)), "group_size": float(len(v)),
                             "fraction_above_floor": float(np.mean(v > floor)), "floor": floor},
                            f"{sig.name} is up across the whole peer group {config or '-'} "
                            "(a fleet-wide shift: nobody is de-preferred)")]  # fmt: skip
        out = []
        for j, i in enumerate(have):
            node = w.nodes[int(i)]
            if (sig.name, node) not in cur.flagged or (sig.name, node) not in prev.flagged:
                continue
            pct = 100.0 * float(np.mean(v < mine[j]))
            gpu = int(r.gpu[i])
            out.append(Finding(
                node, f"signal={sig.name}", "marginal", "info", "avoid", self.name,
                min(1.0, pct / 100.0), since,
                {"value": float(r.value[i]), "score": float(mine[j]), "peer_percentile": pct,
                 "group_size": float(len(v)), "median": float(np.median(v)), "floor": floor,
                 **({"gpu": float(gpu)} if gpu >= 0 else {})},
                f"{sig.name} {mine[j]:.3g}{sig.unit}{f' on gpu {gpu}' if gpu >= 0 else ''}, worst "
                f"{100 - pct:.1f}% of {len(v)} peers ({config or 'unknown model'}); "
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
