"""Job maps: which job holds which GPU on this node, as the scheduler says (a ``JobMap``).

Sits at the exporter's edge, read once per cycle by
:class:`exporter.collectors.jobs.JobsCollector`, which turns it into one
``catalog.GPU_ALLOCATION_INFO`` series per allocated GPU (a join target, instead of a
``job_id`` label on every series, which would multiply cardinality with every job).

Slurm: :class:`DirJobMap` reads ``--job-map-dir``, written by ``deploy/slurm/prolog.sh`` and
removed by ``deploy/slurm/epilog.sh``: one file per GPU index, named by the index, holding
the job id. The prolog writes a temp file and renames it, so a reader sees the old content
or the new, never half; temp files start with ``.`` and are ignored here.

Kubernetes attribution is not a job map: :class:`exporter.collectors.pods.PodsCollector`
reads the kubelet pod-resources API (device plugin and DRA devices) into
``catalog.GPU_POD_INFO``, and :class:`exporter.collectors.gpu_processes.GpuProcessesCollector`
joins NVML's processes to pods (docs/attribution.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from exporter.collectors.base import ReadErrors

MAX_JOB_ID = 64


def valid_job_id(text: str) -> bool:
    """A job id is one short printable token: Slurm's are digits, with ``_``/``+`` at most."""
    return 0 < len(text) <= MAX_JOB_ID and text.isprintable() and not any(c.isspace() for c in text)


class DirJobMap:
    """GPU index -> job id from a directory of one-line files (Slurm prolog/epilog)."""

    scheduler = "slurm"

    def __init__(self, directory: str | Path, read_errors: ReadErrors | None = None) -> None:
        self.directory = Path(directory)
        self.read_errors = read_errors if read_errors is not None else ReadErrors()

    def allocations(self) -> dict[str, str]:
        try:
            names = os.listdir(self.directory)
        except FileNotFoundError:  # no job has run since boot (/run is a tmpfs)
            return {}
        except OSError:
            self.read_errors.add("job_map_dir")
            return {}
        out: dict[str, str] = {}
        for name in names:
            if not name.isascii() or not name.isdigit():  # temp files, editor droppings
                continue
            job = self._read(name)
            if job is not None:
                out[name] = job
        return out

    def _read(self, name: str) -> str | None:
        try:
            raw = (self.directory / name).read_bytes()
        except FileNotFoundError:  # the epilog removed it since the listing
            return None
        except OSError:
            self.read_errors.add(f"job_map/{name}")
            return None
        job = raw.decode("utf-8", errors="replace").strip()
        if not valid_job_id(job):
            self.read_errors.add(f"job_map/{name}")
            return None
        return job


class DictJobMap:
    """The fake: a settable GPU index -> job id map (tests, the fleet simulator)."""

    def __init__(self, allocations: dict[str, str] | None = None, scheduler: str = "slurm") -> None:
        self.jobs: dict[str, str] = dict(allocations or {})
        self.scheduler = scheduler

    def allocations(self) -> dict[str, str]:
        return dict(self.jobs)
