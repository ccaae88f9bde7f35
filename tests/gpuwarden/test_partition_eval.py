"""``gpuwarden evaluate-partitions``: a partitioned fleet (MIG H100/A100, CPX/DPX MI300X) with
faults on instances and under partitions, scored per kind; the faults are found on their
physical GPU (a stalled instance on itself), nothing else on the partitioned nodes is."""

from __future__ import annotations

import pytest

from gpuwarden.lab import partition_eval as pe


def test_every_fault_of_a_short_run_is_found_where_it_belongs_and_nothing_else_is() -> None:
    r = pe.run_seed(1, 16, 3 * 3600.0)
    assert {f["kind"] for f in r["faults"]} == set(pe.KINDS)
    missed = [f for f in r["faults"] if not (f["found"] and f["attributed"])]
    assert missed == []
    assert r["stray"] == [] and r["false_drains"] == 0
    stalls = [f for f in r["faults"] if f["kind"] == "instance_stall"]
    assert all(f["ttd_s"] < 400 for f in stalls)


def test_the_fleet_mixes_partition_layouts_of_both_vendors_beside_training_nodes() -> None:
    f = pe.partitioned_fleet(8, 0)
    modes: dict[str, set[str]] = {f.sku_of[x.node]: set() for x in f.instances}
    for x in f.instances:
        modes[f.sku_of[x.node]].add(x.profile)
    assert modes == {"h100": {"1g.10gb", "3g.40gb", "7g.80gb"}, "a100": {"1g.10gb"},
                     "mi300x": {"cpx", "dpx"}}  # fmt: skip
    assert sorted(set(range(8)) - set(f.layouts)) == [6, 7]  # the training nodes


def test_the_command_prints_its_table_and_refuses_a_fleet_it_cannot_lay_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert pe.main(["--seeds", "1", "--nodes", "8", "--hours", "1"]) in (0, 1)
    out = capsys.readouterr().out
    assert "| mig_xid |" in out or "| amd_hbm_uncorrectable |" in out
    assert pe.main(["--nodes", "12"]) == 2
