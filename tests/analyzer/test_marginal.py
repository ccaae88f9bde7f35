"""The marginal detector: the worst 1 % of a peer group, above a floor, in both halves of
the window, gets an ``avoid`` finding; a fleet-wide shift flags nobody and is one notice;
a group too small is not judged; below the floor nothing counts."""

from __future__ import annotations

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.marginal import MarginalDetector
from analyzer.findings import CLUSTER
from exporter import catalog as c
from tests.analyzer.synth import healthy, window

NODES = 30
RATE = 0.05  # NVLink errors per second on one link: well above the 0.01/s floor


def with_rate(d: dict, node: int, rate: float, start: int = 0) -> dict:
    """Node ``node``'s first link counts ``rate`` errors per second from sample ``start``."""
    err = d["metrics"][c.NVLINK_ERRORS.name]
    steps = np.clip(np.arange(len(d["t"])) - start, 0, None)
    err[:, node, 0, 0, 0] = rate * d["step"] * steps
    return d


def test_the_worst_node_of_its_peers_above_the_floor_gets_an_avoid_finding() -> None:
    d = with_rate(healthy(NODES), 7, RATE)
    for i in range(NODES):  # a little background noise, below the floor, on everyone
        if i != 7:
            d = with_rate(d, i, 0.001 * (1 + i % 3))
    [f] = MarginalDetector().detect(window(d))
    assert (f.node, f.subject, f.kind, f.action) == ("node-07", "signal=nvlink_errors",
                                                     "marginal", "avoid")  # fmt: skip
    assert f.evidence["group_size"] == NODES and f.evidence["peer_percentile"] > 95
    assert abs(f.evidence["value"] - RATE) < 1e-6
    assert "rate(" + c.NVLINK_ERRORS.name in f.summary


def test_a_node_marginal_only_in_the_last_half_is_not_yet_flagged() -> None:
    d = with_rate(healthy(NODES), 7, RATE, start=30)  # 41 samples: starts in the second half
    assert MarginalDetector().detect(window(d)) == []


def test_a_fleet_wide_shift_flags_nobody_and_raises_one_notice() -> None:
    d = healthy(NODES)
    for i in range(NODES):
        d = with_rate(d, i, RATE * (1 + 0.1 * (i % 5)))
    found = MarginalDetector().detect(window(d))
    assert [(f.node, f.kind, f.action) for f in found] == [(CLUSTER, "fleet_shift", "notify")]


def test_below_the_absolute_floor_nothing_is_marginal_and_small_groups_are_not_judged() -> None:
    d = with_rate(healthy(NODES), 7, 0.005)
    assert MarginalDetector().detect(window(d)) == []
    d = with_rate(healthy(10), 3, RATE)
    assert MarginalDetector().detect(window(d)) == []


def test_the_default_detector_set_includes_the_marginal_detector() -> None:
    assert "marginal" in {d.name for d in default_detectors()}
    assert MarginalDetector().detect(window(healthy(NODES))) == []  # healthy: silent


def test_an_avoid_finding_pushed_to_alertmanager_carries_its_evidence() -> None:
    from analyzer.output import alertmanager_alerts

    d = with_rate(healthy(NODES), 7, RATE)
    [a] = alertmanager_alerts(MarginalDetector().detect(window(d)), 0.0, 300.0)
    assert a["labels"]["action"] == "avoid" and a["labels"]["fault_class"] == "marginal"
    ann = a["annotations"]
    assert ann["metric"] == "nvlink_errors" and ann["group_size"] == "30"
    assert ann["promql"].startswith("sum by (node) (rate(" + c.NVLINK_ERRORS.name)
