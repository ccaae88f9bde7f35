"""The remediation policy: what may be done, how far to escalate, and the safety limits.

Loaded once at start-up from YAML (the shipped default, ``default_policy.yaml``, is dry-run)
and validated completely: any problem is one ``SettingsError`` line and the service does not
start. The guards read this frozen dataclass; nothing here does I/O after loading.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from common.settings import SettingsError
from remediation.gpureset import config as reset_config
from remediation.gpureset.config import ResetPolicy
from remediation.model import ACTIONS
from remediation.placement import config as placement_config
from remediation.placement.config import PlacementPolicy
from remediation.storage import FALLBACKS
from remediation.validation import config as validation_config
from remediation.validation.config import ValidationPolicy


@dataclass(frozen=True)
class Rule:
    """Alerts whose labels match ``match`` may get the actions in ``allow``.

    A matcher value is an exact string, or ``~regex`` (full match)."""

    match: Mapping[str, str]
    allow: frozenset[str]

    def matches(self, labels: Mapping[str, str]) -> bool:
        for name, want in self.match.items():
            got = labels.get(name, "")
            if want.startswith("~"):
                if not re.fullmatch(want[1:], got):
                    return False
            elif got != want:
                return False
        return True


@dataclass(frozen=True)
class Budget:
    max_fraction: float = 1.0
    max_nodes: int = 1_000_000
    allow_zero: bool = False  # a limit of 0 on some domain is meant (--check accepts it)


@dataclass(frozen=True)
class Checkpoint:
    ack_dir: str = "/var/lib/gpuwarden/acks"
    deadline_s: float = 300.0
    on_timeout: str = "requeue"  # requeue | wait
    restart_deadline_s: float = 600.0
    mount: str = ""  # where jobs write checkpoints; "" = unknown: any unhealthy mount counts
    on_storage_unhealthy: str = "requeue"  # remediation.storage.FALLBACKS


@dataclass(frozen=True)
class Policy:
    dry_run: bool = True
    paused: bool = False
    auto_release: bool = False
    require_silence_check: bool = False
    rules: tuple[Rule, ...] = ()
    ladders: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    inspect_after: int = 3
    recurrence_window_s: float = 7 * 86400.0
    fleet_budget: Budget = Budget(0.1, 20)
    domain_budgets: Mapping[str, Budget] = field(default_factory=dict)
    per_job_max_nodes: int = 1
    rate_max_actions: int = 10
    rate_window_s: float = 300.0
    storm_max_nodes: int = 10
    storm_window_s: float = 300.0
    storm_quiet_s: float = 600.0
    flap_window_s: float = 86400.0
    flap_multiplier: float = 4.0
    probation_s: float = 1800.0
    validate_command: tuple[str, ...] = ()
    checkpoint: Checkpoint = Checkpoint()
    taint_effect: str = "NoSchedule"
    dra_isolation: bool = False  # Kubernetes: a GPU-scoped cordon/drain taints the device
    dra_effect: str = "NoSchedule"  # NoExecute only where policy says so

    incident_window_s: float = 120.0
    action_retries: int = 3
    retry_backoff_s: float = 30.0
    validation: ValidationPolicy = field(default_factory=ValidationPolicy)
    placement: PlacementPolicy = field(default_factory=PlacementPolicy)
    reset_gpu: ResetPolicy = field(default_factory=ResetPolicy)

    def rule_for(self, labels: Mapping[str, str]) -> Rule | None:
        return next((r for r in self.rules if r.matches(labels)), None)

    def knows_class(self, fault_class: str) -> bool:
        """A ladder, or a rule that names this fault class (a catch-all rule does not)."""
        if fault_class in self.ladders:
            return True
        named = (
            Rule({"fault_class": r.match["fault_class"]}, r.allow)
            for r in self.rules
            if "fault_class" in r.match
        )
        return any(r.matches({"fault_class": fault_class}) for r in named)


def _num(d: Mapping[str, Any], key: str, default: float, where: str, lo: float = 0.0) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < lo:
        raise SettingsError(f"policy {where}.{key}: expected a number >= {lo}, got {v!r}")
    return float(v)


def _int(d: Mapping[str, Any], key: str, default: int, where: str, lo: int = 0) -> int:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, int) or v < lo:
        raise SettingsError(f"policy {where}.{key}: expected an integer >= {lo}, got {v!r}")
    return v


def _map(d: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    v = d.get(key) or {}
    if not isinstance(v, dict):
        raise SettingsError(f"policy {key}: expected a mapping, got {type(v).__name__}")
    return v


def _actions(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not value:
        raise SettingsError(f"policy {where}: expected a non-empty list of actions")
    bad = [a for a in value if a not in ACTIONS]
    if bad:
        raise SettingsError(f"policy {where}: unknown action(s) {bad}; known: {list(ACTIONS)}")
    return tuple(value)


def _budget(d: Mapping[str, Any], where: str) -> Budget:
    frac = _num(d, "max_fraction", 1.0, where)
    if frac > 1.0:
        raise SettingsError(f"policy {where}.max_fraction: must be <= 1, got {frac}")
    unknown = sorted(set(d) - {"max_fraction", "max_nodes", "allow_zero"})
    if unknown:
        raise SettingsError(f"policy {where}: unknown key(s) {', '.join(unknown)}")
    if not isinstance(d.get("allow_zero", False), bool):
        raise SettingsError(f"policy {where}.allow_zero: expected true or false")
    return Budget(frac, _int(d, "max_nodes", 1_000_000, where), bool(d.get("allow_zero", False)))


def _rules(raw: Any) -> tuple[Rule, ...]:
    if not isinstance(raw, list):
        raise SettingsError("policy rules: expected a list")
    rules = []
    for i, r in enumerate(raw):
        if not isinstance(r, dict) or not isinstance(r.get("match", {}), dict):
            raise SettingsError(f"policy rules[{i}]: expected {{match: {{...}}, allow: [...]}}")
        match = {str(k): str(v) for k, v in (r.get("match") or {}).items()}
        for k, v in match.items():
            if v.startswith("~"):
                try:
                    re.compile(v[1:])
                except re.error as e:
                    raise SettingsError(f"policy rules[{i}].match.{k}: bad regex ({e})") from None
        rules.append(Rule(match, frozenset(_actions(r.get("allow"), f"rules[{i}].allow"))))
    return tuple(rules)


_KNOWN = {
    "dry_run",
    "paused",
    "auto_release",
    "require_silence_check",
    "rules",
    "ladders",
    "inspect_after",
    "recurrence_window_s",
    "budgets",
    "rate_limit",
    "storm",
    "flap",
    "probation_s",
    "validate_command",
    "checkpoint",
    "kubernetes",
    "incident_window_s",
    "retry",
    "validation",
    "placement",
    "reset_gpu",
}


def parse(data: Mapping[str, Any]) -> Policy:
    unknown = sorted(set(data) - _KNOWN)
    if unknown:
        raise SettingsError(f"policy: unknown key(s) {', '.join(unknown)}")
    for key in ("dry_run", "paused", "auto_release", "require_silence_check"):
        if not isinstance(data.get(key, False), bool):
            raise SettingsError(f"policy {key}: expected true or false")
    ladders = {str(k): _actions(v, f"ladders.{k}") for k, v in _map(data, "ladders").items()}
    budgets, rate, storm = _map(data, "budgets"), _map(data, "rate_limit"), _map(data, "storm")
    flap, ckpt, kube = _map(data, "flap"), _map(data, "checkpoint"), _map(data, "kubernetes")
    retry = _map(data, "retry")
    on_timeout = ckpt.get("on_timeout", "requeue")
    if on_timeout not in ("requeue", "wait"):
        raise SettingsError(f"policy checkpoint.on_timeout: requeue or wait, got {on_timeout!r}")
    on_storage = ckpt.get("on_storage_unhealthy", "requeue")
    if on_storage not in FALLBACKS:
        raise SettingsError(
            f"policy checkpoint.on_storage_unhealthy: one of {', '.join(FALLBACKS)}, "
            f"got {on_storage!r}"
        )
    mount = ckpt.get("mount", "")
    if not isinstance(mount, str) or (mount and not mount.startswith("/")):
        raise SettingsError(f"policy checkpoint.mount: expected an absolute path, got {mount!r}")
    effect = kube.get("taint_effect", "NoSchedule")
    if effect not in ("NoSchedule", "NoExecute"):
        raise SettingsError(
            f"policy kubernetes.taint_effect: NoSchedule or NoExecute, got {effect!r}"
        )
    dra = kube.get("dra_isolation", False)
    dra_effect = kube.get("dra_effect", "NoSchedule")
    if not isinstance(dra, bool) or dra_effect not in ("NoSchedule", "NoExecute"):
        raise SettingsError(
            "policy kubernetes.dra_isolation: true or false; kubernetes.dra_effect: "
            f"NoSchedule or NoExecute, got {dra!r}, {dra_effect!r}"
        )
    validate = data.get("validate_command") or []
    if not isinstance(validate, list) or not all(isinstance(a, str) for a in validate):
        raise SettingsError("policy validate_command: expected a list of strings (argv)")
    return Policy(
        dry_run=bool(data.get("dry_run", True)),
        paused=bool(data.get("paused", False)),
        auto_release=bool(data.get("auto_release", False)),
        require_silence_check=bool(data.get("require_silence_check", False)),
        rules=_rules(data.get("rules", [])),
        ladders=ladders,
        inspect_after=_int(data, "inspect_after", 3, "", 1),
        recurrence_window_s=_num(data, "recurrence_window_s", 7 * 86400.0, ""),
        fleet_budget=_budget(_map(budgets, "fleet"), "budgets.fleet"),
        domain_budgets={
            str(k): _budget(v or {}, f"budgets.domains.{k}")
            for k, v in _map(budgets, "domains").items()
        },
        per_job_max_nodes=_int(budgets, "per_job_max_nodes", 1, "budgets", 1),
        rate_max_actions=_int(rate, "max_actions", 10, "rate_limit", 1),
        rate_window_s=_num(rate, "window_s", 300.0, "rate_limit"),
        storm_max_nodes=_int(storm, "max_nodes", 10, "storm", 1),
        storm_window_s=_num(storm, "window_s", 300.0, "storm"),
        storm_quiet_s=_num(storm, "quiet_s", 600.0, "storm"),
        flap_window_s=_num(flap, "window_s", 86400.0, "flap"),
        flap_multiplier=_num(flap, "probation_multiplier", 4.0, "flap", 1.0),
        probation_s=_num(data, "probation_s", 1800.0, ""),
        validate_command=tuple(validate),
        checkpoint=Checkpoint(
            ack_dir=str(ckpt.get("ack_dir", "/var/lib/gpuwarden/acks")),
            deadline_s=_num(ckpt, "deadline_s", 300.0, "checkpoint"),
            on_timeout=on_timeout,
            restart_deadline_s=_num(ckpt, "restart_deadline_s", 600.0, "checkpoint"),
            mount=mount,
            on_storage_unhealthy=on_storage,
        ),
        taint_effect=effect,
        dra_isolation=dra,
        dra_effect=dra_effect,
        incident_window_s=_num(data, "incident_window_s", 120.0, ""),
        action_retries=_int(retry, "max_attempts", 3, "retry", 1),
        retry_backoff_s=_num(retry, "backoff_s", 30.0, "retry"),
        validation=validation_config.parse(data.get("validation")),
        placement=placement_config.parse(data.get("placement")),
        reset_gpu=reset_config.parse(data.get("reset_gpu")),
    )


def loads(text: str, where: str = "policy") -> Policy:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise SettingsError(f"{where}: not valid YAML ({str(e).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise SettingsError(f"{where}: expected a mapping at the top level")
    return parse(data)


def load(path: str | Path | None) -> Policy:
    """The policy at ``path``, or the shipped default (dry-run) when None."""
    if path is None:
        return loads(default_text(), "default policy")
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise SettingsError(f"policy {path}: {e.strerror or e}") from None
    return loads(text, f"policy {path}")


def default_text() -> str:
    return resources.files("remediation").joinpath("default_policy.yaml").read_text()
