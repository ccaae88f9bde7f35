"""The systemd units: the right entry points and contract flags, hardened, accepted by systemd."""

from __future__ import annotations

import shlex
import subprocess
import tomllib
from pathlib import Path

import pytest

from tests import realcomp
from tests.deploy.support import CONTRACT_FLAGS, ROOT

UNITS = ROOT / "deploy" / "systemd"
SERVICES = ["exporter", "analyzer", "remediation"]
PREFIX = "/opt/gpuwarden/bin/"

Unit = dict[str, dict[str, list[str]]]


def parse_unit(path: Path) -> Unit:
    """section -> key -> values (systemd keys may repeat, e.g. DeviceAllow)."""
    unit: Unit = {}
    section = None
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        assert not line.endswith("\\"), f"{path.name}: keep each setting on one line"
        if line.startswith("["):
            section = line.strip("[]")
            unit.setdefault(section, {})
            continue
        assert section, f"{path.name}: {line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: not key=value: {line!r}"
        unit[section].setdefault(key.strip(), []).append(value.strip())
    return unit


def service(name: str) -> dict[str, list[str]]:
    return parse_unit(UNITS / f"gpuwarden-{name}.service")["Service"]


def last(s: dict[str, list[str]], key: str) -> str:
    return s[key][-1]


def exec_flags(s: dict[str, list[str]]) -> tuple[str, dict[str, str]]:
    argv = shlex.split(last(s, "ExecStart"))
    binary, rest = argv[0], argv[1:]
    assert rest[-1].startswith("$") and rest[-1].endswith("_ARGS"), "site flags come last"
    pairs = rest[:-1]
    assert len(pairs) % 2 == 0 and all(f.startswith("--") for f in pairs[::2]), pairs
    return binary, dict(zip(pairs[::2], pairs[1::2], strict=True))


@pytest.mark.parametrize("name", SERVICES)
def test_execstart_runs_the_services_entry_point_with_contract_flags(name: str) -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    binary, flags = exec_flags(service(name))
    entry = f"gpuwarden-{name}"
    assert binary == PREFIX + entry and entry in scripts
    assert set(flags) <= CONTRACT_FLAGS[entry]
    # Only the exporter is scraped from another host; the rest bind loopback unless TLS is
    # configured (the drop-in and the default file say how).
    loopback = {"exporter": "0.0.0.0:98", "analyzer": "127.0.0.1:98", "remediation": "127.0.0.1:98"}
    assert flags["--listen"].startswith(loopback[name])


@pytest.mark.parametrize("name", SERVICES)
def test_every_unit_reads_its_default_file_and_is_sandboxed(name: str) -> None:
    unit = parse_unit(UNITS / f"gpuwarden-{name}.service")
    s = unit["Service"]
    assert s["EnvironmentFile"] == [f"-/etc/default/gpuwarden-{name}"]
    assert (UNITS / "default" / f"gpuwarden-{name}").is_file()
    for key, value in {
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "NoNewPrivileges": "yes",
        "PrivateTmp": "yes",
        "RestrictSUIDSGID": "yes",
        "SystemCallFilter": "@system-service",
    }.items():
        assert last(s, key) == value, f"{name}: {key}"
    assert last(s, "Restart") in {"on-failure", "always"}
    assert "MemoryMax" in s
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]


def test_exporter_is_a_dynamic_user_with_only_cap_syslog_and_read_only_host_views() -> None:
    s = service("exporter")
    _, flags = exec_flags(s)
    assert last(s, "DynamicUser") == "yes"
    assert last(s, "AmbientCapabilities") == last(s, "CapabilityBoundingSet") == "CAP_SYSLOG"
    assert last(s, "ProtectKernelLogs") == "no"  # "yes" would hide /dev/kmsg
    assert flags["--sysfs-root"] in s["ReadOnlyPaths"]
    assert flags["--kmsg"] == "/dev/kmsg" and "/dev/kmsg r" in s["DeviceAllow"]
    assert last(s, "DevicePolicy") == "closed"
    assert f"-{Path(flags['--job-map-dir']).parent}" in s["ReadOnlyPaths"]
    assert flags["--job-map-dir"] in (ROOT / "deploy/slurm/prolog.sh").read_text()


