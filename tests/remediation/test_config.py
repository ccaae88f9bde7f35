"""Every shipped policy/topology file parses; bad ones stop the start with one line."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from common.settings import SettingsError
from remediation import intake, policy, topology
from remediation.backends.hostlist import expand
from tests.realcomp import require_binary

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "remediation"


def test_the_shipped_default_policy_is_dry_run_and_valid() -> None:
    p = policy.load(None)
    assert p.dry_run and not p.auto_release
    assert p.ladders["xid_fatal"][-1] == "inspect"
    assert p.rule_for({"fault_class": "thermal"}).allow == {"notify"}  # type: ignore[union-attr]


def test_the_example_policy_and_topology_parse() -> None:
    p = policy.load(DEPLOY / "policy.example.yaml")
    assert p.dry_run and p.per_job_max_nodes == 1 and p.domain_budgets["leaf"].max_nodes == 4
    topo = topology.load(DEPLOY / "topology.example.yaml")
    assert topo["gpu-node-001"] == {"leaf": "leaf-01", "rack": "r01", "nvlink_domain": "nvl-01"}
    assert topo["gpu-node-004"] == {"leaf": "leaf-02", "rack": "r02"}


def test_every_deploy_yaml_is_valid_yaml() -> None:
    files = sorted(DEPLOY.glob("*.yaml"))
    assert len(files) >= 4
    for f in files:
        assert isinstance(yaml.safe_load(f.read_text()), dict), f


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("dry_run: maybe", "dry_run"),
        ("colour: blue", "unknown key"),
        ("rules: [{match: {}, allow: [nuke]}]", "unknown action"),
        ("rules: [{match: {node: '~['}, allow: [drain]}]", "bad regex"),
        ("budgets: {fleet: {max_fraction: 1.5}}", "max_fraction"),
        ("checkpoint: {on_timeout: pray}", "on_timeout"),
        ("kubernetes: {taint_effect: PreferNoSchedule}", "taint_effect"),
        ("storm: {max_nodes: 0}", "storm.max_nodes"),
        ("[1, 2]", "mapping"),
        ("a: [", "not valid YAML"),
    ],
)
def test_a_bad_policy_is_one_line_naming_the_problem(text: str, words: str) -> None:
    with pytest.raises(SettingsError) as e:
        policy.loads(text)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_slurm_hostlists_expand() -> None:
    assert expand("gpu-node-[001-003,007],vm") == (
        "gpu-node-001",
        "gpu-node-002",
        "gpu-node-003",
        "gpu-node-007",
        "vm",
    )
    assert expand("") == ()


def test_intake_keeps_labels_and_the_idempotency_key() -> None:
    body = (
        b'{"version":"4","alerts":[{"status":"firing","labels":{"node":"n1"},'
        b'"fingerprint":"abc","startsAt":"2026-01-01T00:00:00Z"}]}'
    )
    [a] = intake.parse(body)
    assert a.node == "n1" and a.key == "abc|2026-01-01T00:00:00Z|firing"


@pytest.mark.real
def test_the_alertmanager_receiver_example_passes_amtool_and_routes_drains_to_gpuwarden() -> None:
    amtool = require_binary("amtool")
    f = str(DEPLOY / "alertmanager-receiver.yaml")
    assert (
        subprocess.run([amtool, "check-config", f], capture_output=True, timeout=60).returncode == 0
    )
    routes = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={f}", "action=drain", "node=n1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "gpuwarden-remediation" in routes.stdout
    notify = subprocess.run(
        [amtool, "config", "routes", "test", f"--config.file={f}", "action=notify"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "gpuwarden-remediation" not in notify.stdout


def demo_topology(nodes: int = 32) -> dict[str, dict[str, str]]:
    """What `gpuwarden demo` writes for remediation: the simulator's own leaf switches."""
    from simulator.fleet import Fleet

    fleet = Fleet(nodes, 0)
    return {n: {"leaf": leaf} for n, leaf in zip(fleet.nodes, fleet.leaf_of, strict=True)}


