"""``gpuwarden evaluate --replicas``: one analyzer against replicas on the same windows, the
table of issue 33's "same verdicts", and that the comparison catches a replica that judges
wrong (a comparison that cannot fail would prove nothing)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest

from gpuwarden.lab import replica_eval
from gpuwarden.lab.evaluate import main

HORIZON = 0.6 * 3600.0  # 72 cycles of 30 s


def _row(**over: Any) -> dict[str, Any]:
    scores = {"detected": 3, "recall": 1.0, "precision": 1.0, "f1": 1.0, "ttd_median_s": 15.0,
              "ttd_p95_s": 30.0, "false_drains": 0}  # fmt: skip
    row = {"fleet": "mixed", "seed": 1, "nodes": 32, "hardware": True, "replicas": 2,
           "cycles": 72, "restart_at": 36, "faults": 3, "single": 40, "sharded": 40,
           "distinct": 5, "differing": 0, "diff": {}, "restart_differing": 0,
           "restart_diff": {}, "killed_differing": 2, "killed_diff": {"missing xid_fatal": 2},
           "adopted": 7, "fresh": 40, "restart_nodes": 16, "moved": 7, "straddling_jobs": 2,
           "straddled": 1,
           "largest_unit": 16, "units": 2, "split": 72,
           "scores": {"single": scores, "replicas": dict(scores, f1=float("nan"))}}  # fmt: skip
    return row | over


def test_two_replicas_find_what_one_analyzer_finds_on_a_small_fleet_cycle_by_cycle() -> None:
    # 64 mixed nodes: units that the two replicas share, and that move between them as jobs
    # join and split them (a homogeneous fleet this small is one or two units on one replica)
    row = replica_eval.run_fleet("mixed", 0, 2, 64, HORIZON)
    assert row["cycles"] == 72 and row["restart_at"] == 36
    assert row["split"] > 0 and row["moved"] > 0  # the replicas did share the fleet
    assert row["single"] > 0  # findings to compare
    assert (row["sharded"], row["differing"], row["diff"]) == (row["single"], 0, {})
    assert row["scores"]["replicas"] == row["scores"]["single"]
    assert row["straddled"] <= row["distinct"]
    assert row["restart_nodes"] > 0  # the restarted replica had nodes to go on with


def test_a_replica_that_judges_none_of_its_units_shows_as_missing_findings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = replica_eval.assign

    def lose_r0(units: Iterable[str], replicas: Sequence[str]) -> dict[str, list[str]]:
        got = real(units, replicas)
        return got | {"r-0": []}  # r-0's units judged by nobody

    monkeypatch.setattr(replica_eval, "assign", lose_r0)
    row = replica_eval.run_fleet("homogeneous", 0, 1, 32, HORIZON)
    assert row["sharded"] == 0 < row["single"]
    assert row["differing"] > 0
    assert all(k.startswith("missing ") for k in row["diff"])
    assert row["scores"]["replicas"]["detected"] == 0 < row["scores"]["single"]["detected"]


def test_the_table_says_identical_only_when_no_cycle_differs() -> None:
    same = replica_eval.table([_row()])
    assert "identical findings in every cycle of every run" in same
    assert "| mixed | 1 | 3 | 72 | 40 | 40 | **0** | 7 | 2 (16) | 72 | 2 | 1 |" in same
    assert (
        "3 / 1.000 / 30 s / 0 | 3 / - / 30 s / 0 | 0 (at cycle 36, 16 nodes) | 2 |" in same
    )  # NaN: "-"
    assert "restarted:" not in same
    assert (
        "with the busiest replica killed mid-cycle: mixed seed 1: {'missing xid_fatal': 2}" in same
    )
    bad = replica_eval.table([_row(), _row(seed=2, differing=3, diff={"extra straggler": 2}),
                              _row(seed=3, restart_differing=1,
                                   restart_diff={"extra marginal": 1})])  # fmt: skip
    assert "identical" not in bad
    assert "DIFFERENT: mixed seed 2: {'extra straggler': 2}" in bad
    assert "with the busiest replica restarted: mixed seed 3: {'extra marginal': 1}" in bad
    assert replica_eval.table([]) == "no runs"


def test_a_fleet_or_a_replica_count_it_does_not_know_is_refused() -> None:
    with pytest.raises(ValueError, match="fleet must be one of"):
        replica_eval.run_fleet("mi300x-only", 0, 2, 32, HORIZON)
    with pytest.raises(ValueError, match="replicas must be >= 1"):
        replica_eval.Sharded(replicas=0, restart_at=1)


def test_the_cli_refuses_replicas_through_prometheus(tmp_path: Path) -> None:
    argv = ["--replicas", "2", "--via", "prometheus", "--out", str(tmp_path)]
    assert main(argv) == 2


def test_the_cli_writes_the_table_for_every_fleet_and_its_exit_says_whether_any_differ(
    tmp_path: Path,
) -> None:
    argv = ["--replicas", "2", "--nodes", "8", "--hours", "0.51", "--seeds", "1",
            "--no-fault-free", "--out", str(tmp_path)]  # fmt: skip
    rc = main(argv)
    text = (tmp_path / "evaluation-replicas.md").read_text()
    for fleet in replica_eval.FLEETS:
        assert f"| {fleet} | 0 |" in text
    assert rc == (1 if "DIFFERENT:" in text else 0)
    assert ("identical findings in every cycle of every run" in text) == (rc == 0)
