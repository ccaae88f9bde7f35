"""The bare-metal Prometheus configs: promtool-clean, loadable by Prometheus, wired to the jobs."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter import catalog
from tests import realcomp
from tests.deploy.support import ROOT, load_generator

PROM = ROOT / "deploy" / "prometheus"
CONFIGS = ["prometheus.yml", "prometheus-shard.yml"]
gen = load_generator()


def config(name: str) -> dict[str, Any]:
    return dict(yaml.safe_load((PROM / name).read_text()))


def rule_files() -> list[Path]:
    files = gen.alert_rule_files(ROOT)
    assert files, "alerts/ has no rule files"
    return list(files)


def install_tree(dest: Path) -> Path:
    """The /etc/prometheus layout docs/deploy.md describes, in a temp dir."""
    for name in CONFIGS:
        shutil.copy(PROM / name, dest / name)
    shutil.copytree(PROM / "gpuwarden-targets", dest / "gpuwarden-targets")
    (dest / "gpuwarden-rules").mkdir()
    for path in rule_files():
        shutil.copy(path, dest / "gpuwarden-rules" / path.name)
    return dest


@pytest.mark.parametrize("name", CONFIGS)
def test_promtool_check_config_accepts_the_config_and_its_rule_files(
    name: str, tmp_path: Path
) -> None:
    tree = install_tree(tmp_path)
    result = realcomp.promtool("check", "config", str(tree / name))
    out = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, out
    loaded = re.search(r"SUCCESS: (\d+) rule files found", out)
    assert loaded and int(loaded.group(1)) == len(rule_files_of(tree / name)) > 0, out


def rule_files_of(cfg: Path) -> list[Path]:
    found: list[Path] = []
    for pattern in yaml.safe_load(cfg.read_text())["rule_files"]:
        found += sorted(cfg.parent.glob(pattern))
    return found


def test_prometheus_loads_every_gpuwarden_rule_group() -> None:
    files = {f"gpuwarden-rules/{p.name}": p.read_text() for p in rule_files()}
    targets = PROM / "gpuwarden-targets" / "gpu-nodes.yml"
    files["gpuwarden-targets/gpu-nodes.yml"] = targets.read_text()
    expected = {g["name"] for p in rule_files() for g in gen.load_yaml(p.read_text())["groups"]}
    with realcomp.run_prometheus((PROM / "prometheus.yml").read_text(), files) as prom:
        body = json.loads(realcomp.http_get(f"{prom.url}/api/v1/rules"))
    assert {g["name"] for g in body["data"]["groups"]} == expected


def jobs(cfg: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {j["job_name"]: j for j in cfg["scrape_configs"]}


def test_the_three_services_are_scraped_on_their_contract_ports() -> None:
    cfg = jobs(config("prometheus.yml"))
    analyzer = cfg["gpuwarden-analyzer"]["static_configs"][0]["targets"]
    remediation = cfg["gpuwarden-remediation"]["static_configs"][0]["targets"]
    assert all(t.endswith(":9837") for t in analyzer)
    assert all(t.endswith(":9836") for t in remediation)
    exporter = cfg["gpuwarden-exporter"]["file_sd_configs"][0]["files"]
    assert exporter == ["gpuwarden-targets/*.yml"]
    for group in yaml.safe_load((PROM / "gpuwarden-targets" / "gpu-nodes.yml").read_text()):
        assert group["targets"] and all(t.endswith(":9835") for t in group["targets"])


def test_every_job_the_alert_rules_select_is_scraped() -> None:
    names = set(jobs(config("prometheus.yml")))
    text = "".join(p.read_text() for p in rule_files())
    selectors = re.findall(r'job\s*(=~|=)\s*"([^"]+)"', text)
    assert selectors, "the pipeline rules select on job"
    for op, value in selectors:
        regex = value if op == "=~" else re.escape(value)
        assert any(re.fullmatch(regex, n) for n in names), f"job{op}{value!r} matches no job"


def test_alerts_go_to_alertmanager_which_is_scraped_too() -> None:
    cfg = config("prometheus.yml")
    (am,) = cfg["alerting"]["alertmanagers"]
    targets = am["static_configs"][0]["targets"]
    assert targets == jobs(cfg)["alertmanager"]["static_configs"][0]["targets"]


def test_shard_keeps_one_hashmod_bucket_and_only_node_local_rules() -> None:
    cfg = config("prometheus-shard.yml")
    relabel = jobs(cfg)["gpuwarden-exporter"]["relabel_configs"]
    hashmod, keep = relabel[0], relabel[1]
    assert hashmod["action"] == "hashmod" and hashmod["source_labels"] == ["__address__"]
    assert keep == {
        "source_labels": [hashmod["target_label"]],
        "regex": cfg["global"]["external_labels"]["shard"],
        "action": "keep",
    }
    assert 0 <= int(keep["regex"]) < hashmod["modulus"]
    shard_rules = {Path(p).name for p in cfg["rule_files"]}
    for path in rule_files():
        text = path.read_text()
        # A shard sees only its own nodes: absent() fires on every shard, and the analyzer's
        # findings and pipeline health are scraped centrally.
        global_only = "absent(" in text or catalog.FINDING.name in text
        # remediation's own metrics are scraped centrally from the remediation service
        global_only |= any(
            d.name in text for d in catalog.all_metrics() if "_remediation_" in d.name
        )
        # a cluster-scope rule counts nodes across shards (storage: one alert per mount)
        global_only |= "scope: cluster" in text
        # a domain-scope rule counts an NVLink domain's nodes, which hashmod spreads over shards
        global_only |= "scope: domain" in text
        assert (path.name in shard_rules) != global_only, path.name
    assert shard_rules <= {p.name for p in rule_files()}
