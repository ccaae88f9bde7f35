"""`gpuwarden quarantine ...` against a running service; `gpuwarden-remediation` start-up checks."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient

from remediation import cli, quarantine_cli
from remediation.service import Service
from tests.remediation.helpers import AUTH, TOKEN, alert, payload


async def run_cli(client: TestClient, *argv: str) -> int:
    url = str(client.server.make_url("")).rstrip("/")
    return await asyncio.to_thread(quarantine_cli.main, ["--url", url, *argv])


async def test_quarantine_list_show_release_pause_resume_history(
    svc_client: tuple[Service, TestClient],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc, client = svc_client
    monkeypatch.setenv("GPUWARDEN_WEBHOOK_TOKEN", TOKEN)
    await client.post("/alertmanager", data=payload(alert("gpu-node-003")), headers=AUTH)
    await svc.worker.idle()
    assert await run_cli(client, "list") == 0
    out = capsys.readouterr().out
    assert "gpu-node-003" in out and "quarantined" in out and "dry_run=False" in out
    assert await run_cli(client, "show", "gpu-node-003") == 0
    assert "drain" in capsys.readouterr().out
    assert await run_cli(client, "pause") == 0
    assert "paused=True" in capsys.readouterr().out
    assert svc.engine.paused
    assert await run_cli(client, "resume") == 0
    assert not svc.engine.paused
    assert await run_cli(client, "release", "gpu-node-003") == 0
    assert "gpu-node-003: released" in capsys.readouterr().out
    assert await run_cli(client, "history", "--limit", "2") == 0
    assert "release" in capsys.readouterr().out
    assert svc.journal.node("gpu-node-003")["state"] == "released"


async def test_quarantine_without_credentials_says_so(
    svc_client: tuple[Service, TestClient], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = svc_client
    monkeypatch.delenv("GPUWARDEN_WEBHOOK_TOKEN", raising=False)
    assert await run_cli(client, "list") == 2


def test_a_bad_policy_stops_the_start_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "p.yaml"
    bad.write_text("dry_run: false\nbudgets: {fleet: {max_fraction: 2}}\n")
    rc = cli.main(
        [
            "--policy",
            str(bad),
            "--state-db",
            str(tmp_path / "s.db"),
            "--check",
            "--allow-unauthenticated",
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and "max_fraction" in err and len(err.strip().splitlines()) == 1


def test_python_dash_m_remediation_validates_the_shipped_default(tmp_path: Path) -> None:
    p = subprocess.run(
        [sys.executable, "-m", "remediation", "--check", "--state-db", str(tmp_path / "s.db")],
        capture_output=True,
        text=True,
        timeout=60,
        env={"GPUWARDEN_WEBHOOK_TOKEN": TOKEN, "PATH": "/usr/bin:/bin"},
        cwd=Path(__file__).resolve().parents[2],
    )
    assert p.returncode == 0 and "dry_run=True" in p.stdout


def test_the_umbrella_cli_dispatches_remediation_and_quarantine(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpuwarden import cli as umbrella

    monkeypatch.setenv("GPUWARDEN_WEBHOOK_TOKEN", TOKEN)
    assert umbrella.main(["remediation", "--check", "--state-db", str(tmp_path / "s.db")]) == 0
    assert "dry_run=True" in capsys.readouterr().out
    with pytest.raises(SystemExit) as e:
        umbrella.main(["quarantine", "--help"])
    assert e.value.code == 0 and "release" in capsys.readouterr().out


async def test_quarantine_breaker_reset_closes_the_breaker_and_records_who(
    svc_client: tuple[Service, TestClient],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    svc, client = svc_client
    monkeypatch.setenv("GPUWARDEN_WEBHOOK_TOKEN", TOKEN)
    svc.journal.put("breaker_opened_at", repr(svc.clock.now()))
    assert await run_cli(client, "breaker", "reset") == 0
    assert "breaker_open=False" in capsys.readouterr().out
    [row] = svc.journal.rows("SELECT * FROM decisions WHERE action='breaker_close'")
    assert "reset by" in row["reason"] and '"cause": "manual"' in row["evidence"]
