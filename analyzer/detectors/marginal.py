"""Marginal hardware: a node whose error rate sits in the worst 1 % of its peers (same GPU
model and configuration), above an absolute floor, in two consecutive windows (the two
halves of the analysis window), gets an ``avoid`` finding: not broken enough to drain, but
the next large job should not land there (remediation de-prefers it for a while).

A fleet-wide shift (most of a peer group above the floor at once, e.g. after a firmware or
driver update) flags nobody: it is one ``fleet_shift`` finding for the group instead, since
the peers are no longer a baseline. Groups smaller than ``min_group`` are not judged (a
percentile of a handful of nodes is noise). Pure; reads the NVLink error counters and the IB
symbol-error counter.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from analyzer.detectors.groups import split_by_model
from analyzer.detectors.series import window_rate
from analyzer.findings import CLUSTER, Finding
from analyzer.window import Window
from exporter import catalog


@dataclass(frozen=True)
class Signal:
    name: str
    floor: float  # errors per second: below it nothing is marginal, whatever the peers do
    read: Callable[[Window], np.ndarray | None]  # raw counter, (T, nodes, ...)
    promql: str  # reproduces the per-node value


def _nvlink(w: Window) -> np.ndarray | None:
    a = w.get(catalog.NVLINK_ERRORS)
    return a if a is not None and a.ndim == 5 else None


def _ib_symbol(w: Window) -> np.ndarray | None:
    a = w.ib_counters.get("symbol_error")
    return a if a is not None and a.ndim == 3 and a.shape[0] == len(w.t) else None


SIGNALS = (
    Signal("nvlink_errors", 0.01, _nvlink,
           f"sum by (node) (rate({catalog.NVLINK_ERRORS.name}[10m]))"),
    Signal("ib_symbol_errors", 0.01, _ib_symbol,
           f'sum by (node) (rate({catalog.IB_COUNTER.name}{{counter="symbol_error"}}[10m]))'),
)  # fmt: skip


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

    def detect(self, window: Window) -> list[Finding]:
        n = len(window.t)
        if window.empty or n < 4:
            return []
        halves = (slice(0, n // 2), slice(n // 2, n))
        groups = split_by_model(window, np.arange(len(window.nodes)), config=True)
        out: list[Finding] = []
        for sig in SIGNALS:
            counter = sig.read(window)
            if counter is None:
                continue
            rates = [self._per_node(counter, window.t, h) for h in halves]
            floor = self.floors.get(sig.name, sig.floor)
            for config, idx in groups:
                if len(idx) >= self.min_group:
                    out += self._judge(window, sig, floor, config, idx, rates, halves[1])
        return out

    @staticmethod
    def _per_node(counter: np.ndarray, t: np.ndarray, sl: slice) -> np.ndarray:
        r = window_rate(counter, t, sl)
        return np.nansum(r.reshape(r.shape[0], -1), axis=1)

    def _judge(self, w: Window, sig: Signal, floor: float, config: str, idx: np.ndarray,
               rates: list[np.ndarray], last: slice) -> list[Finding]:  # fmt: skip
        shifted, flagged = [], []
        for r in rates:
            v = r[idx]
            med, q = float(np.median(v)), float(np.quantile(v, self.quantile))
            shifted.append(float(np.mean(v > floor)) >= self.fleet_fraction)
            flagged.append((v >= q) & (v > floor) & (v > self.ratio * med))
        since = float(w.t[last][0])
        v = rates[1][idx]
        if all(shifted):
            return [Finding(CLUSTER, f"group={config or 'unknown'}", "fleet_shift", "warning",
                            "notify", self.name, 1.0, since,
                            {"median": float(np.median(v)), "group_size": float(len(idx)),
                             "fraction_above_floor": float(np.mean(v > floor)), "floor": floor},
                            f"{sig.name} is up across the whole peer group {config or '-'} "
                            "(a fleet-wide shift: nobody is de-preferred)")]  # fmt: skip
        out = []
        for j in np.flatnonzero(flagged[0] & flagged[1]):
            pct = 100.0 * float(np.mean(v < v[j]))
            node = w.nodes[int(idx[j])]
            out.append(Finding(
                node, f"signal={sig.name}", "marginal", "info", "avoid", self.name,
                min(1.0, pct / 100.0), since,
                {"value": float(v[j]), "peer_percentile": pct, "group_size": float(len(idx)),
                 "median": float(np.median(v)), "floor": floor},
                f"{sig.name} {v[j]:.3g}/s, worst {100 - pct:.1f}% of {len(idx)} peers "
                f"({config or 'unknown model'}); query: {sig.promql}",
            ))  # fmt: skip
        return out
