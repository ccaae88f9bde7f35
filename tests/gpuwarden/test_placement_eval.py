"""The placement evaluation on the simulator reports both arms over the same world, and with
tiers fewer multi-node jobs start on a node that fails within 24 h (ramp failures are seen
coming by the analyzer's marginal detector; sudden ones are not)."""

from __future__ import annotations

import json

import pytest

from gpuwarden.lab import placement_eval as pe


def test_tiers_keep_jobs_off_nodes_whose_link_is_about_to_fail() -> None:
    w = pe.world(64, 7, seed=2)
    off, on = pe.run(w, False, 2), pe.run(w, True, 2)
    assert off["jobs"] > 50 and on["jobs"] > 50
    assert on["landed_on_failing_node"] < off["landed_on_failing_node"]


def test_a_ramp_node_shows_a_marginal_finding_before_its_link_goes_down() -> None:
    import numpy as np

    from analyzer.detectors.marginal import MarginalDetector

    w = pe.world(64, 7, seed=2)
    node, (onset, _, down) = next(iter(w.ramps.items()))
    hour = int(onset + down) - 2
    found = MarginalDetector().detect(pe.window(w, hour, np.random.default_rng(0)))
    assert f"node-{node:03d}" in {f.node for f in found}


def test_the_report_names_both_arms(capsys: pytest.CaptureFixture[str]) -> None:
    assert pe.main(["--nodes", "32", "--days", "3"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert {"without_tiers", "with_tiers"} <= set(out)
