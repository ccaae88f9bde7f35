"""Validation suites: named lists of checks a quarantined node must pass before release.

Declared in the policy under ``validation.suites``; loaded and validated at start-up like the
rest of the policy (a bad suite is one ``SettingsError`` line). A step is a command with a
timeout, the parser of its output, and pass criteria: no failed check, and minimum values
of the parser's measurements, per GPU model (from the inventory) with a default::

    validation:
      suites:
        pre-release:
          - name: dcgm-diag-r2
            command: [dcgmi, diag, -r, "2", -j]
            timeout_s: 1800
            parser: dcgmi-diag
          - name: nccl-intra-node
            command: [all_reduce_perf, -b, 1G, -e, 8G, -f, "2", -g, "8"]
            timeout_s: 600
            parser: nccl-tests
            min:
              busbw_at_max_size_gbps: {default: 400, "NVIDIA A100-SXM4-80GB": 200}

Judging is pure (:func:`judge`): a timeout, a non-zero exit, an unparsable output, a failed
check or a measurement under its minimum all fail the step with the reason; a missing
measurement that has a minimum fails too (never read as a pass).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from common.settings import SettingsError
from remediation.validation.parsers import PARSERS, ParseError, ToolResult


@dataclass(frozen=True)
class Step:
    name: str
    command: tuple[str, ...]
    timeout_s: float
    parser: str
    minimum: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def threshold(self, measurement: str, gpu_model: str | None) -> float | None:
        per_model = self.minimum.get(measurement)
        if per_model is None:
            return None
        if gpu_model and gpu_model in per_model:
            return per_model[gpu_model]
        return per_model.get("default")


@dataclass(frozen=True)
class Suite:
    name: str
    steps: tuple[Step, ...]
    # the whole node (Slurm --exclusive): a validation suite; the GPU reset runs beside the
    # jobs of the node's other GPUs, which it leaves running
    exclusive: bool = True


@dataclass(frozen=True)
class StepRun:
    """What running one step gave: exit code (None: timed out, or no result at all when
    ``missing``: the step never ran or its result never came back), stdout, seconds."""

    exit_code: int | None
    stdout: str
    seconds: float = 0.0
    missing: bool = False

    @classmethod
    def no_result(cls) -> StepRun:
        """A step whose result is not there (the job ended before it, or was cancelled):
        no pass, and not a timeout either."""
        return cls(None, "", missing=True)

    @classmethod
    def exited(cls, rc: int, stdout: str) -> StepRun:
        """A step that ended with ``rc`` under coreutils ``timeout -k``: 124 (timed out) and
        137 (killed after the grace period) are no result, never an exit code to judge."""
        return cls(None if rc in (124, 137) else rc, stdout)


@dataclass(frozen=True)
class StepVerdict:
    step: str
    passed: bool
    reasons: tuple[str, ...]
    measurements: Mapping[str, float] = field(default_factory=dict)
    failed_gpus: tuple[int, ...] = ()


@dataclass(frozen=True)
class SuiteVerdict:
    suite: str
    steps: tuple[StepVerdict, ...]

    @property
    def passed(self) -> bool:
        return bool(self.steps) and all(s.passed for s in self.steps)

    def evidence(self) -> dict[str, Any]:
        """The JSON-able record that goes into the journal with the decision."""
        return {
            "suite": self.suite,
            "passed": self.passed,
            "steps": [
                {
                    "step": s.step,
                    "passed": s.passed,
                    "reasons": list(s.reasons),
                    "measurements": dict(s.measurements),
                    "failed_gpus": list(s.failed_gpus),
                }
                for s in self.steps
            ],
        }


def judge(step: Step, run: StepRun, gpu_model: str | None = None) -> StepVerdict:
    if run.missing:
        return StepVerdict(step.name, False, ("no result (the step did not run to its end)",))
    if run.exit_code is None:
        return StepVerdict(step.name, False, (f"timed out after {step.timeout_s:g} s",))
    try:
        result: ToolResult = PARSERS[step.parser](run.stdout)
    except ParseError as e:
        reason = f"output not understood: {e}"
        if run.exit_code:
            reason = f"exit code {run.exit_code}; {reason}"
        return StepVerdict(step.name, False, (reason,))
    reasons: list[str] = []
    if run.exit_code:
        reasons.append(f"exit code {run.exit_code}")
    for check in result.failed:
        who = f" on GPU {', '.join(map(str, check.gpus))}" if check.gpus else ""
        detail = f": {check.detail}" if check.detail else ""
        reasons.append(f"{check.name} failed{who}{detail}")
    for name in step.minimum:
        want = step.threshold(name, gpu_model)
        if want is None:
            continue
        got = result.measurements.get(name)
        if got is None:
            reasons.append(f"{name} missing from the output (minimum {want:g})")
        elif got < want:
            reasons.append(f"{name} {got:g} below the minimum {want:g}")
    return StepVerdict(
        step.name,
        not reasons,
        tuple(reasons),
        dict(result.measurements),
        tuple(sorted(result.failed_gpus())),
    )


def judge_suite(
    suite: Suite, runs: Sequence[StepRun], gpu_model: str | None = None
) -> SuiteVerdict:
    if len(runs) != len(suite.steps):
        raise ValueError(f"suite {suite.name}: {len(runs)} runs for {len(suite.steps)} steps")
    return SuiteVerdict(
        suite.name, tuple(judge(s, r, gpu_model) for s, r in zip(suite.steps, runs, strict=True))
    )


def load_suites(raw: Any) -> dict[str, Suite]:
    """``validation.suites`` from the policy YAML; every problem is one SettingsError line."""
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise SettingsError("validation.suites: expected a mapping of suite name -> steps")
    out: dict[str, Suite] = {}
    for name, steps in raw.items():
        where = f"validation.suites.{name}"
        if not isinstance(steps, Sequence) or isinstance(steps, str) or not steps:
            raise SettingsError(f"{where}: expected a non-empty list of steps")
        out[str(name)] = Suite(
            str(name), tuple(_step(f"{where}[{i}]", s) for i, s in enumerate(steps))
        )
    return out


def _step(where: str, raw: Any) -> Step:
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{where}: expected a mapping")
    unknown = set(raw) - {"name", "command", "timeout_s", "parser", "min"}
    if unknown:
        raise SettingsError(f"{where}: unknown keys {', '.join(sorted(unknown))}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise SettingsError(f"{where}.name: required")
    command = raw.get("command")
    if (
        not isinstance(command, Sequence)
        or isinstance(command, str)
        or not command
        or not all(isinstance(c, str | int | float) for c in command)
    ):
        raise SettingsError(f"{where}.command: expected a non-empty list of arguments")
    timeout = raw.get("timeout_s")
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout <= 0:
        raise SettingsError(f"{where}.timeout_s: expected a positive number of seconds")
    parser = raw.get("parser")
    if parser not in PARSERS:
        raise SettingsError(f"{where}.parser: {parser!r} is not one of {', '.join(PARSERS)}")
    minimum: dict[str, dict[str, float]] = {}
    for meas, per_model in (raw.get("min") or {}).items():
        if isinstance(per_model, int | float) and not isinstance(per_model, bool):
            per_model = {"default": per_model}
        if not isinstance(per_model, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in per_model.values()
        ):
            raise SettingsError(f"{where}.min.{meas}: expected a number or model -> number")
        minimum[str(meas)] = {str(k): float(v) for k, v in per_model.items()}
    return Step(name, tuple(str(c) for c in command), float(timeout), parser, minimum)