def test_analyzer_is_a_dynamic_user_without_capabilities_or_devices() -> None:
    s = service("analyzer")
    _, flags = exec_flags(s)
    assert last(s, "DynamicUser") == "yes"
    assert last(s, "CapabilityBoundingSet") == "" and last(s, "PrivateDevices") == "yes"
    assert flags["--prometheus"].startswith("http")


def test_remediation_keeps_state_in_its_state_directory_and_the_token_off_the_cmdline() -> None:
    s = service("remediation")
    _, flags = exec_flags(s)
    assert flags["--backend"] == "slurm"
    assert last(s, "User") == "slurm"  # the SlurmUser may scontrol update without root
    assert last(s, "CapabilityBoundingSet") == ""
    assert Path(flags["--state-db"]).parent == Path("/var/lib") / last(s, "StateDirectory")
    (cred,) = s["LoadCredential"]
    cred_name, _, source = cred.partition(":")
    assert flags["--webhook-token-file"] == "${CREDENTIALS_DIRECTORY}/" + cred_name
    assert source.startswith("/etc/gpuwarden/")
    assert "GPUWARDEN_WEBHOOK_TOKEN" not in (UNITS / "gpuwarden-remediation.service").read_text()
    assert Path(flags["--policy"]).parent.as_posix() in s["ReadOnlyPaths"]


def test_remediation_may_write_the_example_policys_ack_dir_and_nothing_else_outside_state() -> None:
    import yaml

    s = service("remediation")
    example = yaml.safe_load((ROOT / "deploy/remediation/policy.example.yaml").read_text())
    assert example["dry_run"] is True  # observe first
    assert s["ReadWritePaths"] == ["-" + example["checkpoint"]["ack_dir"]]


def test_the_tls_drop_ins_hand_over_credentials_the_default_files_and_web_config_name() -> None:
    from exporter.webconfig import load_web_config

    for name in ("exporter", "remediation"):
        drop_in = parse_unit(UNITS / f"gpuwarden-{name}.service.d" / "tls.conf")["Service"]
        creds = {c.partition(":")[0] for c in drop_in["LoadCredential"]}
        assert creds == {"tls.crt", "tls.key"}
        text = (UNITS / f"gpuwarden-{name}.service.d" / "tls.conf").read_text()
        if name == "remediation":
            for c in creds:
                assert f"/run/credentials/gpuwarden-{name}.service/{c}" in text
    web = (UNITS / "exporter-web.yml").read_text()
    for c in ("tls.crt", "tls.key"):
        assert f"/run/credentials/gpuwarden-exporter.service/{c}" in web
    assert (
        "--web-config /etc/gpuwarden/exporter-web.yml"
        in (UNITS / "default" / "gpuwarden-exporter").read_text()
    )
    # the exporter reads the file (and would open the key: here a real throw-away pair)
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        cert, key = realcomp.self_signed_cert(Path(d))
        local = Path(d) / "web.yml"
        local.write_text(
            web.replace("/run/credentials/gpuwarden-exporter.service/tls.crt", str(cert)).replace(
                "/run/credentials/gpuwarden-exporter.service/tls.key", str(key)
            )
        )
        assert load_web_config(local).ssl_context is not None


@pytest.mark.parametrize("name", SERVICES)
def test_default_files_only_set_args_or_gpuwarden_settings(name: str) -> None:
    prefix = f"{name.upper()}_ARGS"
    for line in (UNITS / "default" / f"gpuwarden-{name}").read_text().splitlines():
        key = line.lstrip("#").partition("=")[0]
        if "=" in line and " " not in key:
            assert key == prefix or key.startswith(("GPUWARDEN_", "SLURM_CONF")), line


