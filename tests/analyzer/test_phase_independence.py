"""A verdict must not depend on when the scrapes happened to fall. The same fleet, scraped at
shifted phases, with jittered scrape times, missed scrapes and analysis cycles offset by a
scrape, must give the same decisions: the light pipeline stage of a job that waits in NCCL
collectives (less power at the same ~100 % utilisation: workload) is never a faulty machine,
a slow rank of another job and a slow GPU in a single-node job are found and drained."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from analyzer.detectors.peer import PeerDetector
from analyzer.detectors.straggler import StragglerDetector
from analyzer.findings import Finding
from analyzer.sources.frames import FrameBuffer
from simulator import Fleet
from simulator.topology import port_name

# job 0-4 in two stages, the first computing 98 % longer: at 5bde149 the light stage's power
# deficit sat at the peer detector's threshold, so the phase decided its drain (0, 1 or 2 nodes)
EXTRA = 0.98
LIGHT_STAGE = (3, 4)
SLOW_RANK, SLOW_ALONE = 6, 9  # a rank of job 5-8; a GPU of a single-node job
ONSET, END, STEP = 300.0, 1500.0, 15.0


def _fleet() -> Fleet:
    fleet = Fleet(12, 5, idle_fraction=0.0, small_job_share=0.0, mean_job_s=1e12, busy_wait=True)
    for nodes, stages in (([0, 1, 2, 3, 4], 2), ([5, 6, 7, 8], 1), ([9], 1), ([10, 11], 1)):
        fleet.jobs.place(np.array(nodes), 0.0, fleet.rng, end=1e12, stages=stages)
    fleet.inject("pipeline_imbalance", fleet.nodes[0], "", {"extra": EXTRA, "stages": 2}, onset=0.0)
    fleet.inject("straggler", fleet.nodes[SLOW_RANK], "", {"slowdown": 0.08}, onset=ONSET)
    fleet.inject("straggler", fleet.nodes[SLOW_ALONE], "gpu3", {"slowdown": 0.08}, onset=ONSET)
    return fleet


def _scrapes(phase: float, jitter: float, rng: np.random.Generator) -> Iterator[float]:
    t = phase
    while t < END:
        t += STEP
        yield t + (rng.uniform(-jitter, jitter) if jitter else 0.0)


def decisions(phase: float, jitter: float, cycle_offset: int, missed: float, seed: int
              ) -> dict[str, tuple[str, ...]]:  # fmt: skip
    """Per node, the hardware findings (kind/action) seen after the faults settled."""
    fleet, rng = _fleet(), np.random.default_rng(seed)
    buf = FrameBuffer(fleet.nodes, ports=[port_name(p) for p in range(8)], sku=fleet.models)
    lost = np.zeros(12, dtype=bool)
    buf.missing = lambda name, a: np.where(lost.reshape((-1,) + (1,) * (a.ndim - 1)), np.nan, a)
    detectors, seen = (PeerDetector(), StragglerDetector()), set()
    for i, t in enumerate(_scrapes(phase, jitter, rng)):
        lost[:] = rng.random(12) < missed
        buf.push(fleet.step(t), fleet.jobs_at(t))
        if i % 2 != cycle_offset:
            continue
        found: list[Finding] = [f for d in detectors for f in d.detect(buf.window())]
        if t >= ONSET + 240:
            seen |= {(f.node, f"{f.kind}/{f.action}") for f in found
                     if f.kind in ("faulty_machine", "straggler") and f.action == "drain"}  # fmt: skip
    out: dict[str, set[str]] = {}
    for node, what in seen:
        out.setdefault(node, set()).add(what)
    return {n: tuple(sorted(v)) for n, v in sorted(out.items())}


VARIANTS = [  # phase (s), jitter (s), cycle offset (scrapes), missed scrapes, seed
    (0.0, 0.0, 0, 0.0, 1),
    (4.1, 0.0, 1, 0.0, 2),
    (9.3, 1.5, 0, 0.02, 3),
    (12.8, 3.0, 1, 0.02, 4),
]


@pytest.fixture(scope="module")
def reference() -> dict[str, tuple[str, ...]]:
    return decisions(*VARIANTS[0])


def test_the_reference_run_drains_the_two_slow_parts_and_not_the_light_stage(reference):
    fleet = _fleet()
    assert set(reference) == {fleet.nodes[SLOW_RANK], fleet.nodes[SLOW_ALONE]}
    assert not {fleet.nodes[n] for n in LIGHT_STAGE} & set(reference)


@pytest.mark.parametrize("variant", VARIANTS[1:], ids=lambda v: f"phase{v[0]}-jitter{v[1]}")
def test_shifted_scrape_phases_jitter_and_cycle_offsets_give_the_same_decisions(variant, reference):
    assert decisions(*variant) == reference