@pytest.mark.parametrize("nodes", [21, 32, 256])
def test_the_default_policy_passes_check_on_the_example_and_demo_topologies(nodes: int) -> None:
    from remediation import policy_check

    example = topology.load(DEPLOY / "topology.example.yaml")
    for topo in (example, demo_topology(nodes)):
        lines, problems = policy_check.check(policy.load(None), topo)
        assert problems == [] and lines
    lines, _ = policy_check.check(policy.load(None), example)
    assert "nvlink_domain nvl-01: 2 nodes -> limit 1" in lines


def test_check_fails_on_a_domain_whose_limit_is_zero_unless_the_policy_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from remediation import cli

    (tmp_path / "t.yaml").write_text(
        "domains: {nvlink_domain: {nvl-01: [a, b, c, d]}}\nnodes: {e: {leaf: l1}, f: {leaf: l1}}\n"
    )
    text = policy.default_text().replace(
        "max_fraction: 0.5, max_nodes: 1", "max_fraction: 0.125, max_nodes: 1"
    )
    (tmp_path / "p.yaml").write_text(text)
    argv = ["--policy", str(tmp_path / "p.yaml"), "--topology", str(tmp_path / "t.yaml")]
    argv += ["--state-db", str(tmp_path / "s.db"), "--check", "--allow-unauthenticated"]
    assert cli.main(argv) == 2
    out = capsys.readouterr()
    assert "nvlink_domain nvl-01: 4 nodes -> limit 0" in out.out
    assert "limit of 0" in out.err and "allow_zero" in out.err
    explicit = text.replace(
        "max_fraction: 0.125, max_nodes: 1}", "max_fraction: 0.125, max_nodes: 1, allow_zero: true}"
    )
    (tmp_path / "p.yaml").write_text(explicit)
    assert cli.main(argv) == 0


@pytest.mark.parametrize(
    ("mode", "token", "words"),
    [
        (0o644, "x" * 40, "readable by group or others"),
        (0o640, "x" * 40, "chmod 600"),
        (0o600, "short", "need at least 32"),
    ],
)
def test_a_loose_or_short_token_file_stops_the_start(
    tmp_path: Path, mode: int, token: str, words: str
) -> None:
    from remediation import auth

    f = tmp_path / "token"
    f.write_text(token + "\n")
    f.chmod(mode)
    with pytest.raises(SettingsError) as e:
        auth.load(None, f, None)
    assert words in str(e.value) and "\n" not in str(e.value)


def test_a_short_token_in_the_environment_stops_the_start() -> None:
    from remediation import auth

    with pytest.raises(SettingsError, match="GPUWARDEN_WEBHOOK_TOKEN"):
        auth.load("hunter2", None, None)
    assert auth.load("y" * 32, None, None).token == "y" * 32


def test_a_topology_file_takes_a_leaf_per_port_and_ibnetdiscover_output_beside_it(
    tmp_path: Path,
) -> None:
    fixture = Path(__file__).parents[2] / "fixtures" / "fabric" / "ibnetdiscover-rail-su.txt"
    (tmp_path / "fabric.txt").write_text(fixture.read_text())
    (tmp_path / "t.yaml").write_text(
        "ibnetdiscover: fabric.txt\n"
        "nodes:\n"
        "  gpu-node-001: {rack: r01, su: su1, nvlink_domain: nvl72-01}\n"
        "  gpu-node-009: {ports: {mlx5_0/1: su2-rail0}}\n"
    )
    topo = topology.load(tmp_path / "t.yaml")
    assert topo["gpu-node-001"]["leaf.mlx5_2.1"] == "su1-leaf-rail2"
    assert topo["gpu-node-001"]["spine_group.mlx5_2.1"] == "sg2-spine-01"
    assert topo["gpu-node-001"]["nvlink_domain"] == "nvl72-01"
    assert topo["gpu-node-009"] == {"leaf.mlx5_0.1": "su2-rail0"}
    from remediation import policy_check

    sizes = policy_check.domain_sizes(topo)
    assert sizes["leaf"]["su1-leaf-rail0"] == 4 and sizes["spine_group"]["sg1-spine-01"] == 4
    (tmp_path / "bad.yaml").write_text("ibnetdiscover: missing.txt\n")
    with pytest.raises(SettingsError, match=r"missing\.txt"):
        topology.load(tmp_path / "bad.yaml")
