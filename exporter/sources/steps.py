"""Step times the training side publishes: one small JSON file per (job, GPU) in a directory.

Sits at the exporter's edge, read once per cycle by
:class:`exporter.collectors.steps.StepsCollector`. The writer is
``remediation.checkpoint.publish_step`` inside the job (stdlib only): it writes
``<dir>/<job>.gpu<index or UUID>`` atomically (temp file starting with ``.``, then rename),
with ``{"job", "gpu", "step_seconds", "steps", "time"}``. A file older than ``max_age_s``
(a finished or hung job) is not reported; an unreadable or malformed one costs a read error.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from exporter.collectors.base import ReadErrors
from exporter.sources.jobmap import valid_job_id


@dataclass(frozen=True)
class StepReport:
    job: str
    gpu: str  # NVML index, or a UUID the collector resolves
    seconds: float
    time: float


class StepSource(Protocol):
    """Fresh step reports of this node (``DirSteps``; the simulator has its own)."""

    read_errors: ReadErrors

    def reports(self) -> list[StepReport]: ...


class DirSteps:
    """The fresh step reports in ``directory`` (``--step-dir``)."""

    def __init__(
        self,
        directory: str | Path,
        max_age_s: float = 120.0,
        clock: Callable[[], float] = time.time,
        read_errors: ReadErrors | None = None,
    ) -> None:
        self.directory, self.max_age_s, self.clock = Path(directory), max_age_s, clock
        self.read_errors = read_errors if read_errors is not None else ReadErrors()

    def reports(self) -> list[StepReport]:
        try:
            names = sorted(os.listdir(self.directory))
        except FileNotFoundError:  # no job has published since boot
            return []
        except OSError:
            self.read_errors.add("step_dir")
            return []
        now = self.clock()
        out = []
        for name in names:
            if name.startswith(".") or ".gpu" not in name:
                continue
            r = self._read(name)
            if r is not None and now - r.time <= self.max_age_s:
                out.append(r)
        return out

    def _read(self, name: str) -> StepReport | None:
        try:
            doc = json.loads((self.directory / name).read_bytes())
            r = StepReport(str(doc["job"]), str(doc["gpu"]), float(doc["step_seconds"]),
                           float(doc["time"]))  # fmt: skip
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError):
            self.read_errors.add(f"steps/{name}")
            return None
        if not valid_job_id(r.job) or not (math.isfinite(r.seconds) and r.seconds >= 0):
            self.read_errors.add(f"steps/{name}")
            return None
        return r
