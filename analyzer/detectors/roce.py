"""RoCE: PFC storms, congestion hot spots, and loss on one port told from a congested leaf.

Reads the per-port counters in ``Window.ib_counters``: the PFC pause time each port SENT per
priority (``tx_prio<N>_pause_seconds``, exporter.collectors.roce_pfc; its rate is the share of
time the port held its peer paused), mlx5's storm-prevention events, and the hw_counters/ files
of ``catalog.ROCE_CONGESTION_COUNTERS`` (ECN marks seen, CNPs sent and handled: DCQCN at work)
and ``catalog.ROCE_RETRANSMIT_COUNTERS`` (out of sequence, sequence errors, adaptive
retransmissions: packets lost; ACK timeouts are the infiniband detector's).

Congestion is normal in a lossless fabric during collectives, so nothing is judged against a
fixed rate: each port against the median of its peers, the other ports of its leaf switch
(``Window.port_leaf`` on rail-optimized fabrics, else the node's ``leaf_of``; without topology:
the same port index of every node, its rail), and each leaf against the other leaves:

- ``roce_pfc_storm`` (critical, drain): a port holding its peer paused for at least
  ``storm_share`` of the last ``span`` seconds on some priority (or whose NIC reported a storm
  prevention error): the host's receive path is stuck and the pauses spread through the fabric;
- ``roce_retransmits`` (warning, cordon): a port whose loss counters rise far above its peers'
  (``ratio`` x their median, above a floor): a bad NIC, transceiver or cable;
- ``roce_congestion`` (warning, notify): a port whose ECN/CNP rate is far above its peers' with
  no loss: a hot spot (a slow receiver, a polarized path), worth a look, not a drain;
- ``roce_fabric_congestion`` (warning, notify, one finding per leaf): most of a leaf's ports
  (>= ``leaf_fraction``, from >= ``leaf_min_nodes`` nodes) above the other leaves' ports at once,
  or the leaf's median rate ``ratio`` x the other leaves': the switch or its uplinks, not N
  machines; the leaf's port findings of congestion and loss fold into it.

A replica of the sharded analyzer holds whole leaves, not whole rails nor the fabric's other
leaves: it leaves its part's port rates (:meth:`RoceDetector.pools`: per counter, per rail
and of all its leaves' ports, and how many leaves) with its marginal scores, and compares its
ports and leaves with its own joined with the others' (``Window.elsewhere``), as one analyzer
compares them with the whole fleet's.

A whole fabric congested at once (an all-to-all phase) moves every port and every leaf alike:
no port or leaf stands out, and nothing is reported. A job's all-to-all confined to one
scalable unit makes every rail's leaf of that unit stand out together, over the same nodes:
``same_nodes_leaves`` or more hot leaves sharing one node set are those nodes' traffic, not a
switch, and are not reported either (a switch fault is one leaf).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from analyzer.detectors.emit import ev
from analyzer.detectors.series import total_increase, window_rate
from analyzer.findings import Finding
from analyzer.pools import Pool
from analyzer.window import Window
from exporter import catalog

TX_PAUSE = re.compile(r"tx_prio([0-7])_pause_seconds\Z")
STORM_ERRORS = "tx_pause_storm_error_events"
# per counter: the rate (events/s) below which a port is not judged at all
CONGESTION_FLOORS: Mapping[str, float] = {
    "np_ecn_marked_roce_packets": 200.0,
    "np_cnp_sent": 100.0,
    "rp_cnp_handled": 100.0,
}
RETRANSMIT_FLOORS: Mapping[str, float] = {
    "out_of_sequence": 1.0,
    "packet_seq_err": 0.5,
    "implied_nak_seq_err": 0.5,
    "roce_adp_retrans": 0.5,
}
ROCE_KINDS = frozenset({"roce_pfc_storm", "roce_retransmits", "roce_congestion",
                        "roce_fabric_congestion"})  # fmt: skip


class RoceDetector:
    name = "roce"

    def __init__(
        self,
        span: float = 120.0,
        storm_share: float = 0.5,
        ratio: float = 4.0,
        min_peers: int = 3,
        leaf_fraction: float = 0.5,
        leaf_min_nodes: int = 3,
        same_nodes_leaves: int = 3,
    ) -> None:
        self.span, self.storm_share, self.ratio = span, storm_share, ratio
        self.min_peers = min_peers
        self.leaf_fraction, self.leaf_min_nodes = leaf_fraction, leaf_min_nodes
        self.same_nodes_leaves = same_nodes_leaves

    def detect(self, window: Window) -> list[Finding]:
        if window.empty or not window.ports or len(window.t) < 2:
            return []
        w, recent = window, window.tail(self.span)
        since = w.now - self.span
        groups = port_groups(w)
        out = self._storms(w, recent, since)
        cong = self._rates(w, recent, CONGESTION_FLOORS)
        loss = self._rates(w, recent, RETRANSMIT_FLOORS)
        there = {name[len(POOLED):]: p for name, p in w.elsewhere.items()
                 if name.startswith(POOLED)}  # fmt: skip
        hot_cong = self._outliers(cong, groups, there)
        hot_loss = self._outliers(loss, groups, there)
        leaves, folded = self._leaves(w, groups, cong, loss, since, there)
        out += leaves
        for (n, p), worst in sorted(hot_loss.items()):
            if (n, p) not in folded:
                out.append(self._port(w, n, p, "roce_retransmits", "warning", "cordon", since,
                                      worst, "RoCE port losing packets far above its peers: a"
                                      " bad NIC, transceiver or cable"))  # fmt: skip
        for (n, p), worst in sorted(hot_cong.items()):
            if (n, p) not in folded and (n, p) not in hot_loss:
                out.append(self._port(w, n, p, "roce_congestion", "warning", "notify", since,
                                      worst, "RoCE congestion (ECN/CNP) far above the port's"
                                      " peers: a hot spot"))  # fmt: skip
        return out

    def pools(self, window: Window) -> dict[str, Pool]:
        """Per counter, this window's port rates by rail and of all its leaves' ports (and how
        many leaves): what the other replicas compare their ports and leaves with."""
        if window.empty or not window.ports or len(window.t) < 2:
            return {}
        recent = window.tail(self.span)
        rates = {**self._rates(window, recent, CONGESTION_FLOORS),
                 **self._rates(window, recent, RETRANSMIT_FLOORS)}  # fmt: skip
        if not rates:  # an InfiniBand fabric: no RoCE counter to compare
            return {}
        groups = port_groups(window)
        leaves = [k for k in groups if k.startswith("leaf=")]
        out = {}
        for name, r in rates.items():
            values = {k: _values(r, ms) for k, ms in groups.items() if k.startswith("rail=")}
            values[LEAVES] = _values(r, [m for k in leaves for m in groups[k]])
            out[POOLED + name] = Pool(values, {LEAVES: len(leaves)})
        return out

    # ------------------------------------------------------------------ PFC storms
    def _storms(self, w: Window, recent: slice, since: float) -> list[Finding]:
        share = np.zeros((len(w.nodes), len(w.ports)))
        prio = np.full(share.shape, -1)
        for name, c in w.ib_counters.items():
            m = TX_PAUSE.match(name)
            if m is None or c.shape[0] != len(w.t):
                continue
            r = np.nan_to_num(window_rate(c, w.t, recent))
            better = r > share
            share[better], prio[better] = r[better], int(m.group(1))
        storms = np.zeros(share.shape)
        errors = w.ib_counters.get(STORM_ERRORS)
        if errors is not None and errors.shape[0] == len(w.t):
            storms = np.nan_to_num(total_increase(errors, recent))
        out = []
        for n, p in zip(*np.nonzero((share >= self.storm_share) | (storms > 0)), strict=False):
            evidence = ev(pause_share=share[n, p], priority=prio[n, p])
            if storms[n, p] > 0:
                evidence = {**evidence, STORM_ERRORS: float(storms[n, p])}
            out.append(self._port(w, int(n), int(p), "roce_pfc_storm", "critical", "drain", since,
                                  evidence, f"PFC storm: this port held its peer paused"
                                  f" {share[n, p]:.0%} of the time"))  # fmt: skip
        return out

    # ------------------------------------------------------------------ rates against peers
    def _rates(self, w: Window, recent: slice, floors: Mapping[str, float]
               ) -> dict[str, np.ndarray]:  # fmt: skip
        """Per counter the port's rate over the span; a port that reported nothing moving
        (moved-only reads leave it NaN) counts 0."""
        out = {}
        for name in floors:
            c = w.ib_counters.get(name)
            if c is not None and c.shape[0] == len(w.t):
                out[name] = np.nan_to_num(window_rate(c, w.t, recent))
        return out

    def _outliers(self, rates: Mapping[str, np.ndarray], groups: Mapping[str, list[tuple[int, int]]],
                  there: Mapping[str, Pool]) -> dict[tuple[int, int], dict[str, float]]:  # fmt: skip
        """Ports whose rate of some counter is above its floor and ``ratio`` x the median of
        the other ports of its group (with >= ``min_peers`` of them; a rail's ports on other
        replicas' nodes too: ``there``)."""
        floors = {**CONGESTION_FLOORS, **RETRANSMIT_FLOORS}
        hot: dict[tuple[int, int], dict[str, float]] = defaultdict(dict)
        for name, r in rates.items():
            for key, members in groups.items():
                vals = np.array([r[n, p] for n, p in members])
                extra = _of(there.get(name), key)
                if len(members) + len(extra) <= self.min_peers:
                    continue
                # a large group: one port moves it little
                whole = float(np.median(np.concatenate([vals, extra])))
                small = len(vals) + len(extra) <= 64
                for i, (n, p) in enumerate(members):
                    ref = (
                        float(np.median(np.concatenate([np.delete(vals, i), extra])))
                        if small
                        else whole
                    )
                    if vals[i] >= floors[name] and vals[i] > self.ratio * ref:
                        hot[(n, p)][f"{name}_per_s"] = float(vals[i])
                        hot[(n, p)][f"{name}_peer_median_per_s"] = ref
        return dict(hot)

    # ------------------------------------------------------------------ leaves
    def _leaves(self, w: Window, groups: Mapping[str, list[tuple[int, int]]],
                cong: Mapping[str, np.ndarray], loss: Mapping[str, np.ndarray], since: float,
                there: Mapping[str, Pool]) -> tuple[list[Finding], set[tuple[int, int]]]:  # fmt: skip
        """Leaves whose ports stand out together against the other leaves' ports (those of
        the leaves other replicas hold too: ``there``)."""
        leaves = {k: v for k, v in groups.items() if k.startswith("leaf=")}
        elsewhere = max((p.nodes.get(LEAVES, 0) for p in there.values()), default=0)
        if not leaves or len(leaves) + elsewhere < 3:  # a leaf needs two others to stand out
            return [], set()
        floors = {**CONGESTION_FLOORS, **RETRANSMIT_FLOORS}
        out: list[Finding] = []
        folded: set[tuple[int, int]] = set()
        hot: list[tuple[str, list[tuple[int, int]], set[int], dict[str, float]]] = []
        for leaf, members in sorted(leaves.items()):
            nodes = {n for n, _ in members}
            if len(nodes) < self.leaf_min_nodes:
                continue
            others = [m for k, ms in leaves.items() if k != leaf for m in ms]
            evidence: dict[str, float] = {}
            for name, r in {**cong, **loss}.items():
                mine = np.array([r[n, p] for n, p in members])
                extra = _of(there.get(name), LEAVES)
                ref = float(np.median(np.concatenate([_values(r, others), extra])))
                above = (mine >= floors[name]) & (mine > self.ratio * ref)
                if above.mean() >= self.leaf_fraction:
                    evidence[f"{name}_leaf_median_per_s"] = float(np.median(mine))
                    evidence[f"{name}_other_leaves_median_per_s"] = ref
                    evidence[f"{name}_ports_above"] = float(above.sum())
            if not evidence:
                continue
            hot.append((leaf, members, nodes, evidence))
        # several leaves hot over the same nodes (every rail of one unit): those nodes' own
        # traffic (a job's all-to-all confined to the unit), not one switch
        by_nodes: dict[frozenset[int], int] = defaultdict(int)
        for _, _, nodes, _ in hot:
            by_nodes[frozenset(nodes)] += 1
        for leaf, members, nodes, evidence in hot:
            folded.update(members)
            if by_nodes[frozenset(nodes)] >= self.same_nodes_leaves:
                continue
            name = leaf.removeprefix("leaf=")
            out.append(Finding(name, f"switch={name}", "roce_fabric_congestion", "warning",
                               "notify", self.name, 1.0, since,
                               {**evidence, "ports": float(len(members)),
                                "nodes": float(len(nodes))},
                               "RoCE congestion or loss on most ports of this leaf at once: the"
                               " switch or its uplinks, not the machines"))  # fmt: skip
        return out, folded

    def _port(self, w: Window, n: int, p: int, kind: str, sev: str, action: str, since: float,
              evidence: Mapping[str, float], summary: str) -> Finding:  # fmt: skip
        return Finding(w.nodes[n], f"port={w.port_name(p)}", kind, sev, action, self.name, 0.9,
                       since, dict(evidence), summary)  # fmt: skip


def port_groups(w: Window) -> dict[str, list[tuple[int, int]]]:
    """Comparison groups of (node, port) indices: ``leaf=<name>`` from the topology (per port,
    else per node), else ``rail=<port>`` (the same port of every node)."""
    out: dict[str, list[tuple[int, int]]] = defaultdict(list)
    state = w.get(catalog.IB_PORT_STATE)  # ports a node has (the window's are every node's)
    exists = (~np.isnan(state).all(axis=0) if state is not None
              else np.ones((len(w.nodes), len(w.ports)), bool))  # fmt: skip
    for n in range(len(w.nodes)):
        for p in range(len(w.ports)):
            if not exists[n, p]:
                continue
            leaf = w.port_leaf.get((n, p)) or w.leaf_of.get(n)
            key = f"leaf={leaf}" if leaf else f"rail={w.port_name(p).rsplit('/', 1)[0]}"
            out[key].append((n, p))
    return dict(out)


POOLED = "roce:"  # a counter's rates' key among a replica's pools
LEAVES = "leaves"  # in a counter's pool: every leaf's ports (and, counted, the leaves)


def _values(r: np.ndarray, members: list[tuple[int, int]]) -> np.ndarray:
    return np.array([r[n, p] for n, p in members], dtype=float)


def _of(pool: Pool | None, key: str) -> np.ndarray:
    return np.zeros(0) if pool is None else np.asarray(pool.values.get(key, np.zeros(0)))
