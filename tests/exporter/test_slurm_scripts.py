"""The shipped Slurm prolog/epilog, run for real (no PATH, like slurmd) against a temp dir."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

from exporter.sources.jobmap import DirJobMap

SLURM = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
PROLOG = SLURM / "prolog.sh"
EPILOG = SLURM / "epilog.sh"


def run(script: Path, jobs: Path, **env: str) -> subprocess.CompletedProcess[str]:
    # No PATH on purpose: slurmd runs prologs without a search path.
    full = {"GPUWARDEN_JOB_MAP_DIR": str(jobs), **env}
    return subprocess.run([str(script)], env=full, capture_output=True, text=True, timeout=10)


def files(jobs: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(jobs.iterdir())} if jobs.exists() else {}


def test_scripts_are_executable_posix_sh():
    for script in (PROLOG, EPILOG):
        assert os.access(script, os.X_OK), script
        assert script.read_text().startswith("#!/bin/sh\n")
        syntax = subprocess.run(["/bin/sh", "-n", str(script)], capture_output=True, timeout=10)
        assert syntax.returncode == 0, syntax.stderr


def test_prolog_writes_one_world_readable_file_per_gpu_and_dir_job_map_reads_it(tmp_path):
    jobs = tmp_path / "jobs"
    result = run(PROLOG, jobs, SLURM_JOB_ID="4242", SLURM_JOB_GPUS="0,3,7")
    assert (result.returncode, result.stderr) == (0, "")
    assert files(jobs) == {"0": "4242\n", "3": "4242\n", "7": "4242\n"}
    assert all(stat.S_IMODE(p.stat().st_mode) == 0o644 for p in jobs.iterdir())
    job_map = DirJobMap(jobs)
    assert job_map.allocations() == {"0": "4242", "3": "4242", "7": "4242"}
    assert job_map.read_errors.counts == {}


def test_slurm_job_gpus_wins_over_cuda_visible_devices_and_gpu_device_ordinal(tmp_path):
    jobs = tmp_path / "jobs"
    run(PROLOG, jobs, SLURM_JOB_ID="1", SLURM_JOB_GPUS="2", CUDA_VISIBLE_DEVICES="5")
    assert files(jobs) == {"2": "1\n"}


def test_prolog_falls_back_to_cuda_visible_devices_then_gpu_device_ordinal(tmp_path):
    run(
        PROLOG, tmp_path / "a", SLURM_JOB_ID="1", CUDA_VISIBLE_DEVICES="4,5", GPU_DEVICE_ORDINAL="6"
    )
    run(PROLOG, tmp_path / "b", SLURM_JOB_ID="2", GPU_DEVICE_ORDINAL="6")
    assert files(tmp_path / "a") == {"4": "1\n", "5": "1\n"}
    assert files(tmp_path / "b") == {"6": "2\n"}


def test_prolog_skips_gpu_entries_that_are_not_indices_and_says_so(tmp_path):
    jobs = tmp_path / "jobs"
    result = run(PROLOG, jobs, SLURM_JOB_ID="9", CUDA_VISIBLE_DEVICES="GPU-1f2e,1,*,")
    assert result.returncode == 0
    assert files(jobs) == {"1": "9\n"}
    assert "skipping GPU 'GPU-1f2e'" in result.stderr
    assert "skipping GPU '*'" in result.stderr


def test_prolog_of_a_cpu_only_job_writes_nothing(tmp_path):
    result = run(PROLOG, tmp_path / "jobs", SLURM_JOB_ID="9")
    assert (result.returncode, result.stderr) == (0, "")
    assert files(tmp_path / "jobs") == {}


def test_prolog_without_a_job_id_writes_nothing_and_still_exits_zero(tmp_path):
    for bad in ({}, {"SLURM_JOB_ID": ""}, {"SLURM_JOB_ID": "1; rm -rf /"}):
        result = run(PROLOG, tmp_path / "jobs", SLURM_JOB_GPUS="0", **bad)
        assert result.returncode == 0
        assert "no usable SLURM_JOB_ID" in result.stderr
    assert files(tmp_path / "jobs") == {}


def test_prolog_that_cannot_write_never_fails_the_job(tmp_path):
    (tmp_path / "blocker").write_text("a file where the directory should be")
    result = run(PROLOG, tmp_path / "blocker" / "jobs", SLURM_JOB_ID="5", SLURM_JOB_GPUS="0")
    assert result.returncode == 0
    assert "gpuwarden prolog: failed" in result.stderr


def test_prolog_replaces_a_stale_file_and_leaves_no_temp_files(tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("111\n")  # an epilog that never ran
    run(PROLOG, jobs, SLURM_JOB_ID="222", SLURM_JOB_GPUS="0,1")
    assert files(jobs) == {"0": "222\n", "1": "222\n"}


def test_epilog_removes_only_the_files_that_name_its_job(tmp_path):
    jobs = tmp_path / "jobs"
    run(PROLOG, jobs, SLURM_JOB_ID="10", SLURM_JOB_GPUS="0,1")
    run(PROLOG, jobs, SLURM_JOB_ID="11", SLURM_JOB_GPUS="2,3")
    (jobs / "notes").write_text("10\n")
    (jobs / ".4.10.999").write_text("10\n")  # someone else's temp file
    result = run(EPILOG, jobs, SLURM_JOB_ID="10")
    assert (result.returncode, result.stderr) == (0, "")
    assert files(jobs) == {".4.10.999": "10\n", "2": "11\n", "3": "11\n", "notes": "10\n"}
    assert DirJobMap(jobs).allocations() == {"2": "11", "3": "11"}


def test_epilog_does_not_confuse_job_10_with_job_100(tmp_path):
    jobs = tmp_path / "jobs"
    run(PROLOG, jobs, SLURM_JOB_ID="100", SLURM_JOB_GPUS="0")
    run(EPILOG, jobs, SLURM_JOB_ID="10")
    assert files(jobs) == {"0": "100\n"}


def test_epilog_without_a_directory_or_job_id_exits_zero(tmp_path):
    assert run(EPILOG, tmp_path / "missing", SLURM_JOB_ID="1").returncode == 0
    result = run(EPILOG, tmp_path, SLURM_JOB_GPUS="0")
    assert result.returncode == 0
    assert "no usable SLURM_JOB_ID" in result.stderr
