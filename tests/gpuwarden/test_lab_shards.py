"""Splitting a fleet's OpenMetrics history across Prometheus shards (gpuwarden.lab.shards), and
the benchmark's comparison of two evaluations (benchmarks.bench_distributed.differences)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from benchmarks.bench_distributed import differences
from exporter import catalog as c
from gpuwarden.lab.shards import global_config, round_robin, split_openmetrics, stages

Key = tuple[tuple[str, str], ...]


def _m(text: str) -> str:
    """The catalogue's names in place of @UP@ and @ALLOC@."""
    return text.replace("@UP@", c.GPU_UP.name).replace("@ALLOC@", c.GPU_ALLOCATION_INFO.name)


HISTORY_TEMPLATE = """\
# TYPE @UP@ gauge
@UP@{node="a",gpu="0"} 1 100.000
@UP@{node="b",gpu="0"} 1 100.000
@UP@{node="c",gpu="0"} 0 100.000
# TYPE @ALLOC@ gauge
@ALLOC@{peer_node="c",node="b",gpu="0",job_id="7"} 1 100.000
# EOF
"""
HISTORY = _m(HISTORY_TEMPLATE)


def test_round_robin_puts_node_k_on_shard_k_mod_s() -> None:
    assert round_robin(["a", "b", "c", "d", "e"], 2) == {"a": 0, "b": 1, "c": 0, "d": 1, "e": 0}
    with pytest.raises(ValueError, match="at least 1"):
        round_robin(["a"], 0)


def test_each_sample_goes_to_its_nodes_shard_labelled_and_every_file_keeps_the_type_lines(
    tmp_path: Path,
) -> None:
    src = tmp_path / "fleet.om"
    src.write_text(HISTORY)
    outs = [tmp_path / "s0.om", tmp_path / "s1.om"]
    assert split_openmetrics(src, outs, {"a": 0, "b": 1, "c": 0}) == [2, 2]
    s0, s1 = (p.read_text().splitlines() for p in outs)
    assert s0 == [
        _m(x)
        for x in [
            "# TYPE @UP@ gauge",
            '@UP@{gpuwarden_shard="0",node="a",gpu="0"} 1 100.000',
            '@UP@{gpuwarden_shard="0",node="c",gpu="0"} 0 100.000',
            "# TYPE @ALLOC@ gauge",
            "# EOF",
        ]
    ]
    # routed by node, not by a label that merely ends in "node"
    assert s1[-2] == _m('@ALLOC@{gpuwarden_shard="1",peer_node="c",'
                      'node="b",gpu="0",job_id="7"} 1 100.000')  # fmt: skip


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ('@UP@{gpu="0"} 1 100.000', "without a node label"),
        ("@UP@ 1 100.000", "without a node label"),
        ('@UP@{node="z",gpu="0"} 1 100.000', "'z' is in no shard"),
    ],
)
def test_a_sample_that_belongs_to_no_shard_is_an_error_and_leaves_no_partial_files(
    tmp_path: Path, line: str, error: str
) -> None:
    src = tmp_path / "fleet.om"
    src.write_text(HISTORY.replace("# EOF\n", _m(line) + "\n# EOF\n"))
    outs = [tmp_path / "s0.om", tmp_path / "s1.om"]
    with pytest.raises(ValueError, match=error):
        split_openmetrics(src, outs, {"a": 0, "b": 1, "c": 0})
    assert not any(p.exists() for p in outs)


def test_a_shard_map_naming_a_shard_without_a_file_is_refused(tmp_path: Path) -> None:
    src = tmp_path / "fleet.om"
    src.write_text(HISTORY)
    with pytest.raises(ValueError, match=r"shards \[2\]"):
        split_openmetrics(src, [tmp_path / "s0.om"], {"a": 0, "b": 2})


def test_the_global_prometheus_reads_every_shard_including_recent_samples() -> None:
    cfg = yaml.safe_load(global_config(["http://s0:9090/", "http://s1:9090"]))
    assert cfg["scrape_configs"] == []
    assert [(r["url"], r["read_recent"]) for r in cfg["remote_read"]] == [
        ("http://s0:9090/api/v1/read", True),
        ("http://s1:9090/api/v1/read", True),
    ]


def test_the_benchmark_reports_a_different_series_set_and_a_value_off_by_more_than_1e9() -> None:
    rules = [("r1", "e1"), ("r2", "e2"), ("r3", "e3")]
    k1: Key = (("node", "a"),)
    k2: Key = (("node", "b"),)
    a = [{k1: 1.0}, {k1: 1e6, k2: math.nan}, {k1: 2.0}]
    same = [{k1: 1.0}, {k1: 1e6 * (1 + 1e-12), k2: math.nan}, {k1: 2.0}]
    assert differences(rules, a, same) == []
    b = [{k1: 1.0, k2: 3.0}, {k1: 1e6, k2: math.nan}, {k1: 2.0 + 1e-6}]
    got = differences(rules, a, b)
    assert len(got) == 2 and got[0].startswith("r1: 1 series differ") and got[1].startswith("r3")


def test_a_group_reading_another_groups_record_is_evaluated_in_a_later_stage() -> None:
    stats = ("gpuwarden-jobstats-x", [("gpuwarden_job:x:median", "quantile by (job_id) (0.5, x)")])
    z = ("gpuwarden-domains-shard-0", [("f:x:job_z", "x - on (job_id) gpuwarden_job:x:median")])
    alone = ("other", [("f:y", "y")])
    assert stages([z, stats, alone]) == [[stats, alone], [z]]
    loop = ("loop", [("a", "f:x:job_z")])
    z2 = (z[0], [("f:x:job_z", "a")])
    with pytest.raises(ValueError, match="read each other's records"):
        stages([loop, z2])
