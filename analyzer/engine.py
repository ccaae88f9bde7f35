"""One analysis cycle: window in, findings out, every detector isolated and timed.

Sits between the series source and the outputs. A detector that raises costs its own
``analyzer_detector_errors_total``, never the cycle. Keeps each finding's first-seen time
across cycles (``since``), folds node findings under a degraded leaf switch into the
switch finding, and drops an ``avoid`` where another finding already takes the node out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, field, replace
from typing import Any

from analyzer.detectors import Detector
from analyzer.detectors.recall import Remembers, entries, first, replaced
from analyzer.findings import Finding
from analyzer.inventory import Inventory
from analyzer.pools import Pool, Pools, joined
from analyzer.sources.dialects.coverage import annotate
from analyzer.window import Window

log = logging.getLogger(__name__)
SINCE = "engine.since"  # the engine's own part of what it remembers (no detector has a dot)

# kinds a leaf-switch outage explains on its member nodes
SWITCH_EXPLAINS = frozenset(
    {"ib_errors", "ib_flapping", "ib_port_down", "ib_rate_low", "faulty_machine", "straggler"}
)


@dataclass
class CycleStats:
    durations: dict[str, float] = field(default_factory=dict)
    errors: dict[str, int] = field(default_factory=dict)
    cycles: int = 0
    series_read: int = 0
    last_cycle: float = 0.0
    nodes: int = 0  # in the last cycle's window


class Engine:
    def __init__(
        self,
        detectors: Sequence[Detector],
        timer: Callable[[], float] = time.perf_counter,
        inventory: Inventory | None = None,
    ) -> None:
        self.detectors = list(detectors)
        self.inventory = inventory or Inventory()
        self.timer = timer
        self.stats = CycleStats(errors={d.name: 0 for d in self.detectors})
        self._since: dict[tuple[str, str, str], float] = {}
        self._nodes: frozenset[str] = frozenset()  # the last window's (the rest are scopes)
        self.findings: list[Finding] = []

    def cycle(self, window: Window) -> list[Finding]:
        window = self.inventory.apply(window)  # the operator's inventory completes the source's
        found: list[Finding] = []
        for d in self.detectors:
            t0 = self.timer()
            try:
                found += d.detect(window)
            except Exception:
                self.stats.errors[d.name] = self.stats.errors.get(d.name, 0) + 1
                log.exception("detector %s failed; cycle continues", d.name)
            self.stats.durations[d.name] = self.timer() - t0
        found = fold_avoid(_fold_switches(found, window))
        found = self._keep_since(annotate(_dedupe(found), window))
        self.stats.cycles += 1
        self.stats.series_read += window.series_count()
        self.stats.last_cycle = window.now
        self.stats.nodes = len(window.nodes)
        self._nodes = frozenset(window.nodes)
        self.findings = found
        return found

    def pools(self, window: Window) -> dict[str, Pool]:
        """What ``window``'s nodes add to the fleet's like-with-like medians, per quantity
        (a replica's part, for the others: :mod:`analyzer.pools`); ``window`` completed by the
        inventory, as :meth:`cycle` gives it to the detectors. A detector that fails here
        counts an error, and the others judge without its part's values."""
        parts = []
        for d in self.detectors:
            if not isinstance(d, Pools):
                continue
            try:
                parts.append(d.pools(window))
            except Exception:
                self.stats.errors[d.name] = self.stats.errors.get(d.name, 0) + 1
                log.exception("detector %s's pools failed; the cycle continues", d.name)
        return joined(parts)

    def remember(self, nodes: Set[str]) -> dict[str, Any]:
        """What this engine remembers of ``nodes``: each detector's memory of them
        (:mod:`analyzer.detectors.recall`) and the first-seen times of their findings and of
        its findings on scopes (a leaf switch, a job: what the nodes make up), for another
        engine to :meth:`adopt` (the replica that takes them over)."""
        mine = nodes | {k[0] for k in self._since if k[0] not in self._nodes}  # + scopes
        out: dict[str, Any] = {SINCE: [[*k, t] for k, t in entries(self._since, mine, first)]}
        for d in self.detectors:
            if isinstance(d, Remembers):
                out[d.name] = d.remember(nodes)
        return out

    def adopt(self, doc: Mapping[str, Any], nodes: Set[str]) -> list[str]:
        """Replace this engine's memory of ``nodes`` with ``doc``'s (an empty ``doc``: forget
        them). A part that does not read is skipped, that detector's memory left as it was;
        the names of those parts are returned (logged here)."""
        bad = []
        try:
            since = [((str(n), str(s), str(k)), float(t)) for n, s, k, t in doc.get(SINCE, [])]
            # a scope's finding (a leaf switch, a job, the cluster) may have been seen by both
            # engines: it was first seen when the first of them saw it
            scopes = {k: t for k, t in since if k[0] not in nodes}
            kept = replaced(self._since, nodes, first, since)
            self._since = kept | {k: min(t, kept.get(k, t)) for k, t in scopes.items()}
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            bad.append(SINCE)
            log.warning("memory handed over: %s does not read (%r)", SINCE, e)
        for d in self.detectors:
            if not isinstance(d, Remembers):
                continue
            try:
                d.adopt(doc.get(d.name) or {}, nodes)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                bad.append(d.name)
                log.warning("memory handed over: detector %s's does not read (%r)", d.name, e)
        return bad

    def _keep_since(self, found: list[Finding]) -> list[Finding]:
        since: dict[tuple[str, str, str], float] = {}
        out = []
        for f in found:
            s = min(f.since, self._since.get(f.key, f.since))
            since[f.key] = s
            out.append(f if s == f.since else replace(f, since=s))
        self._since = since
        return out


def _dedupe(found: list[Finding]) -> list[Finding]:
    best: dict[tuple[str, str, str], Finding] = {}
    rank = {"critical": 3, "warning": 2, "info": 1}
    for f in found:
        old = best.get(f.key)
        if old is None or (rank[f.severity], f.confidence) > (rank[old.severity], old.confidence):
            best[f.key] = f
    return sorted(best.values(), key=lambda f: (f.node, f.subject, f.kind))


# actions that take a node (or its jobs) out of service: an avoid beside one of them only
# spends the placement budget on a node that is leaving anyway
TAKES_OUT = frozenset({"cordon", "drain", "requeue", "checkpoint_restart", "reboot"})


def fold_avoid(found: list[Finding]) -> list[Finding]:
    """Marginal only where no other detector acts: a node that some finding recommends
    taking out gets no ``avoid`` (a PCIe link the pcie detector drains, a GPU the straggler
    detector drains, a remap pending)."""
    out_nodes = {f.node for f in found if f.action in TAKES_OUT}
    return [f for f in found if not (f.action == "avoid" and f.node in out_nodes)]


def _fold_switches(found: list[Finding], window: Window) -> list[Finding]:
    switches = {f.node for f in found if f.kind == "switch_degraded"}
    if not switches:
        return found
    if window.port_leaf:  # leaf per port: only the findings of ports on that leaf
        on = {(window.nodes[n], f"port={window.port_name(p)}")
              for (n, p), leaf in window.port_leaf.items() if leaf in switches}  # fmt: skip
        return [f for f in found if (f.node, f.subject) not in on]
    under = {window.nodes[n] for n, leaf in window.leaf_of.items() if leaf in switches}
    return [
        f
        for f in found
        if not (f.node in under and f.kind in SWITCH_EXPLAINS and not _gpu_evidence(f))
    ]


def _gpu_evidence(f: Finding) -> bool:
    """A switch slows the network, not the GPU: clocks below the peers' are the node's own."""
    return f.evidence.get("clock_deficit", 0.0) > 0 or f.evidence.get("clocks_low", 0.0) > 0
