"""The analyzer-prometheus benchmark's same-run baseline: the ratio and the findings check it
prints (issue 33 item 5: the cycle cost against main, measured in the same run)."""

from __future__ import annotations

from typing import Any

from benchmarks.bench_analyzer_prometheus import _against, _summary


def _run(cpus: list[float], verdicts: list[list[list[Any]]]) -> dict[str, Any]:
    return {
        "cold_wall": 1.0, "cold_cpu": 1.0, "cold_mb": 1.0, "walls": [c + 1 for c in cpus],
        "cpus": cpus, "engines": [0.1] * len(cpus), "engine_cpus": [0.1] * len(cpus),
        "reads": [1e6] * len(cpus), "verdicts": verdicts, "findings": 1, "kinds": ["x"],
        "missing": [], "series": 10, "slowest": [], "rss": 100.0,
    }  # fmt: skip


SAME = [[["n1", "gpu=0", "xid_fatal", "critical", "drain", "xid", 1.0]]] * 2


def test_cpu_is_the_median_over_every_cycle_of_every_round_and_the_rounds_range_is_kept():
    s = _summary([_run([1.0, 3.0], SAME), _run([2.0, 2.5], SAME)])
    assert s["cpu"] == 2.25
    assert s["cpu_range"] == (2.0, 2.25)


def test_the_ratio_is_this_tree_over_the_baseline_and_agreeing_cycles_are_counted():
    this = _summary([_run([1.0, 1.0], SAME)])
    base = _summary([_run([2.0, 2.0], SAME)])
    rows = {r["name"]: r for r in _against(1024, this, base, "058a8fbd")}
    assert rows["prom_1024_cycle_cpu_vs_baseline"]["value"] == 0.5
    assert rows["prom_1024_same_findings"]["value"] == 4
    assert rows["prom_1024_same_findings"]["unit"] == "/4"


def test_a_cycle_whose_findings_differ_from_the_baseline_is_not_counted_as_the_same():
    other = [SAME[0], [["n2", "gpu=1", "xid_fatal", "critical", "drain", "xid", 1.0]]]
    rows = {r["name"]: r for r in _against(1024, _summary([_run([1.0, 1.0], SAME)]),
                                            _summary([_run([1.0, 1.0], other)]), "abc")}  # fmt: skip
    assert rows["prom_1024_same_findings"]["value"] == 3
