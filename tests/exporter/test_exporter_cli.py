"""`gpuwarden-exporter`: a bad flag, env value or config file stops the start with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.cli import main, settings_from


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--interval", "abc"], "--interval: 'abc' is not a number"),
        (["--interval", "0"], "--interval: 0.0 s is outside"),
        (["--listen", "nonsense"], "--listen: 'nonsense' is not HOST:PORT"),
        (["--web-config", "/nonexistent/web.yml"], "--web-config /nonexistent/web.yml"),
        (["--config", "/nonexistent/exporter.yml"], "config file /nonexistent/exporter.yml"),
    ],
)
def test_bad_settings_stop_the_start_with_a_one_line_reason(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_an_unknown_setting_in_the_config_file_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "c.yml").write_text("interval: 2\nintervall: 3\n")
    assert main(["--config", str(tmp_path / "c.yml")]) == 2
    assert "unknown setting(s) intervall" in capsys.readouterr().err


def test_flags_win_over_environment_which_wins_over_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "c.yml").write_text("interval: 7\nnode: from-file\ncompat: dcgm\n")
    monkeypatch.setenv("GPUWARDEN_NODE", "from-env")
    monkeypatch.setenv("GPUWARDEN_INTERVAL", "3")
    s, _, _ = settings_from(["--config", str(tmp_path / "c.yml"), "--interval", "2"])
    assert (s.interval, s.node, s.compat, s.dcgm) == (2.0, "from-env", "dcgm", True)


def test_defaults_follow_the_contract() -> None:
    s, wc, _ = settings_from([])
    assert (s.listen, s.source, s.interval, wc) == ("0.0.0.0:9835", "nvml", 15.0, None)
    assert s.node and s.stale_seconds == 45.0
    assert s.hostname_label == "Hostname"
