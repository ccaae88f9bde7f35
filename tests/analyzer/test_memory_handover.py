"""Detector memory handed from one engine to another (analyzer.detectors.recall,
analyzer.replicas.handover): two engines that judge alternate cycles of a fleet, each taking
the other's memory of every node over the wire before it judges, find what one engine that
judges every cycle finds, finding for finding (``since`` and evidence included). Any piece of
per-node memory left out of the hand-over (a straggler's streak, a port's flaps, an XID
incident, an AFID's hold) shows as a difference, as it did in the replicas' evaluation before.
And a malformed hand-over leaves the memory as it was and says which part did not read.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from analyzer.detectors import default_detectors
from analyzer.detectors.marginal import Scores
from analyzer.detectors.recall import Remembers
from analyzer.detectors.straggler import StragglerDetector
from analyzer.detectors.xid import XidDetector
from analyzer.engine import SINCE, Engine
from analyzer.findings import Finding
from analyzer.replicas.exchange import decode_part, encode
from analyzer.replicas.handover import Handover
from analyzer.window import Window
from gpuwarden.lab.evaluate import run_seed


class PingPong:
    """Engines ``a`` and ``b`` judge alternate cycles; before each, the one about to judge
    adopts the other's memory of every node, through the exchange's encoding."""

    def __init__(self) -> None:
        self.engines = (Engine(default_detectors()), Engine(default_detectors()))
        self.cycles = 0
        self.compared = 0  # findings compared, over all cycles
        self.handed = 0  # cycles whose hand-over carried some detector memory

    def __call__(self, window: Window, full: list[Finding]) -> None:
        giver, taker = self.engines[self.cycles % 2], self.engines[(self.cycles + 1) % 2]
        self.cycles += 1
        nodes = frozenset(window.nodes)
        _, doc = decode_part(encode(Scores(), {"nodes": sorted(nodes),
                                               "memory": giver.remember(nodes)}))  # fmt: skip
        if any(v for k, v in doc["memory"].items() if k != SINCE and _has(v)):
            self.handed += 1
        assert taker.adopt(doc["memory"], nodes) == []
        giver.adopt({}, nodes)  # gone with them: the giver remembers none of it
        got = taker.cycle(window)
        assert sorted(got, key=_order) == sorted(full, key=_order), f"cycle {self.cycles}"
        self.compared += len(full)


def _order(f: Finding) -> tuple[str, str, str]:
    return f.key


def _has(v: Any) -> bool:
    if isinstance(v, dict):
        return any(_has(x) for x in v.values())
    return bool(v)


@pytest.mark.parametrize(
    "fleet",
    [
        {"seed": 2, "nodes": 96},
        {"seed": 1, "nodes": 64, "mixed": True},
        {"seed": 3, "nodes": 48, "amd": True},
    ],  # fmt: skip
    ids=["homogeneous", "mixed", "mixed-amd"],
)
def test_two_engines_taking_turns_with_the_memory_handed_over_find_what_one_engine_finds(
    fleet: dict[str, Any],
) -> None:
    pp = PingPong()
    run_seed(horizon=2400.0, per_kind=1, controls=1, compare=False, judged=pp, **fleet)
    assert pp.cycles == 80
    assert pp.compared > 0 and pp.handed > 0  # findings to compare, and memory to hand over


def test_every_detector_with_memory_per_node_can_hand_it_over() -> None:
    remembering = {d.name for d in default_detectors() if isinstance(d, Remembers)}
    assert {"xid", "afid", "infiniband", "straggler"} <= remembering


def _xid_engine() -> Engine:
    return Engine(
        [d for d in default_detectors() if isinstance(d, XidDetector | StragglerDetector)]
    )


def _straggling(engine: Engine) -> None:
    s = next(d for d in engine.detectors if isinstance(d, StragglerDetector))
    s._streaks = {("job-1", "n1"): (3, 10.0), ("job-1", "n2"): (1, 20.0)}
    s._jobs_seen["n1"].update({"job-1", "job-0"})
    s.fail_slow._streaks = {("n2", "gpu=1"): (2, 5.0)}


def test_a_memory_that_does_not_read_leaves_the_detectors_memory_as_it_was() -> None:
    e = _xid_engine()
    _straggling(e)
    before = json.dumps(e.remember({"n1", "n2"}), sort_keys=True)
    bad = e.adopt({"straggler": {"streaks": [["job-1", "n1", "three"]]}, "xid": [1, 2],
                   SINCE: "nonsense"}, {"n1", "n2"})  # fmt: skip
    assert sorted(bad) == sorted(["straggler", "xid", SINCE])
    assert json.dumps(e.remember({"n1", "n2"}), sort_keys=True) == before


def test_adopting_replaces_the_memory_of_the_named_nodes_only() -> None:
    giver, taker = _xid_engine(), _xid_engine()
    _straggling(giver)
    _straggling(taker)
    t = next(d for d in taker.detectors if isinstance(d, StragglerDetector))
    t._streaks[("job-1", "n3")] = (5, 1.0)
    doc = giver.remember({"n1"})
    doc["straggler"]["streaks"][0][2] = 9  # what the giver knew of n1, changed to tell apart
    doc["straggler"]["streaks"].append(["job-1", "n3", 7, 2.0])  # not a node handed over
    assert taker.adopt(doc, {"n1"}) == []
    assert t._streaks == {("job-1", "n1"): (9, 10.0), ("job-1", "n2"): (1, 20.0),
                          ("job-1", "n3"): (5, 1.0)}  # fmt: skip
    assert taker.adopt({}, {"n1", "n2"}) == []  # an empty memory: forgotten
    assert t._streaks == {("job-1", "n3"): (5, 1.0)}
    assert set(t._jobs_seen) == set() and t.fail_slow._streaks == {}


def test_a_replica_takes_only_the_nodes_it_gained_and_counts_those_without_memory() -> None:
    e = _xid_engine()
    h = Handover(judged=frozenset({"n1", "n2"}))
    giver = _xid_engine()
    _straggling(giver)
    parts = [
        {"nodes": ["n3", "n1"], "memory": giver.remember({"n3", "n1"})},  # n1 is still mine
        {"nodes": ["n4"], "memory": "not a mapping"},
        "not a part at all",
    ]
    taken = h.take(e, parts, frozenset({"n2", "n3", "n4", "n5"}))  # type: ignore[arg-type]
    assert (taken.adopted, taken.fresh) == (1, 2)  # n3; n4 and n5 afresh
    assert len(taken.unreadable) == 2
    s = next(d for d in e.detectors if isinstance(d, StragglerDetector))
    assert s._streaks == {}  # n3 had no streak; n1's was not this replica's to take


def test_a_replica_gives_the_nodes_it_no_longer_owns_then_forgets_them() -> None:
    e = _xid_engine()
    _straggling(e)
    h = Handover(judged=frozenset({"n1", "n2"}))
    assert h.give(e, frozenset({"n1", "n2"})) is None
    part = h.give(e, frozenset({"n1"}))
    assert part is not None and part["nodes"] == ["n2"]
    assert part["memory"]["straggler"]["streaks"] == [["job-1", "n2", 1, 20.0]]
    h.close(e, frozenset({"n1"}))
    s = next(d for d in e.detectors if isinstance(d, StragglerDetector))
    assert s._streaks == {("job-1", "n1"): (3, 10.0)} and s.fail_slow._streaks == {}
    assert h.judged == {"n1"}
