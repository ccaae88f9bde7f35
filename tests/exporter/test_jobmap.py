"""DirJobMap reads the prolog's files; JobsCollector turns them into allocation series."""

from __future__ import annotations

from collections.abc import Mapping

from exporter.catalog import GPU_ALLOCATION_INFO
from exporter.collectors.jobs import JobsCollector
from exporter.exposition import render
from exporter.sources.jobmap import DictJobMap, DirJobMap
from exporter.sources.protocols import GpuIdentity, JobMap
from tests.realcomp import promtool

GPUS = {
    "0000:3b:00": GpuIdentity("0", "GPU-aaaa", "00000000:3B:00.0", "NVIDIA H100 80GB HBM3"),
    "0000:5d:00": GpuIdentity("1", "GPU-bbbb", "00000000:5D:00.0", "NVIDIA H100 80GB HBM3"),
}


def lookup() -> Mapping[str, GpuIdentity]:
    return GPUS


def write(directory, **files: str | bytes) -> None:
    directory.mkdir(exist_ok=True)
    for name, content in files.items():
        path = directory / name.lstrip("_")
        path.write_bytes(content if isinstance(content, bytes) else content.encode())


def test_dir_job_map_reads_one_job_id_per_gpu_index_file(tmp_path):
    write(tmp_path, _0="4242\n", _3="  77_3 \n")
    job_map: JobMap = DirJobMap(tmp_path)
    assert job_map.allocations() == {"0": "4242", "3": "77_3"}
    assert job_map.scheduler == "slurm"


def test_dir_job_map_ignores_temp_files_and_names_that_are_not_indices(tmp_path):
    write(tmp_path, _1="5\n", **{".1.5.123": "5\n", "README": "x", "1.swp": "5", "١": "5"})
    job_map = DirJobMap(tmp_path)
    assert job_map.allocations() == {"1": "5"}
    assert job_map.read_errors.counts == {}


def test_dir_job_map_skips_and_counts_empty_garbage_and_unreadable_files(tmp_path):
    write(tmp_path, _0="", _1=b"\xff\x00\x01", _2="a b\n", _3="x" * 65, _4="9\n")
    (tmp_path / "5").mkdir()  # unreadable: a directory where a file should be
    job_map = DirJobMap(tmp_path)
    assert job_map.allocations() == {"4": "9"}
    assert job_map.read_errors.counts == {f"job_map/{i}": 1 for i in "01235"}


def test_dir_job_map_with_no_directory_means_no_jobs_and_no_error(tmp_path):
    job_map = DirJobMap(tmp_path / "never-created")
    assert job_map.allocations() == {}
    assert job_map.read_errors.counts == {}


def test_dir_job_map_that_is_not_a_directory_is_counted(tmp_path):
    (tmp_path / "jobs").write_text("oops")
    job_map = DirJobMap(tmp_path / "jobs")
    assert job_map.allocations() == {}
    assert job_map.read_errors.counts == {"job_map_dir": 1}


def test_jobs_collector_emits_one_allocation_series_per_allocated_gpu_with_its_uuid():
    jobs = JobsCollector(DictJobMap({"1": "4242", "0": "4242", "7": "99"}), lookup, "n1")
    samples = jobs.collect()
    assert [s.metric for s in samples] == [GPU_ALLOCATION_INFO] * 3
    assert [(s.labels, s.value) for s in samples] == [
        ({"node": "n1", "gpu": g, "uuid": u, "job_id": j, "scheduler": "slurm"}, 1.0)
        for g, u, j in (("0", "GPU-aaaa", "4242"), ("1", "GPU-bbbb", "4242"), ("7", "", "99"))
    ]
    assert jobs.name == "jobs"


def test_jobs_collector_with_no_allocations_emits_nothing():
    assert JobsCollector(DictJobMap(), lookup, "n1").collect() == []


def test_jobs_collector_keeps_the_job_when_the_gpu_lookup_fails_and_counts_it():
    def broken() -> Mapping[str, GpuIdentity]:
        raise RuntimeError("NVML not initialised")

    jobs = JobsCollector(DictJobMap({"0": "1"}, scheduler="kubernetes"), broken, "n1")
    [sample] = jobs.collect()
    assert sample.labels == {
        "node": "n1",
        "gpu": "0",
        "uuid": "",
        "job_id": "1",
        "scheduler": "kubernetes",
    }
    assert jobs.read_errors.counts == {"gpu_lookup": 1}


def test_jobs_collector_reports_the_dir_job_maps_read_errors_as_its_own(tmp_path):
    write(tmp_path, _0="\n")
    job_map = DirJobMap(tmp_path)
    jobs = JobsCollector(job_map, lookup, "n1")
    assert jobs.collect() == []
    assert jobs.read_errors is job_map.read_errors
    assert jobs.read_errors.counts == {"job_map/0": 1}


def test_rendered_allocation_series_pass_promtool_check_metrics():
    body = render(JobsCollector(DictJobMap({"0": "4242", "1": "77"}), lookup, "n1").collect())
    result = promtool("check", "metrics", stdin=body)
    assert result.returncode == 0, result.stdout + result.stderr
    assert body.count(GPU_ALLOCATION_INFO.name.encode() + b"{") == 2
