"""Checkpoint storage faults: a mount that turns slow or hangs, seen by every node that uses it.

Target: the mount (an absolute path). ``node`` says who sees it: ``cluster`` (every node:
the file system or its servers are the problem), a leaf switch (the nodes under it: the
storage network path through that switch), or one node (a client-side problem: mount
options, a stale handle). The frame model has no storage signal, so ``apply`` changes
nothing in it; what the fault does is read from the fleet's faults by each node's simulated
prober (:mod:`simulator.storage`), which the exporter's real StorageCollector renders.
Not hardware: a storage fault must never drain a node (it is a control for node detectors).
"""

from __future__ import annotations

from simulator.faults.base import Fault, FaultKind, Param, Step

STORAGE_KINDS = ("storage_slow", "storage_hung")


def _seen_by_probes(f: Fault, s: Step) -> None:
    """Nothing in the frame: see simulator/storage.py."""


KINDS = (
    FaultKind(
        "storage_slow",
        "mount",
        _seen_by_probes,
        {"latency_s": Param(5.0, 0.001, 3600.0)},
        hardware=False,
        negative_control=True,
        help="probes of the mount take latency_s longer (mostly in fsync); over the probe "
        "timeout they hang",
    ),
    FaultKind(
        "storage_hung",
        "mount",
        _seen_by_probes,
        hardware=False,
        negative_control=True,
        help="every probe of the mount hangs (a D-state file system: no answer in time)",
    ),
)
