"""The marginal detector across replicas: each replica judges its nodes against the scores
the others published for their parts that cycle, and together they find exactly what one
detector judging the whole fleet finds (the worst 1 % of a fleet-wide peer group, its
percentile and size, and one fleet-wide shift reported once).

The fleet (after :mod:`gpuwarden.lab.placement_eval`): NVLink error counters of 130 nodes of
two power configurations, a background rate below the floor, three lemons well above it, and
two cycles where most of one group shifts up at once (a driver update)."""

from __future__ import annotations

import numpy as np

from analyzer.detectors.marginal import MarginalDetector
from analyzer.engine import Engine
from analyzer.findings import CLUSTER, Finding
from analyzer.replicas.judge import joined, judge, scores
from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.window import Window
from exporter import catalog

NODES, SAMPLES, STEP = 130, 41, 15.0
LEMONS = {7: 2.0, 58: 0.8, 111: 5.0}  # node -> NVLink errors a second


def _windows(cycles: int, seed: int = 3) -> list[Window]:
    """Consecutive windows: each starts where the one before ended."""
    rng = np.random.default_rng(seed)
    names = tuple(f"node-{i:03d}" for i in range(NODES))
    caps = {i: 700.0 if i < 90 else 500.0 for i in range(NODES)}  # two peer groups
    out, total = [], np.zeros(NODES)
    for k in range(cycles):
        lam = np.full(NODES, 0.0005)
        for n, r in LEMONS.items():
            lam[n] = r
        if k in (4, 5):  # most of the 700 W group shifts at once
            lam[:70] = np.maximum(lam[:70], 0.5)
        steps = rng.poisson(np.broadcast_to(lam * STEP, (SAMPLES - 1, NODES)))
        counts = total + np.concatenate([np.zeros((1, NODES)), np.cumsum(steps, axis=0)])
        total = counts[-1]
        err = np.zeros((SAMPLES, NODES, 1, 1, 4))
        err[:, :, 0, 0, 0] = counts
        t = k * (SAMPLES - 1) * STEP + STEP * np.arange(SAMPLES)
        out.append(Window(t=t, nodes=names, metrics={catalog.NVLINK_ERRORS.name: err}, gpus=1,
                          sku=("h100-sxm",) * NODES, power_cap_w=caps, step=STEP))  # fmt: skip
    return out


def _key(fs: list[Finding]) -> set[tuple[object, ...]]:
    return {(f.node, f.subject, f.kind, f.action, round(f.confidence, 12),
             f.evidence.get("group_size"), f.evidence.get("peer_percentile")) for f in fs}  # fmt: skip


def test_replicas_exchanging_scores_find_the_marginal_nodes_one_detector_finds():
    single = Engine([MarginalDetector()])
    replicas = {f"r-{i}": Engine([MarginalDetector()]) for i in range(4)}
    marginal = shifts = 0
    for w in _windows(8):
        full = single.cycle(w)
        parts = units(w)
        owned = {r: owned_nodes(parts, mine) for r, mine in assign(parts, sorted(replicas)).items()}
        assert all(len(keep) < NODES // 2 for keep in owned.values())  # the groups are split
        published = {r: scores(replicas[r], w, keep) for r, keep in owned.items()}
        got: list[Finding] = []
        for r, keep in owned.items():
            others = joined(s for o, s in published.items() if o != r)
            got += judge(replicas[r], w, keep, others, fleet=r == "r-0")
        assert _key(got) == _key(full)
        assert len(got) == len(full)  # the group-wide shift reported once
        marginal += sum(f.kind == "marginal" for f in full)
        shifts += sum(f.node == CLUSTER for f in full)
    assert marginal >= 6 and shifts >= 1  # both comparisons were exercised


def test_without_the_others_scores_a_replica_judges_its_part_alone_and_differs():
    """What the exchange fixes: a replica judging only its part misses the fleet's peers."""
    single, alone = Engine([MarginalDetector()]), Engine([MarginalDetector()])
    differ = 0
    for w in _windows(4):
        full = single.cycle(w)
        keep = sorted({*range(0, NODES, 4), *LEMONS})  # a quarter of the fleet, the lemons
        mine = {w.nodes[i] for i in keep}
        got = judge(alone, w, keep)
        differ += _key(got) != _key([f for f in full if f.node in mine or f.node == CLUSTER])
    assert differ
