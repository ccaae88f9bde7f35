"""Lustre client (llite) stats for the probed checkpoint mounts, old and new stats layouts
(fixtures/proc/lustre-README.md says where the formats come from)."""

from __future__ import annotations

import shutil
from pathlib import Path

from exporter.catalog import LUSTRE_BYTES, LUSTRE_LATENCY, LUSTRE_OPS
from exporter.collectors.storage import StorageCollector
from exporter.sources.lustre import lustre_mounts, parse_llite_stats, read_lustre
from exporter.sources.storage_probe import ProbeResult

PROC = Path(__file__).resolve().parents[2] / "fixtures" / "proc"
NEW, OLD = PROC / "lustre-2.15", PROC / "lustre-2.10"


class Probed:
    """The collector's view of a prober that has probed ``mounts`` once, all fine."""

    def __init__(self, *mounts: str) -> None:
        self.mounts = mounts

    def start(self) -> None: ...

    def last(self) -> dict[str, ProbeResult]:
        return {m: ProbeResult(m, "ok", {"fsync": 0.003}) for m in self.mounts}

    def counts(self) -> dict[tuple[str, str], int]:
        return {(m, "ok"): 1 for m in self.mounts}


def by_labels(samples, metric):  # type: ignore[no-untyped-def]
    return {s.label_values[1:]: s.value for s in samples if s.metric is metric}


def test_a_stats_line_gives_count_unit_and_sum_and_odd_lines_are_skipped() -> None:
    text = (NEW / "proc/fs/lustre/llite/scratch-ffff9a0c3c1d5800/stats").read_text()
    got = parse_llite_stats(text + "garbage line\nopen x samples [usec]\n")
    assert (got["fsync"].count, got["fsync"].unit, got["fsync"].total) == (1, "usec", 3342.0)
    assert got["write_bytes"].total == 2097180 and got["ioctl"].total == 0
    assert "snapshot_time" not in got


def test_the_mount_table_names_each_lustre_file_system_and_its_mount_point() -> None:
    text = (NEW / "proc/self/mounts").read_text()
    assert lustre_mounts(text) == {"scratch": "/lustre"}


def test_a_probed_mount_inside_a_lustre_file_system_reports_its_client_stats() -> None:
    got = {s.op: s for s in read_lustre(str(NEW), ["/lustre/ckpt", "/home"])}
    assert set(got) == {"read", "write", "open", "close", "fsync", "getattr", "statfs"}
    assert {s.mount for s in got.values()} == {"/lustre/ckpt"}
    assert (got["write"].ops, got["write"].bytes, got["write"].latency_s) == (3, 2097180, 0.01746)
    assert got["fsync"].latency_s == 0.003342


def test_an_older_client_has_counts_and_bytes_but_no_latency() -> None:
    got = {s.op: s for s in read_lustre(str(OLD), ["/mnt/lustre"])}
    assert got["read"].bytes == 55488794 and got["fsync"].ops == 963
    assert all(s.latency_s is None for s in got.values())


def test_stats_under_debugfs_are_found_too(tmp_path: Path) -> None:
    shutil.copytree(NEW / "proc/self", tmp_path / "proc/self")
    shutil.copytree(NEW / "proc/fs/lustre/llite", tmp_path / "sys/kernel/debug/lustre/llite")
    assert len(read_lustre(str(tmp_path), ["/lustre"])) == 7


def test_no_probed_mount_on_lustre_reads_nothing() -> None:
    assert read_lustre(str(NEW), ["/nfs/ckpt", "/lustre2"]) == []


def test_the_collector_exports_ops_bytes_and_latency_per_mount() -> None:
    c = StorageCollector(Probed("/lustre"), "n1", mountstats=lambda: "",
                         lustre=lambda m: read_lustre(str(NEW), m))  # fmt: skip
    s = c.collect()
    assert by_labels(s, LUSTRE_OPS)[("/lustre", "getattr")] == 12
    assert by_labels(s, LUSTRE_BYTES) == {
        ("/lustre", "read"): 2101248,
        ("/lustre", "write"): 2097180,
    }
    assert by_labels(s, LUSTRE_LATENCY)[("/lustre", "open")] == 0.000213


def test_an_unreadable_mount_table_costs_only_the_lustre_series() -> None:
    def boom(mounts):  # type: ignore[no-untyped-def]
        raise PermissionError("denied")

    c = StorageCollector(Probed("/lustre"), "n1", mountstats=lambda: "", lustre=boom)
    s = c.collect()
    assert by_labels(s, LUSTRE_OPS) == {} and len(s) > 0  # the probe series stay
    assert dict(c.read_errors.counts) == {"lustre": 1}
