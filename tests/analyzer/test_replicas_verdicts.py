"""Same verdicts: the evaluation fleets' windows judged by one analyzer and by replicas that
share them by ownership unit (each with its own engine, as separate processes would) give
the same findings, cycle by cycle, including a replica restarted mid-run (a fresh engine that
judges its units as a freshly started analyzer would) and jobs that straddle units.

The ``marginal`` detector's worst 1 % of a fleet-wide peer group included: each replica
judges its nodes against the scores the others published for their parts that cycle (these
fleets are too small for a marginal finding; test_replicas_marginal has a fleet with some)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.replicas.judge import joined, judge, scores
from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.window import Window
from gpuwarden.lab.evaluate import run_seed


def _key(fs: list[Finding]) -> set[tuple[str, str, str, str, str]]:
    return {(f.node, f.subject, f.kind, f.severity, f.action) for f in fs}


class Sharded:
    def __init__(self, replicas: int, restart_at: int) -> None:
        self.engines = {f"r-{i}": Engine(default_detectors()) for i in range(replicas)}
        self.restart_at, self.cycle = restart_at, 0
        self.diff: Counter[str] = Counter()

    def __call__(self, window: Window, full: list[Finding]) -> None:
        self.cycle += 1
        if self.cycle == self.restart_at:
            self.engines["r-0"] = Engine(default_detectors())
        parts = units(window)
        got: list[Finding] = []
        owned = {r: owned_nodes(parts, mine)
                 for r, mine in assign(parts, sorted(self.engines)).items()}  # fmt: skip
        published = {r: scores(self.engines[r], window, keep) for r, keep in owned.items()}
        for r, keep in owned.items():
            others = joined(s for o, s in published.items() if o != r)
            got += judge(self.engines[r], window, keep, others, fleet=r == min(owned))
        a, b = _key(full), _key(got)
        self.diff.update(f"missing {x[2]}" for x in a - b)
        self.diff.update(f"extra {x[2]}" for x in b - a)


@pytest.mark.parametrize(
    "fleet",
    [
        {"seed": 0, "nodes": 64},
        {"seed": 2, "nodes": 128},
        {"seed": 3, "nodes": 96, "mixed": True},
    ],
    ids=lambda f: "-".join(f"{k}{v}" for k, v in f.items()),
)
def test_replicas_find_what_the_single_process_finds(fleet: dict[str, Any]) -> None:
    sharded = Sharded(replicas=4, restart_at=60)
    run_seed(horizon=3600.0, per_kind=1, controls=1, compare=False, judged=sharded, **fleet)
    assert sharded.cycle == 120
    assert not sharded.diff, sharded.diff
