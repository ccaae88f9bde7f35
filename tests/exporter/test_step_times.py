"""Step times from the training side to the exporter: ``checkpoint.publish_step`` writes,
``--step-dir`` serves ``gpuwarden_job_step_seconds`` labelled like the job map."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.collectors.steps import StepsCollector
from exporter.sources.jobmap import DirJobMap
from exporter.sources.protocols import GpuIdentity
from exporter.sources.steps import DirSteps
from remediation import checkpoint

GPUS = {f"k{i}": GpuIdentity(str(i), f"GPU-{i:04d}", f"0000:{i:02x}:00.0") for i in range(8)}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    checkpoint.reset()


def collector(steps: Path, jobs: Path | None = None, now: float = 1_000.0) -> StepsCollector:
    owner = DirJobMap(jobs) if jobs else None
    return StepsCollector(DirSteps(steps, clock=lambda: now), lambda: GPUS, "n1", owner)


def test_a_rank_publishes_the_mean_step_time_every_few_seconds_and_the_exporter_serves_it(
    tmp_path: Path,
) -> None:
    kw = {"step_dir": str(tmp_path), "job": "77", "gpu": "3", "every_s": 10.0}
    assert checkpoint.publish_step(1.0, now=990.0, **kw) is not None  # the first: at once
    assert checkpoint.publish_step(1.2, now=995.0, **kw) is None  # within every_s: kept
    path = checkpoint.publish_step(1.4, now=1000.0, **kw)
    assert path == tmp_path / "77.gpu3"
    assert json.loads(path.read_text())["step_seconds"] == pytest.approx(1.3)
    (sample,) = collector(tmp_path).collect()
    assert sample.metric is c.JOB_STEP_SECONDS and sample.value == pytest.approx(1.3)
    assert sample.labels == {"node": "n1", "gpu": "3", "uuid": "GPU-0003", "job_id": "77"}


def test_the_rank_gpu_comes_from_cuda_visible_devices_and_a_uuid_is_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "88")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-0005")
    checkpoint.publish_step(2.0, step_dir=str(tmp_path), now=1000.0)
    (sample,) = collector(tmp_path).collect()
    assert sample.label_values[1:] == ("5", "GPU-0005", "88")


def test_stale_files_leftovers_of_other_jobs_and_garbage_are_not_served(tmp_path: Path) -> None:
    steps, jobs = tmp_path / "steps", tmp_path / "jobs"
    jobs.mkdir()
    (jobs / "0").write_text("77\n")
    (jobs / "1").write_text("99\n")
    checkpoint.publish_step(1.0, step_dir=str(steps), job="77", gpu="0", now=1000.0)
    checkpoint.publish_step(
        1.0, step_dir=str(steps), job="77", gpu="1", now=1000.0
    )  # GPU 1: job 99
    checkpoint.publish_step(1.0, step_dir=str(steps), job="77", gpu="2", now=500.0)  # stale
    (steps / "66.gpu4").write_text("{not json")
    col = collector(steps, jobs)
    assert [s.labels["gpu"] for s in col.collect()] == ["0"]
    assert col.read_errors.counts == {"steps/66.gpu4": 1}


def test_a_missing_or_unwritable_step_dir_never_breaks_the_training_job(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert checkpoint.publish_step(1.0, step_dir=str(blocker / "d"), job="1", gpu="0") is None
    assert collector(tmp_path / "absent").collect() == []
    with pytest.raises(ValueError, match="step seconds"):
        checkpoint.publish_step(-1.0, job="1", gpu="0")
