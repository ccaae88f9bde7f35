"""The IMEX daemon's own status, read through ``nvidia-imex-ctl -q``.

Sits under :class:`exporter.collectors.fabric_services.FabricServicesCollector`, which asks it
only on nodes where ``nvidia-imex.service`` is installed. The seam is :class:`ImexCtl`: the real
one runs ``nvidia-imex-ctl -q`` ("query the status of the IMEX daemon once and return": NVIDIA
IMEX guide, docs.nvidia.com/multi-node-nvlink-systems/imex-guide/cmdservice.html), which prints
``READY`` when the local daemon is ready (NVIDIA's k8s-dra-driver-gpu compute-domain daemon
probes it the same way and accepts exactly ``READY\\n``); anything else, or a failing exit, is
not ready. A unit can be active while its daemon is not ready (its peers unreachable, a bad
nodes file): this is the signal the unit state misses. Output shapes: fixtures/imex/.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

TIMEOUT = 5.0  # seconds: a hung daemon must not stall the collection loop for long
BINARY = "nvidia-imex-ctl"


class ImexCtlMissing(OSError):
    """``nvidia-imex-ctl`` is not installed where the exporter runs (a container image)."""


class ImexCtl(Protocol):
    def query(self) -> str:
        """``nvidia-imex-ctl -q`` output; raises ImexCtlMissing without the binary and OSError
        when it cannot run (a timeout)."""
        ...


@dataclass(frozen=True)
class ImexStatus:
    ready: bool
    status: str  # READY, or the first word the daemon answered instead (bounded label)


def parse_query(text: str) -> ImexStatus:
    """Ready only on exactly ``READY``; otherwise the answer's first word, upper-cased and cut
    to a label-safe token (``UNKNOWN`` when there is none)."""
    words = text.split()
    first = re.sub(r"[^A-Z0-9_]", "", words[0].upper())[:32] if words else ""
    if text.strip() == "READY":
        return ImexStatus(True, "READY")
    return ImexStatus(False, first or "UNKNOWN")


class ImexCtlRunner:
    """The real reader: one ``nvidia-imex-ctl -q`` per cycle. A non-zero exit is an answer
    (the daemon not reachable), returned as its text with NOT_READY when it printed nothing."""

    def __init__(self, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run):
        self._run = run

    def query(self) -> str:
        try:
            done = self._run([BINARY, "-q"], capture_output=True, text=True, timeout=TIMEOUT,
                             check=False)  # fmt: skip
        except FileNotFoundError as e:
            raise ImexCtlMissing(f"{BINARY}: {e}") from e
        except subprocess.TimeoutExpired as e:
            raise OSError(f"{BINARY} -q: {e}") from e
        if done.returncode != 0:
            return (done.stdout + done.stderr).strip() or "NOT_READY"
        return done.stdout


class FakeImexCtl:
    """A fixed answer, or ``error`` raised."""

    def __init__(self, answer: str = "READY\n") -> None:
        self.answer = answer
        self.error: OSError | None = None
        self.calls = 0

    def query(self) -> str:
        self.calls += 1
        if self.error is not None:
            raise self.error
        return self.answer
