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
import zlib
from typing import Any

import pytest

from analyzer.detectors import default_detectors
from analyzer.detectors.recall import Remembers
from analyzer.detectors.straggler import StragglerDetector
from analyzer.detectors.xid import XidDetector
from analyzer.engine import SINCE, Engine
from analyzer.findings import Finding
from analyzer.replicas.exchange import decode_memory, encode_memory
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
        doc = decode_memory(encode_memory(nodes, giver.remember(nodes)))  # over the wire
        if any(_has(v) for k, v in doc["memory"].items() if k != SINCE):
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
    ],
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


def _board(**memories: tuple[Engine, set[str]]) -> dict[str, bytes]:
    return {r: encode_memory(nodes, e.remember(nodes)) for r, (e, nodes) in memories.items()}


def test_a_replica_takes_only_the_nodes_it_gained_and_counts_those_without_memory() -> None:
    e, giver = _xid_engine(), _xid_engine()
    _straggling(giver)
    h = Handover(judged=frozenset({"n1", "n2"}), cycle=6)
    board = _board(b=(giver, {"n1", "n2"})) | {"c": b"not a memory"}
    taken = h.take(e, board, frozenset({"n2", "n3"}), 7)
    assert (taken.adopted, taken.fresh) == (0, 1)  # n2 is still its own; nobody left n3's
    assert len(taken.unreadable) == 1 and taken.unreadable[0].startswith("c: ")
    s = next(d for d in e.detectors if isinstance(d, StragglerDetector))
    assert s._streaks == {}  # n1's and n2's were not this replica's to take
    h = Handover(judged=frozenset({"n2"}), cycle=6)
    taken = h.take(e, board, frozenset({"n1", "n2"}), 7)  # n1 gained
    assert (taken.adopted, taken.fresh) == (1, 0)
    assert s._streaks == {("job-1", "n1"): (3, 10.0)}


def test_a_replica_that_skipped_a_cycle_takes_every_node_as_gained() -> None:
    e, giver = _xid_engine(), _xid_engine()
    _straggling(giver)
    h = Handover(judged=frozenset({"n1", "n2"}), cycle=5)  # it judged 5, not 6
    taken = h.take(e, _board(b=(giver, {"n1", "n2"})), frozenset({"n1", "n2"}), 7)
    assert (taken.adopted, taken.fresh) == (2, 0)


def test_a_replica_restarted_under_its_name_finds_its_own_memory_of_the_last_cycle() -> None:
    old = _xid_engine()
    _straggling(old)
    board = {"a": Handover().close(old, frozenset({"n1", "n2"}), 6)}
    new = _xid_engine()
    taken = Handover().take(new, board, frozenset({"n1", "n2"}), 7)
    assert (taken.adopted, taken.fresh) == (2, 0)
    assert json.dumps(new.remember({"n1", "n2"}), sort_keys=True) == json.dumps(
        old.remember({"n1", "n2"}), sort_keys=True
    )


def test_a_replica_forgets_the_nodes_it_gave_away_and_leaves_the_memory_of_the_rest() -> None:
    e = _xid_engine()
    _straggling(e)
    h = Handover(judged=frozenset({"n1", "n2"}), cycle=6)
    doc = decode_memory(h.close(e, frozenset({"n1"}), 7))
    assert doc["nodes"] == ["n1"]
    assert doc["memory"]["straggler"]["streaks"] == [["job-1", "n1", 3, 10.0]]
    s = next(d for d in e.detectors if isinstance(d, StragglerDetector))
    assert s._streaks == {("job-1", "n1"): (3, 10.0)} and s.fail_slow._streaks == {}
    assert (h.judged, h.cycle) == ({"n1"}, 7)


@pytest.mark.parametrize("blob", [b"junk", zlib.compress(b"[1, 2]"),
                                  zlib.compress(b'{"nodes": "n1", "memory": {}}')])  # fmt: skip
def test_a_memory_that_is_not_one_is_refused_with_a_clear_error(blob: bytes) -> None:
    with pytest.raises(ValueError, match="detector memory"):
        decode_memory(blob)
