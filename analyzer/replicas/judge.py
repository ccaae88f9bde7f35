"""One replica's judgement of its units: the engine on its part of the window, and only the
findings that are its own. Pure apart from the engine's memory; sits where the single-process
service calls ``Engine.cycle``.

Detector memory is keyed by node name (:mod:`analyzer.detectors.events`), so an engine that
took over a unit judges it as a freshly started analyzer would, and one that gave a unit away
could still hold findings on its nodes until their hold runs out: those are dropped here (the
new owner reports them), so no node is reported by two replicas.
"""

from __future__ import annotations

from collections.abc import Sequence

from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.replicas.slicing import subwindow
from analyzer.window import Window


def judge(engine: Engine, window: Window, keep: Sequence[int]) -> list[Finding]:
    """The findings of ``engine`` on the nodes ``keep`` of ``window``: per-node findings on
    those nodes, and findings on what those nodes make up (a leaf switch, a job, the peer
    group), never a finding on a node of another replica."""
    part = subwindow(window, keep)
    found = engine.cycle(part)
    others = set(window.nodes) - set(part.nodes)
    if others:
        found = [f for f in found if f.node not in others]
        engine.findings = found
    return found
