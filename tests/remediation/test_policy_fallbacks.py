"""A policy must allow what its own settings fall back to or climb to: the checkpoint
fallback while storage is unhealthy, and every rung of a ladder (and inspect). ``--check``
and start-up reject one that does not; both shipped policies pass."""

from __future__ import annotations

from pathlib import Path

import pytest

from remediation import cli, policy, policy_check

REPO = Path(__file__).resolve().parents[2]
SHIPPED = [
    REPO / "remediation" / "default_policy.yaml",
    REPO / "deploy/remediation/policy.example.yaml",
]


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_each_shipped_policy_allows_its_own_fallbacks_and_passes_check(
    path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert policy_check.fallback_problems(policy.load(path)) == []
    argv = ["--policy", str(path), "--state-db", str(tmp_path / "s.db"), "--check",
            "--allow-unauthenticated"]  # fmt: skip
    assert cli.main(argv) == 0, capsys.readouterr().err


def test_a_rule_allowing_checkpoints_but_not_the_storage_fallback_is_rejected_at_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """
rules:
  - match: {fault_class: nvlink}
    allow: [notify, drain, checkpoint_restart, inspect]
ladders: {nvlink: [drain, checkpoint_restart]}
checkpoint: {on_storage_unhealthy: requeue}
"""
    (tmp_path / "p.yaml").write_text(text)
    problems = policy_check.fallback_problems(policy.load(tmp_path / "p.yaml"))
    assert len(problems) == 1 and "not requeue" in problems[0]
    argv = ["--policy", str(tmp_path / "p.yaml"), "--state-db", str(tmp_path / "s.db"),
            "--check", "--allow-unauthenticated"]  # fmt: skip
    assert cli.main(argv) == 2
    assert "on_storage_unhealthy" in capsys.readouterr().err
    held = text.replace("on_storage_unhealthy: requeue", "on_storage_unhealthy: hold")
    assert policy_check.fallback_problems(policy.loads(held)) == []  # hold is no action


def test_a_rule_allowing_a_ladders_first_rung_but_not_the_next_is_rejected() -> None:
    p = policy.loads(
        """
rules:
  - match: {fault_class: "~nvlink|pcie", severity: critical}
    allow: [notify, drain, inspect]
  - match: {}
    allow: [notify]
ladders: {nvlink: [drain, reboot], pcie: [drain]}
checkpoint: {on_storage_unhealthy: hold}
"""
    )
    [problem] = policy_check.fallback_problems(p)
    assert "nvlink" in problem and "reboot" in problem


def test_a_rule_allowing_a_gpu_reset_but_not_the_reboot_it_falls_back_to_is_rejected() -> None:
    p = policy.loads(
        """
rules:
  - match: {fault_class: xid_fatal}
    allow: [notify, drain, reset_gpu, inspect]
ladders: {xid_fatal: [drain]}
checkpoint: {on_storage_unhealthy: hold}
"""
    )
    [problem] = policy_check.fallback_problems(p)
    assert "reset_gpu" in problem and "reboot" in problem
