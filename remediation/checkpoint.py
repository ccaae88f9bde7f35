"""The job side of checkpoint-then-restart: a tiny, dependency-free helper (stdlib only).

Copy or import it from a training script; it does not import anything else from gpuwarden.

    from remediation import checkpoint          # or: import checkpoint (a copied file)
    checkpoint.install()                        # once, at start-up
    for step in range(start, steps):
        train_one_step()
        if checkpoint.checkpoint_requested():   # at a safe point
            save(step)
            checkpoint.acknowledge(step=step)   # gpuwarden now moves the job

Step times for straggler detection (two lines; the analyzer then compares this rank's compute
time with its job's other ranks, a signal that survives collective waits):

    from remediation import checkpoint
    checkpoint.publish_step(compute_s)          # each step: this rank's compute time (s),
                                                # measured before it waits at the collective

It writes (atomically, at most every ``every_s`` seconds, the mean since the last write)
``<GPUWARDEN_STEP_DIR>/<job>.gpu<index>`` (default dir ``/run/gpuwarden/steps``), which the
node's exporter (``--step-dir``) serves as ``gpuwarden_job_step_seconds{node,gpu,uuid,job_id}``,
labelled like ``gpuwarden_gpu_allocation_info``. The GPU is ``gpu=`` or ``GPUWARDEN_GPU``,
else a single index or UUID in ``CUDA_VISIBLE_DEVICES``, else ``LOCAL_RANK``/``SLURM_LOCALID``.

How the request arrives: on Slurm, gpuwarden sends SIGUSR1 (``scancel --signal=USR1 --full``);
on Kubernetes it sets the pod annotation ``gpuwarden.io/checkpoint-requested``, which the
pod sees through a downward-API volume (``GPUWARDEN_ANNOTATIONS_FILE``, default
``/etc/podinfo/annotations``). The ack is a small JSON file ``<GPUWARDEN_ACK_DIR>/<job>.ack``
on storage gpuwarden can read; ``<job>`` is ``SLURM_JOB_ID``, or ``GPUWARDEN_JOB_ID``
(Kubernetes: ``<namespace>_<pod>``).
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

ANNOTATION = "gpuwarden.io/checkpoint-requested"
_requested = False


def _on_signal(signum: int, frame: Any) -> None:
    global _requested
    _requested = True


def install(signum: int = signal.SIGUSR1) -> None:
    """Install the signal handler (main thread only, as Python requires)."""
    signal.signal(signum, _on_signal)


def _annotation_set(path: str | None) -> bool:
    path = path or os.environ.get("GPUWARDEN_ANNOTATIONS_FILE", "/etc/podinfo/annotations")
    try:
        text = Path(path).read_text()
    except OSError:
        return False
    return any(line.startswith(ANNOTATION + "=") for line in text.splitlines())


def checkpoint_requested(annotations_file: str | None = None) -> bool:
    """True once gpuwarden asked this job to checkpoint (signal or pod annotation)."""
    return _requested or _annotation_set(annotations_file)


def job_id() -> str:
    jid = os.environ.get("GPUWARDEN_JOB_ID") or os.environ.get("SLURM_JOB_ID")
    if not jid:
        raise RuntimeError("no job id: set GPUWARDEN_JOB_ID (Slurm sets SLURM_JOB_ID)")
    return jid


def acknowledge(ack_dir: str | None = None, job: str | None = None, **info: Any) -> Path:
    """Write the ack (atomically) after the checkpoint is saved; returns its path."""
    directory = Path(ack_dir or os.environ.get("GPUWARDEN_ACK_DIR") or ".")
    jid = job or job_id()
    target = directory / f"{jid.replace('/', '_')}.ack"
    tmp = target.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps({"job": jid, "time": time.time(), **info}))
    os.replace(tmp, target)
    return target


STEP_DIR = "/run/gpuwarden/steps"
_steps: dict[str, list[float]] = {}  # file -> [sum of step seconds, steps, last write time]


def _local_gpu() -> str:
    if gpu := os.environ.get("GPUWARDEN_GPU"):
        return gpu
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    if visible and "," not in visible:
        return visible  # one GPU: its index, or its UUID (the exporter resolves it)
    return os.environ.get("LOCAL_RANK") or os.environ.get("SLURM_LOCALID") or "0"


def publish_step(
    seconds: float,
    *,
    step_dir: str | None = None,
    job: str | None = None,
    gpu: str | None = None,
    every_s: float = 10.0,
    now: float | None = None,
) -> Path | None:
    """Record one training step of this rank (``seconds`` of compute, before the collective
    wait); every ``every_s`` seconds write the mean since the last write for the exporter.
    Returns the file's path when it wrote, else None. Never raises on a full or missing
    directory: a training job must not die for its telemetry."""
    if not seconds >= 0:
        raise ValueError(f"step seconds must be >= 0, got {seconds!r}")
    directory = Path(step_dir or os.environ.get("GPUWARDEN_STEP_DIR") or STEP_DIR)
    jid, gid = (job or job_id()).replace("/", "_"), str(gpu or _local_gpu()).replace("/", "_")
    target = directory / f"{jid}.gpu{gid}"
    t = time.time() if now is None else now
    acc = _steps.setdefault(str(target), [0.0, 0.0, -float("inf")])
    acc[0], acc[1] = acc[0] + seconds, acc[1] + 1
    if t - acc[2] < every_s:
        return None
    body = {"job": job or job_id(), "gpu": gid, "step_seconds": acc[0] / acc[1],
            "steps": int(acc[1]), "time": t}  # fmt: skip
    tmp = target.with_name(f".{target.name}.tmp{os.getpid()}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(body))
        os.replace(tmp, target)
    except OSError:
        return None
    _steps[str(target)] = [0.0, 0.0, t]
    return target


def reset() -> None:
    """Forget a request (after the job restarted in the same process, e.g. in tests)."""
    global _requested
    _requested = False
    _steps.clear()
