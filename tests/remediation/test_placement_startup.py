"""Start-up refuses what ``--check`` refuses: the Slurm Weight projection under
``TopologyPlugin=topology/tree`` (weights override topology) unless the policy allows it.
A fake ``scontrol``/``sinfo`` on PATH stands in for slurmctld; the web app is never started
(a start that got past the refusal raises instead of listening)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from remediation import cli

LIVE_AVOID = """
dry_run: false
rules:
  - match: {action: avoid}
    allow: [avoid]
"""


def fake_slurm(bin_dir: Path, plugin: str) -> None:
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(
        "#!/bin/sh\n"
        'if [ "$1 $2" = "show config" ]; then\n'
        f"  echo 'TopologyPlugin          = {plugin}'; exit 0\n"
        "fi\nexit 0\n"
    )
    script.chmod(0o755)


def argv(tmp_path: Path, policy: str) -> list[str]:
    (tmp_path / "p.yaml").write_text(policy)
    return ["--backend", "slurm", "--policy", str(tmp_path / "p.yaml"),
            "--state-db", str(tmp_path / "s.db"), "--allow-unauthenticated"]  # fmt: skip


@pytest.fixture
def no_listen(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    started: list[str] = []

    def run_app(*_a: object, **_k: object) -> None:
        started.append("listening")

    monkeypatch.setattr("aiohttp.web.run_app", run_app)
    return started


def test_a_live_start_under_topology_tree_stops_with_one_line_naming_the_setting(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    no_listen: list[str],
) -> None:
    fake_slurm(tmp_path / "bin", "topology/tree")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(argv(tmp_path, LIVE_AVOID)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "topology/tree" in err[0] and "allow_topology_tree" in err[0]
    assert no_listen == []


def test_a_live_start_under_topology_tree_goes_on_when_the_policy_allows_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_listen: list[str]
) -> None:
    fake_slurm(tmp_path / "bin", "topology/tree")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    allowed = LIVE_AVOID + "placement: {allow_topology_tree: true}\n"
    assert cli.main(argv(tmp_path, allowed)) == 0
    assert no_listen == ["listening"]


def test_a_dry_run_start_under_topology_tree_only_warns_so_observing_never_fails_to_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, no_listen: list[str]
) -> None:
    fake_slurm(tmp_path / "bin", "topology/tree")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    assert cli.main(argv(tmp_path, LIVE_AVOID.replace("false", "true"))) == 0
    assert no_listen == ["listening"]
