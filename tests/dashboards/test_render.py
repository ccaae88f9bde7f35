"""The committed dashboard JSON is exactly what the grafanalib modules render, with stable uids."""

from __future__ import annotations

import os
from pathlib import Path

from dashboards import catalogue
from dashboards.__main__ import JSON_DIR, main, rendered
from gpuwarden.cli import main as gpuwarden_main

EXPECTED_UIDS = {
    "gpuwarden-fleet",
    "gpuwarden-node",
    "gpuwarden-gpu",
    "gpuwarden-fabric",
    "gpuwarden-xid-memory",
    "gpuwarden-remediation",
    "gpuwarden-pipeline",
    "gpuwarden-reliability",
}


def test_the_committed_json_matches_a_fresh_render() -> None:
    if os.environ.get("UPDATE_GOLDEN"):
        assert main([]) == 0
    for name, text in rendered().items():
        assert (JSON_DIR / name).read_text() == text, f"{name} is stale: run python -m dashboards"
    assert main(["--check"]) == 0


def test_there_is_one_module_per_dashboard_with_a_stable_uid() -> None:
    assert {m.UID for m in catalogue.MODULES} == EXPECTED_UIDS
    assert {f.stem for f in JSON_DIR.glob("*.json")} == EXPECTED_UIDS
    for module in catalogue.MODULES:
        assert module.build().uid == module.UID


def test_rendering_twice_gives_identical_bytes() -> None:
    assert rendered() == rendered()


def test_check_fails_on_a_hand_edited_or_unknown_file(tmp_path: Path) -> None:
    assert main(["--out", str(tmp_path)]) == 0
    assert main(["--out", str(tmp_path), "--check"]) == 0
    fleet = tmp_path / "gpuwarden-fleet.json"
    fleet.write_text(fleet.read_text().replace("Fleet overview", "Fleet overveiw"))
    assert main(["--out", str(tmp_path), "--check"]) == 1
    fleet.unlink()
    assert main(["--out", str(tmp_path)]) == 0
    (tmp_path / "old-dashboard.json").write_text("{}")
    assert main(["--out", str(tmp_path), "--check"]) == 1


def test_the_umbrella_command_renders_the_same_files(tmp_path: Path) -> None:
    assert gpuwarden_main(["dashboards", "--out", str(tmp_path)]) == 0
    for name, text in rendered().items():
        assert (tmp_path / name).read_text() == text


def test_python_dash_m_dashboards_checks_the_committed_files() -> None:
    import subprocess
    import sys

    r = subprocess.run(
        [sys.executable, "-m", "dashboards", "--check"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