def test_systemd_analyze_verify_accepts_every_unit(tmp_path: Path) -> None:
    binary = realcomp.require_binary("systemd-analyze")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    units = []
    for name in SERVICES:
        # verify also checks that ExecStart is executable: point it at a stand-in.
        stand_in = bindir / f"gpuwarden-{name}"
        stand_in.write_text("#!/bin/sh\n")
        stand_in.chmod(0o755)
        text = (UNITS / f"gpuwarden-{name}.service").read_text()
        unit = tmp_path / f"gpuwarden-{name}.service"
        unit.write_text(text.replace(PREFIX, f"{bindir}/"))
        units.append(str(unit))
    result = subprocess.run(
        [binary, "verify", "--man=no", *units], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr  # unknown keys are only warnings


def test_the_replica_drop_in_names_each_host_a_replica_meeting_in_the_shared_directory(
    tmp_path: Path,
) -> None:
    from analyzer.settings import AnalyzerSettings

    path = UNITS / "gpuwarden-analyzer.service.d" / "replica.conf"
    unit = parse_unit(path)
    env = dict(e.partition("=")[::2] for e in unit["Service"]["Environment"])
    assert env["GPUWARDEN_REPLICA"] == "%l"  # the short host name
    kind, _, where = env["GPUWARDEN_MEMBERSHIP"].partition(":")
    assert kind == "dir"
    # the unit may write there (ProtectSystem=strict otherwise) and waits for the mount
    assert unit["Service"]["ReadWritePaths"] == [where]
    assert unit["Unit"]["RequiresMountsFor"] == [where]
    # one static user on every host: each replica writes the leader file
    assert last(unit["Service"], "User") == "gpuwarden-analyzer"
    assert "useradd --system" in path.read_text() and where in path.read_text()
    # the analyzer takes them as settings (GPUWARDEN_<FIELD>), with the unit's own flags
    _, flags = exec_flags(service("analyzer"))
    s = AnalyzerSettings(prometheus=flags["--prometheus"], interval=float(flags["--interval"]),
                         replica="gpu-ctl-01", membership=env["GPUWARDEN_MEMBERSHIP"])  # fmt: skip
    assert s.membership == f"dir:{where}"
    # systemd accepts the unit with the drop-in (an unknown key or bad specifier would warn)
    verify_with_drop_in(tmp_path, "analyzer", path)


def verify_with_drop_in(tmp_path: Path, name: str, drop_in: Path) -> None:
    """``systemd-analyze verify`` of gpuwarden-<name>.service with ``drop_in`` installed
    beside it (ExecStart pointed at a stand-in, as verify checks it is executable): no error
    and no warning."""
    binary = realcomp.require_binary("systemd-analyze")
    stand_in = tmp_path / f"gpuwarden-{name}"
    stand_in.write_text("#!/bin/sh\n")
    stand_in.chmod(0o755)
    text = (UNITS / f"gpuwarden-{name}.service").read_text()
    unit = tmp_path / f"gpuwarden-{name}.service"
    unit.write_text(text.replace(PREFIX, f"{tmp_path}/"))
    (tmp_path / f"gpuwarden-{name}.service.d").mkdir()
    (tmp_path / f"gpuwarden-{name}.service.d" / drop_in.name).write_text(drop_in.read_text())
    result = subprocess.run(
        [binary, "verify", "--man=no", str(unit)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


def test_the_standby_drop_in_elects_through_the_shared_directory_the_unit_may_write(
    tmp_path: Path,
) -> None:
    from common import settings as gsettings
    from remediation.settings import Settings

    path = UNITS / "gpuwarden-remediation.service.d" / "standby.conf"
    unit = parse_unit(path)
    env = dict(e.partition("=")[::2] for e in unit["Service"]["Environment"])
    where = env["GPUWARDEN_LEADER_DIR"]
    assert env["GPUWARDEN_LEADER_ELECT"] == "directory"
    assert unit["Service"]["ReadWritePaths"] == [where]
    assert unit["Unit"]["RequiresMountsFor"] == [where]
    # a fail-stopped leader (exit 75) comes back as the standby
    assert last(service("remediation"), "Restart") == "always"
    # the journal on the share: the site's flags (last on the command line) name it there
    text = path.read_text()
    assert f"--state-db {where}/state.db" in text and "/readyz" in text
    s = gsettings.load(Settings, {}, env=env)
    assert (s.leader_elect, str(s.leader_dir)) == ("directory", where)
    verify_with_drop_in(tmp_path, "remediation", path)
