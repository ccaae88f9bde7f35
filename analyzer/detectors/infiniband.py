"""InfiniBand: port down, flapping, error-rate trends, rate below inventory, and the leaf
switch whose nodes all degrade at once (reported as the switch, not as N node faults).

Reads ``infiniband_port_state`` / ``_rate_bytes_per_second`` (T, node, port) and the sysfs
counters in ``Window.ib_counters``. Thresholds are REFERENCE.md §3 (PAM4 links always show
some symbol errors, so "any error" alerting is wrong). Keeps flap history across cycles.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Set
from typing import Any

import numpy as np

from analyzer.detectors.emit import ev
from analyzer.detectors.groups import like_reference, model_pool
from analyzer.detectors.recall import entries, first, ident, replaced
from analyzer.detectors.series import first_true_time, increases, last_valid, window_rate
from analyzer.findings import Finding
from analyzer.pools import IB_RATE, Pool
from analyzer.window import Window
from exporter import catalog, catalog_specs

ACTIVE = 4
# counter -> errors per second above which a port is degraded
RATE_LIMITS = {
    "symbol_error": 10.0,
    "link_error_recovery": 5.0 / 60.0,
    "port_rcv_errors": 10.0,
    "port_xmit_discards": 100.0,
    "local_ack_timeout_err": 1.0,
}
# any increase is fatal for running jobs
ANY_INCREASE = (
    "link_downed",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "rnr_nak_retry_err",
)
IB_KINDS = frozenset({"ib_errors", "ib_flapping", "ib_port_down", "ib_rate_low"})


class InfinibandDetector:
    name = "infiniband"

    def __init__(
        self,
        expected_rate: float | None = None,
        span: float = 120.0,
        flap_cycles: int = 3,
        flap_window: float = 12 * 3600.0,
        switch_fraction: float = 0.75,
        switch_min_nodes: int = 3,
        trend_floor: float = 0.5,
        trend_ratio: float = 3.0,
    ):
        self.trend_floor, self.trend_ratio = trend_floor, trend_ratio
        self._trending: set[tuple[str, int]] = set()
        self.expected_rate = expected_rate
        self.span = span
        self.flap_cycles, self.flap_window = flap_cycles, flap_window
        self.switch_fraction, self.switch_min_nodes = switch_fraction, switch_min_nodes
        # per node, the last sample judged for flaps (per node, as analyzer.detectors.events)
        self._seen_until: dict[str, float] = {}
        self._ups: dict[tuple[str, int], deque[float]] = defaultdict(deque)

    def remember(self, nodes: Set[str]) -> dict[str, Any]:
        """Per node, the last sample judged for flaps, each port's recent ups and whether its
        symbol errors were trending (:mod:`analyzer.detectors.recall`)."""
        return {
            "seen_until": dict(entries(self._seen_until, nodes, ident)),
            "ups": [[n, p, list(ups)] for (n, p), ups in entries(self._ups, nodes, first) if ups],
            "trending": sorted([n, p] for n, p in self._trending if n in nodes),
        }

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> None:
        seen = [(str(n), float(t)) for n, t in dict(doc.get("seen_until", {})).items()]
        ups = [((str(n), int(p)), deque(float(t) for t in ts)) for n, p, ts in doc.get("ups", [])]
        trending = [((str(n), int(p)), True) for n, p in doc.get("trending", [])]
        self._seen_until = replaced(self._seen_until, nodes, ident, seen)
        self._ups = defaultdict(deque, replaced(self._ups, nodes, first, ups))
        held = dict.fromkeys(self._trending, True)
        self._trending = set(replaced(held, nodes, first, trending))

    def detect(self, window: Window) -> list[Finding]:
        if window.empty or not window.ports:
            return []
        out: list[Finding] = []
        state = window.get(catalog.IB_PORT_STATE)
        if state is not None:
            out += self._down_and_flaps(window, state)
        out += self._errors(window)
        rate = window.get(catalog.IB_PORT_RATE)
        if rate is not None:
            out += self._rate(window, rate)
        return self._switches(window, out)

    def _port(
        self,
        w: Window,
        n: int,
        p: int,
        kind: str,
        sev: str,
        action: str,
        conf: float,
        since: float,
        evidence: dict[str, float],
        summary: str,
    ) -> Finding:
        return Finding(
            w.nodes[n],
            f"port={w.port_name(p)}",
            kind,
            sev,
            action,
            self.name,
            conf,
            since,
            evidence,
            summary,
        )

    def _down_and_flaps(self, w: Window, state: np.ndarray) -> list[Finding]:
        out = []
        last = last_valid(state)
        down = (last != ACTIVE) & ~np.isnan(last)
        since = first_true_time(np.nan_to_num(state, nan=ACTIVE) != ACTIVE, w.t)
        for n, p in zip(*np.nonzero(down), strict=False):
            out.append(
                self._port(
                    w,
                    n,
                    p,
                    "ib_port_down",
                    "critical",
                    "drain",
                    1.0,
                    float(since[n, p]),
                    {"state": float(last[n, p])},
                    "IB port down",
                )
            )
        filled = np.nan_to_num(state, nan=-1)
        came_up = (filled[1:] == ACTIVE) & (filled[:-1] != ACTIVE) & (filled[:-1] >= 0)
        seen = np.array([self._seen_until.get(name, -np.inf) for name in w.nodes])
        new = w.t[1:, None] > seen[None, :]
        for ti, n, p in zip(*np.nonzero(came_up & new[:, :, None]), strict=False):
            self._ups[(w.nodes[n], int(p))].append(float(w.t[1:][ti]))
        self._seen_until.update(dict.fromkeys(w.nodes, w.now))
        for (node, p), ups in self._ups.items():
            while ups and w.now - ups[0] > self.flap_window:
                ups.popleft()
            if len(ups) >= self.flap_cycles and node in w.nodes:
                n = w.nodes.index(node)
                out.append(
                    self._port(
                        w,
                        n,
                        p,
                        "ib_flapping",
                        "warning",
                        "cordon",
                        0.9,
                        ups[0],
                        {"cycles": float(len(ups))},
                        "IB port flapping",
                    )
                )
        return out

    def _errors(self, w: Window) -> list[Finding]:
        out = []
        recent = w.tail(self.span)
        hits: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
        for name, limit in RATE_LIMITS.items():
            c = w.ib_counters.get(name)
            if c is None or c.shape[0] != len(w.t):
                continue
            r = window_rate(c, w.t, recent)
            for n, p in zip(*np.nonzero(r > limit), strict=False):
                hits[(n, p)][name + "_per_s"] = float(r[n, p])
        for name in ANY_INCREASE:
            c = w.ib_counters.get(name)
            if c is None or c.shape[0] != len(w.t):
                continue
            inc = np.nansum(increases(c[recent.start - 1 if recent.start else 0 :]), axis=0)
            for n, p in zip(*np.nonzero(inc > 0), strict=False):
                hits[(n, p)][name] = float(inc[n, p])
        self._trends(w, hits)
        for (n, p), evidence in hits.items():
            out.append(
                self._port(
                    w,
                    n,
                    p,
                    "ib_errors",
                    "warning",
                    "cordon",
                    0.85,
                    w.now - self.span,
                    evidence,
                    "IB error rate above threshold",
                )
            )
        return out

    def _trends(self, w: Window, hits: dict[tuple[int, int], dict[str, float]]) -> None:
        """A symbol-error rate far above the noise floor and rising (or still high after it
        rose: hysteresis) is a trend long before it crosses the static threshold."""
        c = w.ib_counters.get("symbol_error")
        if c is None or c.shape[0] != len(w.t) or len(w.t) < 6:
            return
        late = window_rate(c, w.t, w.tail(60))
        recent = window_rate(c, w.t, w.tail(self.span))
        early = window_rate(c, w.t, slice(0, max(len(w.t) - 4, 1)))
        rising = (late > self.trend_floor) & (late > self.trend_ratio * early)
        held = np.zeros_like(rising)
        for node, p in self._trending:
            if node in w.nodes:
                held[w.nodes.index(node), p] = True
        active = rising | (held & (recent > self.trend_floor))
        self._trending = {(w.nodes[n], int(p)) for n, p in zip(*np.nonzero(active), strict=False)}
        for n, p in zip(*np.nonzero(active), strict=False):
            hits[(n, p)].setdefault("symbol_error_trend_per_s", float(late[n, p]))

    def _rate(self, w: Window, rate: np.ndarray) -> list[Finding]:
        last = last_valid(rate)
        if np.isnan(last).all():
            return []
        expected = self.expected_rates(w, last)
        with np.errstate(invalid="ignore"):
            low = last < expected[:, None] * 0.99
        out = []
        for n, p in zip(*np.nonzero(low), strict=False):
            out.append(
                self._port(
                    w,
                    n,
                    p,
                    "ib_rate_low",
                    "warning",
                    "cordon",
                    0.9,
                    w.now,
                    {"rate": float(last[n, p]), "expected": float(expected[n])},
                    "IB port rate below the node's inventory",
                )
            )
        return out

    def pools(self, window: Window) -> dict[str, Pool]:
        """The ports' last rates by model (a replica's part: the others' expected rate where
        the inventory names no fabric is the model's whole median)."""
        rate = window.get(catalog.IB_PORT_RATE) if window.ports and not window.empty else None
        if rate is None:
            return {}
        return {IB_RATE: model_pool(window, last_valid(rate))}

    def expected_rates(self, w: Window, last: np.ndarray) -> np.ndarray:
        """Per node, the rate its ports should run at: the inventory's fabric (``hca``),
        else the configured ``ib_expected_rate_bytes``, else the median of the nodes of the
        same GPU model, else that model's reference fabric; NaN (no judgement) otherwise.
        Never the fleet's median: an HDR rack beside NDR racks is not a failed switch."""
        ref = like_reference(w, last, lambda s: s.hca_rate, pooled=IB_RATE)
        if self.expected_rate:
            ref[:] = self.expected_rate
        for n, hca in enumerate(w.hca[: len(ref)]):
            if hca:
                ref[n] = catalog_specs.hca_rate(hca)
        return ref

    def _switches(self, w: Window, found: list[Finding]) -> list[Finding]:
        if w.port_leaf:
            return self._port_switches(w, found)
        if not w.leaf_of:
            return found
        members: dict[str, list[str]] = defaultdict(list)
        for n, leaf in w.leaf_of.items():
            if 0 <= n < len(w.nodes):
                members[leaf].append(w.nodes[n])
        bad_nodes = {f.node for f in found}
        out = list(found)
        for leaf, nodes in members.items():
            bad = [x for x in nodes if x in bad_nodes]
            if len(nodes) >= self.switch_min_nodes and len(bad) >= self.switch_fraction * len(
                nodes
            ):
                gone = set(bad)
                since = min(f.since for f in found if f.node in gone)
                out = [f for f in out if f.node not in gone]
                out.append(
                    Finding(
                        leaf,
                        f"switch={leaf}",
                        "switch_degraded",
                        "critical",
                        "notify",
                        self.name,
                        len(bad) / len(nodes),
                        since,
                        ev(nodes=len(nodes), degraded=len(bad)),
                        "every node on this leaf switch degraded at once",
                    )
                )
        return out

    def _port_switches(self, w: Window, found: list[Finding]) -> list[Finding]:
        """Leaf per port (rail-optimized): a leaf is degraded when most of the ports cabled
        to it (>= ``switch_fraction``, from >= ``switch_min_nodes`` nodes) have a finding at
        once; those port findings become the one switch finding. A port fault on a leaf
        whose other ports are fine stays the port's own finding."""
        ports_of: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for (n, p), leaf in w.port_leaf.items():
            if 0 <= n < len(w.nodes):
                ports_of[leaf].add((w.nodes[n], f"port={w.port_name(p)}"))
        hit = {(f.node, f.subject) for f in found if f.subject.startswith("port=")}
        out = list(found)
        for leaf, ports in sorted(ports_of.items()):
            bad = ports & hit
            nodes = {n for n, _ in ports}
            if len(nodes) < self.switch_min_nodes or len(bad) < self.switch_fraction * len(ports):
                continue
            since = min(f.since for f in found if (f.node, f.subject) in bad)
            out = [f for f in out if (f.node, f.subject) not in bad]
            out.append(Finding(leaf, f"switch={leaf}", "switch_degraded", "critical", "notify",
                               self.name, len(bad) / len(ports), since,
                               ev(ports=len(ports), degraded=len(bad), nodes=len(nodes)),
                               "every port on this leaf switch degraded at once"))  # fmt: skip
        return out
