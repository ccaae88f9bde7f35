"""What a validation tool's output says, once parsed: checks and measurements (pure data).

Shared by the parsers (:mod:`remediation.validation.parsers` for NVIDIA's and the common
tools, :mod:`remediation.validation.parsers_amd` for AMD's) and the suite that judges them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

STATUSES = ("pass", "fail", "skip", "warn")


class ParseError(ValueError):
    """The tool's output is not in a format this parser knows; never read as a pass."""


@dataclass(frozen=True)
class Check:
    """One test of a tool: its outcome, for which GPUs (empty: all or not per GPU)."""

    name: str
    status: str  # pass | fail | skip | warn
    gpus: tuple[int, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class ToolResult:
    tool: str
    checks: tuple[Check, ...] = ()
    measurements: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> tuple[Check, ...]:
        return tuple(c for c in self.checks if c.status == "fail")

    def failed_gpus(self) -> set[int]:
        return {g for c in self.failed for g in c.gpus}
