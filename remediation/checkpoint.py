"""The job side of checkpoint-then-restart: a tiny, dependency-free helper (stdlib only).

Copy or import it from a training script; it does not import anything else from gpuwarden.

    from remediation import checkpoint          # or: import checkpoint (a copied file)
    checkpoint.install()                        # once, at start-up
    for step in range(start, steps):
        train_one_step()
        if checkpoint.checkpoint_requested():   # at a safe point
            save(step)
            checkpoint.acknowledge(step=step)   # gpuwarden now moves the job

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


def reset() -> None:
    """Forget a request (after the job restarted in the same process, e.g. in tests)."""
    global _requested
    _requested = False
