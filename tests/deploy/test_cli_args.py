"""The flags the manifests and units pass are accepted by the services' real CLIs."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.deploy.support import KUBE, ROOT, build

UNITS = ROOT / "deploy" / "systemd"


def k8s_args(name: str) -> list[str]:
    (doc,) = [d for d in build(KUBE / "base") if d["metadata"]["name"] == name and "spec" in d
              and "template" in d["spec"]]  # fmt: skip
    args = doc["spec"]["template"]["spec"]["containers"][0]["args"]
    return [a.replace("$(NODE_NAME)", "gpu-node-001") for a in args]


def unit_args(name: str) -> list[str]:
    text = (UNITS / f"gpuwarden-{name}.service").read_text()
    (line,) = [ln for ln in text.splitlines() if ln.startswith("ExecStart=")]
    argv = shlex.split(line.partition("=")[2])
    assert argv[-1] == f"${name.upper()}_ARGS"  # the site's extra flags, empty here
    return argv[1:-1]


def relocate(args: list[str], tmp: Path, files: dict[str, str | None]) -> list[str]:
    """Point path flags at temp files (None: a path only; same values otherwise)."""
    out = []
    for arg in args:
        for flag, content in files.items():
            if arg.startswith(flag + "=") or arg == flag:
                path = tmp / flag.strip("-")
                if content is not None:
                    path.write_text(content)
                    path.chmod(0o600)  # secrets readable by others are refused
                arg = f"{flag}={path}"
        out.append(arg)
    return out


def pairs_to_equals(args: list[str]) -> list[str]:
    return [f"{f}={v}" for f, v in zip(args[::2], args[1::2], strict=True)]


def _state_in(args: list[str], tmp: Path) -> tuple[list[str], str]:
    """The shipped --kmsg-state path, moved under ``tmp`` (its directory is the host's: a
    systemd StateDirectory or a hostPath DirectoryOrCreate, absent on this machine)."""
    out, shipped = [], ""
    for a in args:
        if a.startswith("--kmsg-state"):
            shipped = a.split("=", 1)[1] if "=" in a else ""
            a = f"--kmsg-state={tmp / Path(shipped).name}" if shipped else a
        out.append(a)
    if not shipped and "--kmsg-state" in out:
        i = out.index("--kmsg-state")
        shipped, out[i + 1] = out[i + 1], str(tmp / Path(out[i + 1]).name)
    return out, shipped


def test_exporter_settings_load_from_the_daemonset_args(tmp_path: Path) -> None:
    from exporter.cli import settings_from

    args, shipped = _state_in(k8s_args("gpuwarden-exporter"), tmp_path)
    settings, web_config, _ = settings_from(args)
    assert settings.node == "gpu-node-001" and settings.source == "nvml"
    assert settings.sysfs_root == "/host/sys" and settings.kmsg == "/dev/kmsg"
    assert settings.listen == "0.0.0.0:9835" and web_config is None
    assert shipped == "/var/lib/gpuwarden/xid-state.json"  # the state hostPath's mount


def test_exporter_settings_load_from_the_unit_args(tmp_path: Path) -> None:
    from exporter.cli import settings_from

    args, shipped = _state_in(unit_args("exporter"), tmp_path)
    settings, _, _ = settings_from(args)
    assert settings.job_map_dir == "/run/gpuwarden/jobs" and settings.interval == 15
    assert shipped == "/var/lib/gpuwarden-exporter/xid-state.json"  # StateDirectory=


def analyzer_settings(args: list[str]) -> Any:
    from analyzer.cli import _parser
    from analyzer.settings import AnalyzerSettings
    from common.settings import load

    flags = vars(_parser().parse_args(args))
    assert flags.pop("config") is None and flags.pop("once") is False
    return load(AnalyzerSettings, flags, env={})


def test_analyzer_settings_load_from_the_deployment_args() -> None:
    settings = analyzer_settings(k8s_args("gpuwarden-analyzer"))
    assert settings.prometheus == "http://prometheus-operated.monitoring.svc:9090"
    assert settings.host_port == ("0.0.0.0", 9837) and settings.interval == 30


def test_analyzer_settings_load_from_the_unit_args() -> None:
    settings = analyzer_settings(pairs_to_equals(unit_args("analyzer")))
    assert settings.prometheus == "http://127.0.0.1:9090"
    assert settings.host_port == ("127.0.0.1", 9837)  # Prometheus scrapes it on its own host


def policy_text() -> str:
    (cm,) = [d for d in build(KUBE / "base") if d["metadata"]["name"] == "gpuwarden-remediation-policy"]  # fmt: skip
    return str(cm["data"]["policy.yaml"])


def test_remediation_settings_load_from_the_deployment_args(tmp_path: Path) -> None:
    from remediation.cli import load_settings

    files: dict[str, str | None] = {
        "--policy": policy_text(),
        "--webhook-token-file": "s3cret-of-at-least-thirty-two-bytes\n",
        "--state-db": None,
    }
    settings, check = load_settings(relocate(k8s_args("gpuwarden-remediation"), tmp_path, files))
    assert settings.backend == "kubernetes" and not check
    assert settings.host_port == ("0.0.0.0", 9836)
    assert settings.webhook_token is None  # the token only ever comes from the file
    assert settings.alertmanager == "http://alertmanager-operated.monitoring.svc:9093"


def test_remediation_check_accepts_the_unit_args_with_the_shipped_policy(
    tmp_path: Path, capsys: Any
) -> None:
    from remediation.cli import main

    args = pairs_to_equals(unit_args("remediation"))
    files: dict[str, str | None] = {
        "--policy": policy_text(),
        "--webhook-token-file": "s3cret-of-at-least-thirty-two-bytes\n",
        "--state-db": None,
    }
    assert main([*relocate(args, tmp_path, files), "--check"]) == 0
    assert "ok:" in capsys.readouterr().out


def test_the_unit_with_the_example_policy_observes_slurm_without_acting(
    tmp_path: Path, capsys: Any
) -> None:
    from remediation.cli import main

    args = pairs_to_equals(unit_args("remediation"))
    files: dict[str, str | None] = {
        "--policy": (ROOT / "deploy/remediation/policy.example.yaml").read_text(),
        "--webhook-token-file": "s3cret-of-at-least-thirty-two-bytes\n",
        "--state-db": None,
    }
    assert main([*relocate(args, tmp_path, files), "--check"]) == 0
    out = capsys.readouterr().out
    assert "mode: dry-run" in out and "reading nodes and jobs from slurm" in out


@pytest.mark.parametrize("args", [["--backend=slurm", "--listen=nonsense"]])
def test_a_bad_flag_value_would_stop_the_start(args: list[str], tmp_path: Path) -> None:
    # The check above can fail: the same path rejects a malformed value.
    from remediation.cli import main

    assert main([*args, f"--state-db={tmp_path / 'db'}", "--check"]) == 2
