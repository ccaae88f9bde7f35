"""Observe first, by construction: every shipped policy starts in dry-run with the real
backend reading real state, `--check` says which mode a configuration gives, and a live
policy that cannot write its ack directory does not start."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from remediation import cli, policy
from tests.deploy.support import KUBE, ROOT, load_docs

EXAMPLE = ROOT / "deploy" / "remediation" / "policy.example.yaml"


def live_copy(tmp_path: Path, ack_dir: Path) -> Path:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["dry_run"] = False
    data["checkpoint"]["ack_dir"] = str(ack_dir)
    out = tmp_path / "policy.yaml"
    out.write_text(yaml.safe_dump(data))
    return out


def check(tmp_path: Path, *args: str) -> list[str]:
    return ["--check", "--allow-unauthenticated", f"--state-db={tmp_path / 's.db'}", *args]


def test_the_example_policy_and_the_kubernetes_policy_configmap_are_dry_run() -> None:
    assert policy.load(EXAMPLE).dry_run
    (cm,) = load_docs(KUBE / "base" / "generated" / "remediation-policy.yaml")
    assert policy.loads(cm["data"]["policy.yaml"]).dry_run


def test_check_prints_dry_run_reading_the_scheduler_for_the_example_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --backend kubernetes would need a cluster; the mode line comes from the policy and the
    # backend chosen, so the dry-run backend over a real one is shown with a fake source below.
    assert cli.main(check(tmp_path, f"--policy={EXAMPLE}")) == 0
    out = capsys.readouterr().out
    assert "mode: dry-run" in out and "nothing is changed" in out


def test_check_prints_live_for_a_flipped_policy_with_a_writable_ack_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    acks = tmp_path / "acks"
    acks.mkdir()
    live = live_copy(tmp_path, acks)
    assert cli.main(check(tmp_path, f"--policy={live}", "--backend=slurm")) == 0
    assert "mode: LIVE: allowed actions are carried out through slurm" in capsys.readouterr().out
    # dry-run backend + live policy: still nothing can be changed, and it says so
    assert cli.main(check(tmp_path, f"--policy={live}")) == 0
    assert "mode: dry-run" in capsys.readouterr().out


def test_a_live_policy_whose_ack_dir_is_missing_stops_at_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    live = live_copy(tmp_path, tmp_path / "no-such-dir")
    assert cli.main(check(tmp_path, f"--policy={live}", "--backend=slurm")) == 2
    err = capsys.readouterr().err
    assert "ack_dir" in err and "does not exist" in err and len(err.strip().splitlines()) == 1
    # with the dry-run backend nothing could act: a warning, and it starts
    assert cli.main(check(tmp_path, f"--policy={live}")) == 0
    assert "warning: checkpoint.ack_dir" in capsys.readouterr().out


def test_a_live_policy_whose_ack_dir_refuses_files_stops_at_start_up(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # /sys refuses new files even to root (the tests run as root in CI), like a read-only
    # mount (ProtectSystem=strict without ReadWritePaths) refuses them with EROFS.
    live = live_copy(tmp_path, Path("/sys"))
    assert cli.main(check(tmp_path, f"--policy={live}", "--backend=slurm")) == 2
    assert "not writable" in capsys.readouterr().err


def test_a_dry_run_policy_with_a_missing_ack_dir_starts_with_a_warning(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = yaml.safe_load(EXAMPLE.read_text())
    data["checkpoint"]["ack_dir"] = str(tmp_path / "missing")
    p = tmp_path / "p.yaml"
    p.write_text(yaml.safe_dump(data))
    assert cli.main(check(tmp_path, f"--policy={p}")) == 0
    assert "warning: checkpoint.ack_dir" in capsys.readouterr().out


def test_going_live_cancels_what_the_dry_run_left_unfinished_and_forgets_its_holds(
    tmp_path: Path,
) -> None:
    from remediation import preflight
    from remediation.journal import Journal

    j = Journal(tmp_path / "s.db")
    with j.tx() as db:
        for node, backend, state in (
            ("n1", "dry-run", "pending"),  # a checkpoint_restart waiting for an ack in dry-run
            ("n2", "slurm", "pending"),  # a live action interrupted by a crash: resumed
        ):
            db.execute(
                "INSERT INTO actions(node,action,backend,state) VALUES(?,?,?,?)",
                (node, "checkpoint_restart", backend, state),
            )
            db.execute("INSERT INTO nodes(node,state) VALUES(?,?)", (node, "quarantined"))
    assert preflight.leave_dry_run(j, "dry-run", 1.0) == []  # still observing: nothing to do
    notes = preflight.leave_dry_run(j, "slurm", 2.0)
    assert len(notes) == 2 and "n1" in notes[1]
    assert [r["node"] for r in j.pending_actions()] == ["n2"]
    assert j.held_nodes() == frozenset({"n2"})
    assert preflight.leave_dry_run(j, "slurm", 3.0) == []  # idempotent
    j.close()


def test_a_state_db_that_cannot_be_opened_is_one_line_not_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(check(tmp_path, "--state-db=/proc/no/such/state.db")) == 2
    err = capsys.readouterr().err
    assert "--state-db /proc/no/such/state.db" in err and len(err.strip().splitlines()) == 1
