"""Checkpoint-storage probes never block the exporter; a hung mount reads as hung, once."""

from __future__ import annotations

import time
from multiprocessing.connection import Connection
from pathlib import Path

import pytest

from exporter.catalog import STORAGE_PROBE_UP, STORAGE_PROBES
from exporter.collectors.storage import StorageCollector
from exporter.settings import ExporterSettings
from exporter.sources.mountstats import parse_mountstats
from exporter.sources.storage_probe import StorageProber, probe_once

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "proc" / "mountstats"


def _hang(conn: Connection, mount: str, node: str) -> None:
    time.sleep(30)


def _crash(conn: Connection, mount: str, node: str) -> None:
    raise SystemExit(3)


def values(samples, metric):  # type: ignore[no-untyped-def]
    return {s.label_values[1:]: s.value for s in samples if s.metric is metric}


def test_a_healthy_mount_probes_every_step_and_leaves_no_file(tmp_path: Path) -> None:
    got = probe_once(str(tmp_path), "n1")
    assert got["outcome"] == "ok"
    assert set(got["seconds"]) == {"stat", "write", "fsync", "read"}
    assert list(tmp_path.iterdir()) == []


def test_a_missing_mount_is_an_error_with_the_reason(tmp_path: Path) -> None:
    got = probe_once(str(tmp_path / "gone"), "n1")
    assert got["outcome"] == "error" and "No such file" in got["error"]


def test_the_prober_runs_the_probe_in_a_child_and_reports_ok(tmp_path: Path) -> None:
    p = StorageProber([str(tmp_path)], "n1", timeout=5, interval=10)
    p.run_once()
    assert p.last()[str(tmp_path)].outcome == "ok"


def test_a_hung_mount_is_reported_hung_within_the_timeout_and_never_piles_up_children(
    tmp_path: Path,
) -> None:
    p = StorageProber([str(tmp_path)], "n1", timeout=0.3, interval=10, target=_hang)
    t = time.monotonic()
    p.run_once()
    assert time.monotonic() - t < 3
    r = p.last()[str(tmp_path)]
    assert r.outcome == "hung" and "0.3 s" in r.error


def test_a_probe_process_that_dies_is_an_error(tmp_path: Path) -> None:
    p = StorageProber([str(tmp_path)], "n1", timeout=5, interval=10, target=_crash)
    p.run_once()
    assert p.last()[str(tmp_path)].outcome == "error"


def test_the_collector_counts_each_probe_once_and_reads_only_memory(tmp_path: Path) -> None:
    p = StorageProber([str(tmp_path)], "n1", timeout=5, interval=10)
    c = StorageCollector(p, "n1", mountstats=lambda: "")
    p.start = lambda: None  # type: ignore[method-assign]  # no background loop in this test
    assert c.collect() == []  # not probed yet: no value rather than a guess
    p.run_once()
    first = c.collect()
    again = c.collect()
    assert values(first, STORAGE_PROBE_UP) == {(str(tmp_path),): 1.0}
    assert values(again, STORAGE_PROBES)[(str(tmp_path), "ok")] == 1.0
    p.run_once()
    assert values(c.collect(), STORAGE_PROBES)[(str(tmp_path), "ok")] == 2.0


def test_a_hung_mount_turns_probe_up_to_zero(tmp_path: Path) -> None:
    p = StorageProber([str(tmp_path)], "n1", timeout=0.2, interval=10, target=_hang)
    p.start = lambda: None  # type: ignore[method-assign]
    c = StorageCollector(p, "n1", mountstats=lambda: "")
    p.run_once()
    s = c.collect()
    assert values(s, STORAGE_PROBE_UP) == {(str(tmp_path),): 0.0}
    assert values(s, STORAGE_PROBES)[(str(tmp_path), "hung")] == 1.0


def test_nfs_mountstats_of_the_probed_mount_only() -> None:
    stats = parse_mountstats(FIX.read_text(), ["/mnt/ckpt"])
    by_op = {s.op: s for s in stats}
    assert {s.mount for s in stats} == {"/mnt/ckpt"}
    assert by_op["WRITE"].major_timeouts == 3
    assert by_op["WRITE"].rtt_ms == 96550
    assert by_op["OPEN"].errors == 2


def test_nfs_v3_lines_without_the_errors_field_still_parse() -> None:
    (read,) = parse_mountstats(FIX.read_text(), ["/home"])
    assert (read.op, read.ops, read.errors) == ("READ", 5, 0)


def test_an_unreadable_mountstats_costs_only_its_own_series(tmp_path: Path) -> None:
    def boom() -> str:
        raise PermissionError("denied")

    p = StorageProber([str(tmp_path)], "n1", timeout=5, interval=10)
    p.start = lambda: None  # type: ignore[method-assign]
    p.run_once()
    c = StorageCollector(p, "n1", mountstats=boom)
    assert values(c.collect(), STORAGE_PROBE_UP)
    assert c.read_errors.counts["mountstats"] == 1


@pytest.mark.parametrize(
    ("kw", "msg"),
    [
        ({"storage_mounts": ("mnt/ckpt",)}, "absolute"),
        ({"storage_probe_timeout": 40.0}, "below"),
        ({"storage_probe_timeout": 0.0}, "> 0"),
    ],
)
def test_bad_storage_settings_stop_the_start(kw: dict, msg: str) -> None:  # type: ignore[type-arg]
    with pytest.raises(ValueError, match=msg):
        ExporterSettings(node="n1", **kw)


def test_probes_between_two_collections_are_all_counted(tmp_path: Path) -> None:
    p = StorageProber([str(tmp_path)], "n1", timeout=5, interval=10)
    p.start = lambda: None  # type: ignore[method-assign]
    c = StorageCollector(p, "n1", mountstats=lambda: "")
    p.run_once()
    p.run_once()
    assert values(c.collect(), STORAGE_PROBES)[(str(tmp_path), "ok")] == 2.0
