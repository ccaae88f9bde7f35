"""Same verdicts: the evaluation fleets' windows judged by one analyzer and by replicas that
share them by ownership unit (each with its own engine, as separate processes would) give
the same findings, cycle by cycle, including a replica restarted mid-run (a fresh engine that
judges its units as a freshly started analyzer would) and jobs that straddle units.

The ``marginal`` detector's worst 1 % of a fleet-wide peer group included: each replica
judges its nodes against the scores the others published for their parts that cycle (these
fleets are too small for a marginal finding; test_replicas_marginal has a fleet with some)."""

from __future__ import annotations

from typing import Any

import pytest

from gpuwarden.lab.evaluate import run_seed
from gpuwarden.lab.replica_eval import Sharded


@pytest.mark.parametrize(
    "fleet",
    [
        {"seed": 2, "nodes": 128},
        # the mixed fleet: tests/gpuwarden/test_replica_eval.py (64 nodes, and restarted)
    ],
    ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()),
)
def test_replicas_find_what_the_single_process_finds(fleet: dict[str, Any]) -> None:
    sharded = Sharded(replicas=4, restart_at=60)
    run_seed(horizon=3600.0, per_kind=1, controls=1, compare=False, judged=sharded, **fleet)
    assert sharded.cycle == 120
    assert sharded.split > 0 and sharded.moved > 0  # the replicas shared it, units moved
    assert not sharded.diff, sharded.diff
