"""Placement tiers on the simulator: how many multi-node jobs start on a node that fails
within the next 24 h, with tiers on and off (same faults, same job arrivals, same seed).

``python -m gpuwarden.lab.placement_eval [--nodes 128 --days 14 --seed 1]``

The world, in virtual hours: a few nodes carry the simulator's ``nvlink_errors`` fault (a
CRC/replay ramp on one link, doubling every ``doubling_s``, ending in link down after
``down_after_s``: simulator/faults/nvlink.py), others fail suddenly with no precursor (an
XID: tiers cannot help there), everyone shows a background error rate below the marginal
floor. Each hour the analyzer's own ``MarginalDetector`` judges a 10-minute window of the
NVLink counters; its ``avoid`` findings go through remediation's placement logic (budget
max(1, 10 %) of the fleet, ttl 24 h after the last finding, doubling on recurrence). Jobs of
the simulator's multi-node sizes arrive every hour and take free nodes: without tiers in
random order, with tiers de-preferred nodes last (as Slurm does with a higher Weight). A
failed node is drained for 48 h, then returns repaired. The umbrella package may import
every part; nothing imports this.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from analyzer.detectors.marginal import MarginalDetector
from analyzer.window import Window
from exporter import catalog
from remediation.placement import budget, tiers
from remediation.placement.config import PlacementPolicy
from simulator.jobs import MULTI_NODE_SIZES

H = 3600.0
SAMPLES, STEP = 41, 15.0  # the analyzer's window: 10 minutes of 15 s scrapes


@dataclass(frozen=True)
class World:
    nodes: int
    hours: int
    ramps: dict[int, tuple[float, float, float]]  # node -> (onset h, doubling s, down after h)
    sudden: dict[int, float]  # node -> failure hour (no precursor)
    arrivals: list[list[int]]  # per hour: the sizes of the jobs that arrive
    durations: list[list[float]]  # per hour: their durations (h)


def world(nodes: int, days: int, seed: int) -> World:
    rng = np.random.default_rng(seed)
    hours = days * 24
    lemons = rng.choice(nodes, size=max(1, nodes // 32), replace=False)
    ramps = {int(n): (float(rng.uniform(0, hours - 72)), float(rng.uniform(4, 12) * H),
                      float(rng.uniform(12, 48))) for n in lemons}  # fmt: skip
    others = np.setdiff1d(np.arange(nodes), lemons)
    sudden = {int(n): float(rng.uniform(0, hours)) for n in
              rng.choice(others, size=max(1, nodes // 64), replace=False)}  # fmt: skip
    arrivals, durations = [], []
    for _ in range(hours):
        k = int(rng.poisson(nodes / 64))
        arrivals.append([int(rng.choice(MULTI_NODE_SIZES)) for _ in range(k)])
        durations.append([float(max(0.5, rng.exponential(8.0))) for _ in range(k)])
    return World(nodes, hours, ramps, sudden, arrivals, durations)


def failures(w: World) -> dict[int, float]:
    """node -> the hour it fails (link down at the end of its ramp, or sudden)."""
    out = {n: onset + down for n, (onset, _, down) in w.ramps.items()}
    out.update(w.sudden)
    return out


def rate(w: World, node: int, hour: float) -> float:
    """NVLink errors per second (simulator/faults/nvlink.py's ramp, defaults)."""
    base = 0.0005
    if node not in w.ramps:
        return base
    onset, doubling, down = w.ramps[node]
    since = (hour - onset) * H
    if since < 0 or since > down * H:
        return base
    return base + min(200.0, 0.05 * 2 ** (since / doubling))


def window(w: World, hour: int, rng: np.random.Generator) -> Window:
    t = hour * H + STEP * np.arange(SAMPLES)
    lam = np.array([rate(w, n, hour) for n in range(w.nodes)]) * STEP
    counts = np.cumsum(rng.poisson(np.broadcast_to(lam, (SAMPLES, w.nodes))), axis=0)
    err = np.zeros((SAMPLES, w.nodes, 1, 1, 4))
    err[:, :, 0, 0, 0] = counts
    names = tuple(f"node-{i:03d}" for i in range(w.nodes))
    return Window(t=t, nodes=names, metrics={catalog.NVLINK_ERRORS.name: err}, gpus=1,
                  sku=("h100-sxm",) * w.nodes, step=STEP)  # fmt: skip


def run(w: World, with_tiers: bool, seed: int) -> dict[str, float]:
    p, det = PlacementPolicy(), MarginalDetector()
    rng_obs, rng_pick = np.random.default_rng(seed + 1), np.random.default_rng(seed + 2)
    fail_at = failures(w)
    caps = {"fleet": budget.limit(w.nodes, p.max_fraction)}
    held: dict[int, tiers.Entry] = {}
    busy_until = np.zeros(w.nodes)
    down_until = np.full(w.nodes, -1.0)
    jobs = hit = 0
    for hour in range(w.hours):
        now = hour * H
        for n, at in fail_at.items():
            if hour <= at < hour + 1:
                down_until[n], busy_until[n] = hour + 48, hour  # drained; its job ends
        if with_tiers:
            held = {n: e for n, e in held.items() if not tiers.expired(e, p, now)}
            seen = {int(f.node.split("-")[1]) for f in det.detect(window(w, hour, rng_obs))}
            for n in seen:
                if n in held:
                    held[n] = tiers.Entry(str(n), "marginal", "", held[n].since, now, held[n].ttl_s)
                    continue
                members = [budget.Member(str(m), 1.0, frozenset({"fleet"})) for m in held]
                if budget.admit(budget.Member(str(n), 1.0, frozenset({"fleet"})), members,
                                caps).allow:  # fmt: skip
                    held[n] = tiers.Entry(str(n), "marginal", "", now, now, tiers.ttl_for(p, 0))
        for size, dur in zip(w.arrivals[hour], w.durations[hour], strict=True):
            free = np.flatnonzero((busy_until <= hour) & (down_until <= hour))
            if free.size < size:
                continue
            order = rng_pick.permutation(free)
            if with_tiers:  # de-preferred last, still used when nothing else fits
                order = np.array(sorted(order, key=lambda n: int(n) in held))
            chosen = order[:size]
            busy_until[chosen] = hour + dur
            jobs += 1
            hit += any(hour <= fail_at.get(int(n), -1e9) < hour + 24 for n in chosen)
    return {"jobs": jobs, "landed_on_failing_node": hit, "fraction": hit / jobs if jobs else 0.0}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="placement_eval", description=__doc__)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--days", type=int, default=14)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    w = world(args.nodes, args.days, args.seed)
    out = {
        "nodes": args.nodes, "days": args.days, "seed": args.seed,
        "ramp_failures": len(w.ramps), "sudden_failures": len(w.sudden),
        "without_tiers": run(w, False, args.seed), "with_tiers": run(w, True, args.seed),
    }  # fmt: skip
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
