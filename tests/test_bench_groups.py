"""``python -m benchmarks --only scale`` runs issue 33's three measurements (the sharded
feature groups, the replicas, the events path); a module's own name still runs it alone."""

from __future__ import annotations

from benchmarks.__main__ import GROUPS, _modules


def test_only_scale_runs_the_shards_the_replicas_and_the_events_path() -> None:
    assert _modules(["scale"]) == ["bench_distributed", "bench_eventpath", "bench_scale"]


def test_a_modules_own_name_runs_it_alone_and_a_substring_still_selects() -> None:
    assert _modules(["bench_scale"]) == ["bench_scale"]
    assert _modules(["analyzer-prometheus"]) == ["bench_analyzer_prometheus"]
    assert "bench_scale" in _modules([])


def test_every_grouped_module_exists() -> None:
    every = set(_modules([]))
    for members in GROUPS.values():
        assert set(members) <= every
