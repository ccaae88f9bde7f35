"""The RoCE evaluation end to end: every fault found and told apart, the congested phases left
alone, natively and through a real Prometheus (promtool backfill, the analyzer's real source)."""

from __future__ import annotations

import shutil

import pytest

from gpuwarden.lab.roce_eval import evaluate_fleet, main, table
from simulator.roce import RoceFleet


def _fleet() -> RoceFleet:
    fleet = RoceFleet(16, seed=4)
    fleet.inject("pfc_storm", 300.0, 900.0, node=2, port=5)
    fleet.inject("congested_phase", 1500.0, 900.0, units=(0, 1))
    fleet.inject("bad_cable", 2700.0, 900.0, node=11, port=0)
    fleet.inject("congested_phase", 3900.0, 900.0, units=(1,))
    fleet.inject("leaf_congestion", 5100.0, 900.0, unit=0, port=3)
    return fleet


def _check(r: dict) -> None:
    assert [(f["kind"], f["found"], f["told_apart"]) for f in r["faults"]] == [
        ("pfc_storm", True, True),
        ("bad_cable", True, True),
        ("leaf_congestion", True, True),
    ]
    assert all(ctl["findings"] == 0 for ctl in r["controls"]), r["controls"]
    assert r["stray"] == [] and r["false_drains"] == 0
    assert all(f["ttd_s"] < 150 for f in r["faults"])


def test_native_evaluation_finds_and_tells_apart_every_fault_and_leaves_the_controls() -> None:
    _check(evaluate_fleet(_fleet(), 6300.0))


@pytest.mark.skipif(not (shutil.which("prometheus") and shutil.which("promtool")),
                    reason="needs prometheus and promtool (make system-deps)")  # fmt: skip
def test_through_a_real_prometheus_the_verdicts_are_the_same() -> None:
    r = evaluate_fleet(_fleet(), 6300.0, via="prometheus")
    _check(r)
    assert r["degraded_cycles"] == 0 and r["samples"] > 0


def test_the_table_has_a_row_per_fault_kind_and_per_control() -> None:
    text = table([evaluate_fleet(_fleet(), 6300.0)])
    assert "| pfc_storm (roce_pfc_storm) | 1 | 1/1 | 1/1 |" in text
    assert "| congested_phase, one unit's all-to-all (control) | 1 |" in text
    assert text.splitlines()[-1].endswith("| 0 | 0 |")


def test_bad_arguments_are_refused_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--nodes", "12"]) == 2
    assert "multiple of 8" in capsys.readouterr().err


def test_a_leaf_finding_during_a_units_all_to_all_counts_against_that_control() -> None:
    from gpuwarden.lab.evaluation_metrics import Episode
    from gpuwarden.lab.roce_eval import score

    fleet = RoceFleet(16)
    fleet.inject("congested_phase", 60.0, 600.0, units=(1,))
    while fleet.t < 700:
        fleet.step_frame()
    ep = Episode("su1-rail0", "switch=su1-rail0", "roce_fabric_congestion", "roce", 120.0, 300.0,
                 {"notify"})  # fmt: skip
    got = score([ep], fleet.truth(), fleet)
    assert got["controls"][0]["findings"] == 1 and got["controls"][0]["drains"] == 0
    assert got["stray"] == []
