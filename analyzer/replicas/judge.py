"""One replica's judgement of its units: the engine on its part of the window, and only the
findings that are its own. Pure apart from the engine's memory; sits where the single-process
service calls ``Engine.cycle``.

Detector memory is keyed by node name (:mod:`analyzer.detectors.events`): the replica that
takes a unit over adopts its last owner's memory of those nodes before it judges them
(:mod:`analyzer.replicas.handover`), and the one that gave it away forgets them; a finding it
still held on them is dropped here all the same (the new owner reports it), so no node is
reported by two replicas.

The fleet-wide comparisons, ``marginal``'s worst 1 % of a peer group and the medians of a
model's or configuration's nodes other detectors judge against (:mod:`analyzer.pools`), are
judged in two steps: every replica's :func:`scores` of its part, exchanged, then each
replica's :func:`judge` against the others' (:class:`~analyzer.detectors.marginal.Scores`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Protocol, runtime_checkable

from analyzer.detectors.marginal import MarginalDetector, Scores
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.replicas.slicing import subwindow
from analyzer.window import Window


@runtime_checkable
class Fleetwide(Protocol):
    """A detector with findings on the whole fleet (``marginal``'s shifted peer group, a
    storage mount many nodes see failing), which one replica reports (``fleet``)."""

    fleet: bool


def marginal_of(engine: Engine) -> MarginalDetector | None:
    return next((d for d in engine.detectors if isinstance(d, MarginalDetector)), None)


def scores(engine: Engine, window: Window, keep: Sequence[int]) -> Scores:
    """What the other replicas judge their nodes against, of the nodes ``keep`` of
    ``window``: the marginal scores (none where the engine runs no marginal detector) and the
    pools of the like-with-like medians (:meth:`Engine.pools`)."""
    part = engine.inventory.apply(subwindow(window, keep))  # as the detectors see it
    d = marginal_of(engine)
    got = Scores() if d is None else d.scores(part)
    return replace(got, pools=engine.pools(part))


def joined(parts: Iterable[Scores]) -> Scores:
    out = Scores()
    for s in parts:
        out = out.join(s)
    return out


def judge(engine: Engine, window: Window, keep: Sequence[int], others: Scores | None = None,
          fleet: bool = True) -> list[Finding]:  # fmt: skip
    """The findings of ``engine`` on the nodes ``keep`` of ``window``: per-node findings on
    those nodes, and findings on what those nodes make up (a leaf switch, a job, the peer
    group), never a finding on a node of another replica. ``others``: the other replicas'
    marginal scores this cycle (None: marginal judges this part alone); ``fleet``: this
    replica reports the fleet-wide findings (one replica does: :class:`Fleetwide`)."""
    part = subwindow(window, keep)
    if others is not None:  # the others' nodes count in every like-with-like median
        part = replace(part, elsewhere=others.pools)
    d = marginal_of(engine)
    if d is not None:
        d.others = others
    wide = [x for x in engine.detectors if isinstance(x, Fleetwide)]
    for x in wide:
        x.fleet = fleet
    try:
        found = engine.cycle(part)
    finally:
        if d is not None:
            d.others = None
        for x in wide:
            x.fleet = True
    others_nodes = set(window.nodes) - set(part.nodes)
    if others_nodes:
        found = [f for f in found if f.node not in others_nodes]
        engine.findings = found
    return found
