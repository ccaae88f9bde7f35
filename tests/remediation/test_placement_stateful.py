"""The placement property on the real code: a Hypothesis state machine drives the service's
Engine and Placement through the journal as the worker does (avoid alerts with random
scores, resolutions, operator releases, clock advances, ticks, denied alerts decided again,
a slurmctld reconfigure that resets the weights) against a Slurm whose node table is three
overlapping partitions, and checks after every step that soft actions

- never take capacity out: no action, no held node, no drain or State= update, nothing but
  Weight and Extra ever written, every weight below INFINITE;
- never exceed their budget: per partition at most max(1, floor(max_fraction x size)) nodes
  held and weighted up, per failure domain at most max(1, floor(max_domain_fraction x size));
- always expire: after a tick no tier is past its end, no end lies beyond the ttl after the
  last evidence nor beyond max_hold_s after its start, and max_hold_s later (alerts still
  firing or not) every tier is gone and every weight is slurm.conf's again.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from remediation.backends.runner import Result
from remediation.clock import FakeClock
from remediation.placement import slurm
from remediation.placement.slurm import SlurmPlacement
from remediation.service import Service
from tests.remediation.helpers import service, topology_file
from tests.remediation.test_placement_engine import POLICY, avoid

NODES = [f"gpu-node-{i:03d}" for i in range(1, 31)]
PARTITIONS = {"all": NODES, "train": NODES[:20], "infer": NODES[20:]}  # caps 3, 2, 1
LEAVES = {f"leaf-{i:02d}": NODES[i * 8 : i * 8 + 8] for i in range(4)}  # caps 2, 2, 2, 1
BASE_WEIGHT = 10


class PartitionedSlurm:
    """sinfo --json (weight, extra, partitions) and scontrol update; every call kept."""

    def __init__(self) -> None:
        self.weights = dict.fromkeys(NODES, BASE_WEIGHT)
        self.extra = dict.fromkeys(NODES, "")
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        self.calls.append(list(argv))
        if argv[0] == "sinfo":
            nodes = [{"name": n, "weight": w, "extra": self.extra[n], "state": "idle",
                      "partitions": [p for p, m in PARTITIONS.items() if n in m],
                      "state_flags": [], "reason": ""} for n, w in self.weights.items()]  # fmt: skip
            return Result(0, json.dumps({"nodes": nodes}), "")
        assert argv[:2] == ["scontrol", "update"], argv
        args = dict(a.split("=", 1) for a in argv[2:])
        assert set(args) == {"NodeName", "Weight", "Extra"}, argv  # never State=, never a drain
        self.weights[args["NodeName"]] = int(args["Weight"])
        self.extra[args["NodeName"]] = args["Extra"]
        return Result(0, "", "")


def cap(size: int, fraction: float) -> int:
    return max(1, math.floor(fraction * size))


class Placements(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = tempfile.TemporaryDirectory()
        tmp = Path(self.tmp.name)
        self.svc: Service = service(tmp, POLICY, clock=FakeClock(), topology=topology_file(tmp, 30))
        self.slurm = PartitionedSlurm()
        p = self.svc.engine.placement
        assert p is not None
        p.projection, p.dry_run = SlurmPlacement(self.slurm), False
        self.policy = p.policy

    def teardown(self) -> None:
        self.svc.journal.close()
        self.tmp.cleanup()

    @property
    def clock(self) -> FakeClock:
        assert isinstance(self.svc.clock, FakeClock)
        return self.svc.clock

    def send(self, alert: object) -> None:
        """Alertmanager's webhook, then the worker's pass over what is queued (a denied
        alert is queued again when a tier ends)."""
        self.svc.journal.accept([alert], self.clock.now())  # type: ignore[list-item]
        self.worker_pass()

    def worker_pass(self) -> None:
        for _, a in self.svc.journal.todo():
            self.svc.engine.decide(a)

    def held(self) -> dict[str, object]:
        assert self.svc.engine.placement is not None
        return {e.node: e for e in self.svc.engine.placement.store.entries()}

    # ------------------------------------------------------------------ what happens
    @rule(node=st.sampled_from(NODES), score=st.integers(0, 100))
    def avoid_alert(self, node: str, score: int) -> None:
        self.send(avoid(node, score=str(score)))

    @rule(node=st.sampled_from(NODES))
    def resolve(self, node: str) -> None:
        self.send(avoid(node, status="resolved"))

    @rule(node=st.sampled_from(NODES))
    def release(self, node: str) -> None:
        self.svc.engine.release_placement(node, "alice")
        self.worker_pass()

    @rule(seconds=st.floats(0, 3 * 86400))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.svc.engine.tick()
        self.worker_pass()
        now = self.clock.now()
        for e in self.held().values():  # a tick ends every tier past its end
            assert e.until(self.policy) > now, e  # type: ignore[attr-defined]

    @rule()
    def slurmctld_reconfigure(self) -> None:
        """slurm.conf's weights come back; our Extra record stays (drift, repaired)."""
        self.slurm.weights = dict.fromkeys(NODES, BASE_WEIGHT)

    @rule()
    def every_tier_ends_by_its_longest_hold(self) -> None:
        self.clock.advance(self.policy.max_hold_s)
        self.svc.engine.tick()
        assert self.held() == {}
        self.worker_pass()  # denied alerts still firing are decided again: they may hold
        self.clock.advance(self.policy.max_hold_s)
        self.svc.engine.tick()
        assert self.held() == {}
        assert self.slurm.weights == dict.fromkeys(NODES, BASE_WEIGHT)
        assert self.slurm.extra == dict.fromkeys(NODES, "")

    # ------------------------------------------------------------------ what always holds
    @invariant()
    def nothing_is_taken_out_of_service(self) -> None:
        assert self.svc.journal.rows("SELECT id FROM actions") == []
        assert self.svc.journal.rows("SELECT node FROM nodes WHERE state != 'released'") == []
        assert not any(self.svc.backend.is_taken_out(n) for n in NODES)
        assert all(w < slurm.WEIGHT_MAX + 1 for w in self.slurm.weights.values())

    @invariant()
    def no_partition_or_domain_holds_more_than_its_budget(self) -> None:
        held = set(self.held())
        weighted = {n for n, x in self.slurm.extra.items() if x}
        for members in PARTITIONS.values():
            limit = cap(len(members), self.policy.max_fraction)
            assert len(held & set(members)) <= limit
            assert len(weighted & set(members)) <= limit
        for members in LEAVES.values():
            assert len(held & set(members)) <= cap(len(members), self.policy.max_domain_fraction)

    @invariant()
    def every_tier_has_an_end_within_its_ttl_and_the_longest_hold(self) -> None:
        for e in self.held().values():
            end = e.until(self.policy)  # type: ignore[attr-defined]
            assert end <= e.last_evidence + e.ttl_s  # type: ignore[attr-defined]
            assert end <= e.since + self.policy.max_hold_s  # type: ignore[attr-defined]
            assert e.ttl_s <= self.policy.max_hold_s  # type: ignore[attr-defined]


Placements.TestCase.settings = settings(max_examples=25, stateful_step_count=30, deadline=None)
test_soft_actions_on_the_real_engine_never_take_capacity_out_exceed_budget_or_outlive_ttl = (
    Placements.TestCase
)
