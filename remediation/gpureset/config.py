"""The ``reset_gpu:`` block of the remediation policy, validated at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from common.settings import SettingsError

DEFAULT_COMMAND = ("nvidia-smi", "-r", "-i", "{index}")
DEFAULT_VERIFY = ("nvidia-smi", "-q", "-i", "{index}")
# AMD Instinct nodes (amd-smi, ROCm's CLI: ``amd-smi reset --gpureset -g <GPU>``; the check
# after it: the GPU answers amd-smi and has no page left pending retirement nor unreservable)
AMD_COMMAND = ("amd-smi", "reset", "--gpureset", "-g", "{index}")
AMD_VERIFY = ("amd-smi", "bad-pages", "-g", "{index}", "--json")


@dataclass(frozen=True)
class ResetPolicy:
    command: tuple[str, ...] = DEFAULT_COMMAND  # the site's reset; {index} is the GPU
    verify_command: tuple[str, ...] = DEFAULT_VERIFY  # the GPU answers NVML again
    timeout_s: float = 120.0  # the reset command's own limit (coreutils timeout)
    deadline_s: float = 900.0  # the whole job, queueing included; then the next rung
    persistence_mode: bool = True  # turn persistence mode off for the reset, back on after
    amd_command: tuple[str, ...] = AMD_COMMAND  # the same two steps on AMD nodes
    amd_verify_command: tuple[str, ...] = AMD_VERIFY

    def argv(self, which: tuple[str, ...], index: str) -> tuple[str, ...]:
        return tuple(a.replace("{index}", index) for a in which)


def _argv(raw: dict[str, Any], key: str, default: tuple[str, ...]) -> tuple[str, ...]:
    v = raw.get(key, list(default))
    if not isinstance(v, list) or not v or not all(isinstance(a, str) for a in v):
        raise SettingsError(f"policy reset_gpu.{key}: expected a non-empty list of strings (argv)")
    return tuple(v)


def _secs(raw: dict[str, Any], key: str, default: float) -> float:
    v = raw.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise SettingsError(f"policy reset_gpu.{key}: expected seconds > 0, got {v!r}")
    return float(v)


def parse(raw: Any) -> ResetPolicy:
    if raw is None:
        return ResetPolicy()
    if not isinstance(raw, dict):
        raise SettingsError("policy reset_gpu: expected a mapping")
    known = {"command", "verify_command", "timeout_s", "deadline_s", "persistence_mode", "amd"}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise SettingsError(f"policy reset_gpu: unknown key(s) {', '.join(unknown)}")
    pm = raw.get("persistence_mode", True)
    if not isinstance(pm, bool):
        raise SettingsError("policy reset_gpu.persistence_mode: expected true or false")
    amd = raw.get("amd") or {}
    if not isinstance(amd, dict) or set(amd) - {"command", "verify_command"}:
        raise SettingsError("policy reset_gpu.amd: expected a mapping of command, verify_command")
    p = ResetPolicy(
        _argv(raw, "command", DEFAULT_COMMAND),
        _argv(raw, "verify_command", DEFAULT_VERIFY),
        _secs(raw, "timeout_s", 120.0),
        _secs(raw, "deadline_s", 900.0),
        pm,
        _argv(amd, "command", AMD_COMMAND),
        _argv(amd, "verify_command", AMD_VERIFY),
    )
    if p.deadline_s <= p.timeout_s:
        raise SettingsError("policy reset_gpu.deadline_s: must exceed timeout_s")
    return p
