"""The bare-metal files agree: hosts, ports, token paths and directories named in
prometheus.yml, alertmanager.yml, the units, their default files and docs/deploy.md."""

from __future__ import annotations

import re

import yaml

from tests.deploy.support import ROOT
from tests.deploy.test_systemd_units import exec_flags, last, service

PROM = yaml.safe_load((ROOT / "deploy/prometheus/prometheus.yml").read_text())
AM = yaml.safe_load((ROOT / "deploy/alertmanager/alertmanager.yml").read_text())
DOC = (ROOT / "docs/deploy.md").read_text()
DEFAULTS = ROOT / "deploy/systemd/default"


def scrape_target(job: str) -> str:
    (cfg,) = [c for c in PROM["scrape_configs"] if c["job_name"] == job]
    ((target,),) = [s["targets"] for s in cfg["static_configs"]]
    return str(target)


def test_prometheus_scrapes_the_analyzer_and_remediation_where_their_units_listen() -> None:
    for name in ("analyzer", "remediation"):
        _, flags = exec_flags(service(name))
        assert scrape_target(f"gpuwarden-{name}") == flags["--listen"]


def test_alertmanager_is_where_prometheus_the_analyzer_and_remediation_look_for_it() -> None:
    ((am,),) = [s["targets"] for s in PROM["alerting"]["alertmanagers"][0]["static_configs"]]
    assert scrape_target("alertmanager") == am
    text = (DEFAULTS / "gpuwarden-remediation").read_text()
    active = [ln for ln in text.splitlines() if ln.startswith("REMEDIATION_ARGS=")]
    assert len(active) == 1  # one active line: nothing to uncomment twice
    assert f"--alertmanager http://{am}" in active[0]


def test_the_webhook_goes_where_remediation_listens_with_the_token_the_guide_copies() -> None:
    (recv,) = [r for r in AM["receivers"] if r["name"] == "gpuwarden-remediation"]
    (hook,) = recv["webhook_configs"]
    _, flags = exec_flags(service("remediation"))
    assert hook["url"] == f"http://{flags['--listen']}/alertmanager"
    token_for_am = hook["http_config"]["authorization"]["credentials_file"]
    (cred,) = service("remediation")["LoadCredential"]
    token = cred.partition(":")[2]
    # the guide creates the token where the unit loads it and copies it where Alertmanager reads
    assert f"openssl rand -hex 32 > {token})" in DOC
    assert re.search(rf"install -m 0640 -o root -g prometheus {token} {token_for_am}\b", DOC)


def test_rule_files_and_targets_are_where_the_guide_installs_them() -> None:
    (rules,) = PROM["rule_files"]
    assert f"/etc/prometheus/{rules.rsplit('/', 1)[0]}/" in DOC
    (sd,) = [c for c in PROM["scrape_configs"] if c["job_name"] == "gpuwarden-exporter"]
    (files,) = [f["files"] for f in sd["file_sd_configs"]]
    assert f"/etc/prometheus/{files[0].rsplit('/', 1)[0]}/" in DOC
    assert "install -m 0644 deploy/prometheus/prometheus.yml /etc/prometheus/prometheus.yml" in DOC


def test_the_ack_dir_is_the_same_in_the_policy_the_unit_and_the_guide() -> None:
    policy = yaml.safe_load((ROOT / "deploy/remediation/policy.example.yaml").read_text())
    ack = policy["checkpoint"]["ack_dir"]
    assert last(service("remediation"), "ReadWritePaths") == f"-{ack}"
    assert f"install -d -o slurm -g slurm -m 1777 {ack}" in DOC
