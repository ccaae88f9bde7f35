"""The policy's ``validation`` section: which suite a node must pass before it goes back.

Parsed with the rest of the policy at start-up (every problem is one ``SettingsError`` line)::

    validation:
      suites: {pre-release: [...], nvlink: [...]}    # see remediation/validation/suite.py
      before_release: pre-release   # suite for every release (none: only the classes below)
      fault_classes: {nvlink: nvlink}                # a fault class's own suite
      manual_release: false         # true: a manual release is validated first, too
      timeout_s: 3600               # a run's deadline (default: its steps' timeouts + 600 s)
      max_attempts: 3               # the Nth failed validation sends the node to inspection
      out_dir: /var/lib/gpuwarden/validation         # Slurm: step outputs (shared storage)
      kubernetes: {namespace: gpuwarden, image: REGISTRY/gpu-validate:TAG, gpus: 8}

Pure: no I/O after loading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from common.settings import SettingsError
from remediation.validation.suite import Suite, load_suites

MARGIN_S = 600.0
_KEYS = {
    "suites",
    "before_release",
    "fault_classes",
    "manual_release",
    "timeout_s",
    "max_attempts",
    "out_dir",
    "kubernetes",
}


@dataclass(frozen=True)
class ValidationPolicy:
    suites: Mapping[str, Suite] = field(default_factory=dict)
    before_release: str | None = None
    fault_classes: Mapping[str, str] = field(default_factory=dict)
    manual_release: bool = False
    timeout_s: float | None = None
    max_attempts: int = 3
    out_dir: str = "/var/lib/gpuwarden/validation"
    kube_namespace: str = "gpuwarden"
    kube_image: str = ""
    kube_gpus: int = 8

    @property
    def enabled(self) -> bool:
        return bool(self.before_release or self.fault_classes)

    def suite_for(self, fault_class: str | None) -> Suite | None:
        """The suite a node quarantined for ``fault_class`` must pass; None: no validation."""
        name = self.fault_classes.get(fault_class or "") or self.before_release
        return self.suites[name] if name else None

    def deadline_s(self, suite: Suite) -> float:
        if self.timeout_s is not None:
            return self.timeout_s
        return sum(s.timeout_s for s in suite.steps) + MARGIN_S

    def describe(self) -> list[str]:
        """What ``--check`` prints."""
        if not self.suites:
            return ["validation: none (nodes are released after probation alone)"]
        lines = []
        for name, suite in sorted(self.suites.items()):
            steps = ", ".join(f"{s.name} ({s.parser}, {s.timeout_s:g} s)" for s in suite.steps)
            lines.append(f"validation suite {name}: {steps}; deadline {self.deadline_s(suite):g} s")
        users = [f"{fc} -> {s}" for fc, s in sorted(self.fault_classes.items())]
        if self.before_release:
            users.append(f"every other release -> {self.before_release}")
        lines.append(
            "validation before release: "
            + ("; ".join(users) if users else "none (suites only run on demand)")
            + f"; manual releases {'too' if self.manual_release else 'not validated'}"
            + f"; inspection after {self.max_attempts} failed validations"
        )
        return lines


def parse(raw: Any) -> ValidationPolicy:
    if raw is None:
        return ValidationPolicy()
    if not isinstance(raw, Mapping):
        raise SettingsError("policy validation: expected a mapping")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise SettingsError(f"policy validation: unknown key(s) {', '.join(unknown)}")
    suites = load_suites(raw.get("suites"))

    def known(name: Any, where: str) -> str:
        if not isinstance(name, str) or name not in suites:
            have = ", ".join(sorted(suites)) or "none defined"
            raise SettingsError(f"policy {where}: no suite named {name!r} (suites: {have})")
        return name

    before = raw.get("before_release")
    before = None if before is None else known(before, "validation.before_release")
    classes = raw.get("fault_classes") or {}
    if not isinstance(classes, Mapping):
        raise SettingsError("policy validation.fault_classes: expected fault class -> suite")
    fcs = {str(k): known(v, f"validation.fault_classes.{k}") for k, v in classes.items()}
    manual = raw.get("manual_release", False)
    if not isinstance(manual, bool):
        raise SettingsError("policy validation.manual_release: expected true or false")
    timeout = raw.get("timeout_s")
    if timeout is not None and (
        isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0
    ):
        raise SettingsError(f"policy validation.timeout_s: expected seconds > 0, got {timeout!r}")
    attempts = raw.get("max_attempts", 3)
    if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
        raise SettingsError(
            f"policy validation.max_attempts: expected an integer >= 1, got {attempts!r}"
        )
    out_dir = raw.get("out_dir", ValidationPolicy.out_dir)
    if not isinstance(out_dir, str) or not out_dir.startswith("/"):
        raise SettingsError(
            f"policy validation.out_dir: expected an absolute path, got {out_dir!r}"
        )
    kube = raw.get("kubernetes") or {}
    if not isinstance(kube, Mapping) or set(kube) - {"namespace", "image", "gpus"}:
        raise SettingsError("policy validation.kubernetes: expected {namespace, image, gpus}")
    gpus = kube.get("gpus", 8)
    if isinstance(gpus, bool) or not isinstance(gpus, int) or gpus < 0:
        raise SettingsError(
            f"policy validation.kubernetes.gpus: expected an integer >= 0, got {gpus!r}"
        )
    return ValidationPolicy(
        suites=suites,
        before_release=before,
        fault_classes=fcs,
        manual_release=manual,
        timeout_s=None if timeout is None else float(timeout),
        max_attempts=attempts,
        out_dir=out_dir,
        kube_namespace=str(kube.get("namespace", "gpuwarden")),
        kube_image=str(kube.get("image", "")),
        kube_gpus=gpus,
    )
