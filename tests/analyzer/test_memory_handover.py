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
from dataclasses import replace
from typing import Any

import pytest

from analyzer.detectors import default_detectors
from analyzer.detectors.infiniband import InfinibandDetector
from analyzer.detectors.recall import Remembers
from analyzer.detectors.straggler import StragglerDetector
from analyzer.detectors.xid import XidDetector
from analyzer.engine import SINCE, Engine
from analyzer.findings import Finding
from analyzer.replicas.exchange import decode_memory, encode_memory
from analyzer.replicas.handover import Handover
from analyzer.window import AfidEvent, Window, XidEvent
from exporter import catalog
from gpuwarden.lab.evaluate import run_seed

from . import synth


class PingPong:
    """Engines ``a`` and ``b`` judge alternate cycles; before each, the one about to judge
    adopts the other's memory of every node, through the exchange's encoding."""

    def __init__(self) -> None:
        self.engines = (Engine(default_detectors()), Engine(default_detectors()))
        self.cycles = 0
        self.compared = 0  # findings compared, over all cycles
        self.handed = 0  # cycles whose hand-over carried some detector memory

    def __call__(self, window: Window, full: list[Finding]) -> None:
        giver = self.engines[self.cycles % 2]
        memory = giver.remember(frozenset(window.nodes))
        self.handed += any(_has(v) for k, v in memory.items() if k != SINCE)
        got = _in_turn(self.engines, self.cycles, window)
        self.cycles += 1
        assert got == sorted(full, key=_order), f"cycle {self.cycles}"
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


def _in_turn(engines: tuple[Engine, Engine], k: int, w: Window) -> list[Finding]:
    """Cycle ``k`` judged by one of two engines taking turns, after it adopted the other's
    memory of every node over the wire (the other forgets them); its findings, in order."""
    giver, taker = engines[k % 2], engines[(k + 1) % 2]
    nodes = frozenset(w.nodes)
    doc = decode_memory(encode_memory(nodes, giver.remember(nodes)))
    assert taker.adopt(doc["memory"], nodes) == []
    giver.adopt({}, nodes)
    return sorted(taker.cycle(w), key=_order)


def _flapping_windows(cycles: int) -> list[Window]:
    """One port that goes down and comes back once a window: a flap only its history shows
    (three ups within the detector's flap window)."""
    out = []
    for k in range(cycles):
        d = synth.healthy(T=41, t0=10_000.0 + 600.0 * k)
        d["metrics"][catalog.IB_PORT_STATE.name][20:23, 3, 0] = 1.0  # down, then up at 23
        out.append(synth.window(d))
    return out


def test_a_ports_flaps_counted_by_one_engine_are_counted_on_by_the_next() -> None:
    one, a, b = (Engine([InfinibandDetector()]) for _ in range(3))
    flagged = []
    for k, w in enumerate(_flapping_windows(4)):
        full = one.cycle(w)
        assert _in_turn((a, b), k, w) == sorted(full, key=_order), f"cycle {k}"
        flagged.append(any(f.kind == "ib_flapping" for f in full))
    assert flagged == [False, False, True, True]  # the third up makes the flap


def _xid_windows() -> list[Window]:
    """XID 13 on node-01's GPU 2 in three cycles, each under another job (repeated across
    jobs: suspect hardware), XID 79 on node-06's GPU 5 in three incidents 650 s apart
    (recurring: replace the GPU), and an XID 79 incident on node-04 that runs over a cycle's end
    (its events chained: one incident, counted once)."""
    out = []
    for k in range(4):
        d = synth.healthy(T=41, t0=10_000.0 + 600.0 * k)
        now = float(d["t"][-1])
        xids = [XidEvent(now - 300.0, 1, 2, 13), XidEvent(now - 300.0 + 50 * k, 6, 5, 79)
                ] if k < 3 else []  # fmt: skip
        if k == 1:
            xids.append(XidEvent(now - 2.0, 4, 0, 79))
        if k == 2:
            xids.append(XidEvent(now - 600.0 + 3.0, 4, 0, 79))  # 5 s after the last one
        d["jobs"] = {f"job-{k}": tuple(range(8))}
        out.append(synth.window(d, xids=tuple(xids)))
    return out


def test_xid_incidents_and_histories_judged_by_one_engine_go_on_in_the_next() -> None:
    one, a, b = (_xid_engine() for _ in range(3))
    kinds = []
    for k, w in enumerate(_xid_windows()):
        full = one.cycle(w)
        assert _in_turn((a, b), k, w) == sorted(full, key=_order), f"cycle {k}"
        kinds.append({(f.node, f.kind, f.evidence.get("events")) for f in full})
    assert ("node-01", "xid_repeated_application", 3.0) in kinds[2]
    assert ("node-04", "xid_fatal", 2.0) in kinds[2]  # one incident of two events
    assert ("node-06", "xid_recurring", None) in kinds[2]


def test_an_amd_events_finding_held_by_one_engine_runs_out_on_time_in_the_next() -> None:
    # windows that overlap by half; the event's finding is held 100 s, so by the next window
    # it has run out while the event is still in that window (the hold runs from the event)
    from analyzer.afidcat import load_catalog
    from analyzer.detectors.afid import AfidDetector

    def engine() -> Engine:
        return Engine([AfidDetector(load_catalog(), hold=100.0)])

    one, a, b = engine(), engine(), engine()
    held = []
    for k in range(3):
        d = synth.healthy(T=41, t0=10_000.0 + 300.0 * k)
        w = replace(synth.window(d), afids=(AfidEvent(10_000.0 + 550.0, 3, 1, 27, "fatal"),))
        full = one.cycle(w)
        assert _in_turn((a, b), k, w) == sorted(full, key=_order), f"cycle {k}"
        held.append(len(full))
    assert held == [1, 0, 0]  # found once, not again from the same event
