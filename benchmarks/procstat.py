"""A process's CPU seconds from ``/proc/<pid>/stat`` (Linux): what the benchmarks that run
servers (Prometheus, the remediation service, the exporters) charge to each of them."""

from __future__ import annotations

import os
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")


def stat_fields(pid: int) -> list[str]:
    """The fields after the command name (which may hold spaces): ``[0]`` is the state."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a running process."""
    fields = stat_fields(pid)
    return (int(fields[11]) + int(fields[12])) / _TICK
