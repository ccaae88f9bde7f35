"""One analysis cycle: window in, findings out, every detector isolated and timed.

Sits between the series source and the outputs. A detector that raises costs its own
``analyzer_detector_errors_total``, never the cycle. Keeps each finding's first-seen time
across cycles (``since``), folds node findings under a degraded leaf switch into the
switch finding, and drops an ``avoid`` where another finding already takes the node out.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from analyzer.detectors import Detector
from analyzer.findings import Finding
from analyzer.inventory import Inventory
from analyzer.sources.dialects.coverage import annotate
from analyzer.window import Window

log = logging.getLogger(__name__)

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
        self.findings = found
        return found

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
