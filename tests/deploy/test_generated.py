"""Generated Kubernetes artefacts: fresh, faithful to their sources, and accepted downstream."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from tests import realcomp
from tests.deploy.crd_schemas import SCHEMAS
from tests.deploy.support import KUBE, ROOT, build, load_generator

gen = load_generator()
# kubectl apply (client side) stores the object in an annotation limited to 256 KiB.
LAST_APPLIED_LIMIT = 262144


@pytest.fixture(scope="module")
def docs() -> list[dict[str, Any]]:
    return build(KUBE / "base")


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] == kind]


def test_generated_files_are_up_to_date_with_alerts_dashboards_and_policy() -> None:
    if os.environ.get("UPDATE_GOLDEN"):
        gen.write(ROOT)
    diffs = gen.stale(ROOT)
    assert not diffs, "run `python deploy/generate.py --write`:\n" + "\n".join(diffs.values())


def test_every_alert_rule_file_becomes_one_prometheusrule_with_the_same_groups(docs) -> None:
    files = gen.alert_rule_files(ROOT)
    assert files, "alerts/ has no rule files"
    rules = {
        d["metadata"]["annotations"]["gpuwarden.io/source"]: d
        for d in of_kind(docs, "PrometheusRule")
    }
    assert set(rules) == {p.relative_to(ROOT).as_posix() for p in files}
    for path in files:
        source = gen.load_yaml(path.read_text())["groups"]
        assert rules[path.relative_to(ROOT).as_posix()]["spec"]["groups"] == source


def test_promtool_unit_tests_are_not_shipped_as_rules() -> None:
    shipped = {p.name for p in gen.alert_rule_files(ROOT)}
    for path in (ROOT / "alerts").rglob("*.y*ml"):
        if "tests" in gen.load_yaml(path.read_text()):
            assert path.name not in shipped


VARIANTS = ["base", "overlays/dcgm-exporter", "overlays/amd-device-metrics-exporter"]


@pytest.fixture(scope="module", params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    """The base's objects, then each exporter variant overlay's (its own rules and dashboards)."""
    return build(KUBE / request.param)


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_operator_custom_resources_match_their_crd_schema(variant, kind: str) -> None:
    found = of_kind(variant, kind)
    assert found
    for doc in found:
        jsonschema.validate(doc, SCHEMAS[kind])


def test_prometheusrule_groups_pass_promtool_check_rules(variant, tmp_path: Path) -> None:
    files = []
    for doc in of_kind(variant, "PrometheusRule"):
        path = tmp_path / f"{doc['metadata']['name']}.yml"
        path.write_text(yaml.safe_dump({"groups": doc["spec"]["groups"]}, sort_keys=False))
        files.append(str(path))
    result = realcomp.promtool("check", "rules", *files)
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert result.stdout.decode().count("SUCCESS") == len(files)


def test_group_names_are_unique_across_prometheusrules(variant) -> None:
    # The operator loads every PrometheusRule into one Prometheus; duplicate group names confuse
    # the rule manager's status pages and alert provenance.
    names = [g["name"] for d in of_kind(variant, "PrometheusRule") for g in d["spec"]["groups"]]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("dashboards", ["", "dcgm"], ids=["native", "dcgm"])
def test_each_dashboard_is_one_sidecar_configmap_small_enough_to_apply(dashboards: str) -> None:
    files = gen.dashboard_files(ROOT, dashboards)
    assert files
    docs = build(KUBE / VARIANTS[bool(dashboards)])
    maps = [d for d in of_kind(docs, "ConfigMap") if "grafana_dashboard" in d["metadata"]["labels"]]
    assert len(maps) == len(files)
    by_key = {key: (cm, text) for cm in maps for key, text in cm["data"].items()}
    for path in files:
        cm, text = by_key[path.name]
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert json.loads(text) == json.loads(path.read_text())
        assert len(json.dumps(cm)) < LAST_APPLIED_LIMIT, f"{path.name}: use server-side apply"


def test_policy_configmap_is_the_default_policy_and_the_remediation_parser_accepts_it(
    docs,
) -> None:
    from remediation import policy

    (cm,) = [d for d in docs if d["metadata"]["name"] == "gpuwarden-remediation-policy"]
    text = cm["data"]["policy.yaml"]
    assert text == (ROOT / "remediation/default_policy.yaml").read_text()
    assert policy.loads(text).dry_run is True  # a fresh install observes before it acts


def make_root(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / "alerts" / "tests").mkdir(parents=True)
    (root / "dashboards" / "json").mkdir(parents=True)
    (root / "remediation").mkdir()
    rule = {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0"}]}]}
    (root / "alerts" / "gpu.rules.yml").write_text(yaml.safe_dump(rule))
    unit = {"rule_files": ["../gpu.rules.yml"], "tests": []}
    (root / "alerts" / "gpu_test.yml").write_text(yaml.safe_dump(unit))
    (root / "alerts" / "tests" / "more.yml").write_text(yaml.safe_dump(rule))
    (root / "dashboards" / "json" / "gpuwarden-GPU_Fleet.json").write_text('{"title": "GPU"}')
    shutil.copy(ROOT / "remediation/default_policy.yaml", root / "remediation")
    return root


def test_generator_wraps_rule_files_but_skips_promtool_tests(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    assert [p.name for p in gen.alert_rule_files(root)] == ["gpu.rules.yml"]
    (rule,) = gen.prometheus_rules(root)
    assert rule["metadata"]["name"] == "gpuwarden-gpu-rules"
    (dash,) = gen.dashboard_configmaps(root)
    assert dash["metadata"]["name"] == "gpuwarden-dashboard-gpu-fleet"


def test_check_mode_fails_with_a_diff_until_write_refreshes(tmp_path: Path, capsys) -> None:
    root = make_root(tmp_path)
    assert gen.main(["--root", str(root)]) == 1
    assert gen.main(["--root", str(root), "--write"]) == 0
    assert gen.main(["--root", str(root)]) == 0
    (root / "alerts" / "gpu.rules.yml").write_text(
        yaml.safe_dump({"groups": [{"name": "g", "rules": [{"alert": "B", "expr": "up"}]}]})
    )
    capsys.readouterr()
    assert gen.main(["--root", str(root)]) == 1
    out = capsys.readouterr().out
    assert "+    - alert: B" in out and "-    - alert: A" in out


def test_list_rule_files_prints_what_bare_metal_installs(tmp_path: Path, capsys) -> None:
    root = make_root(tmp_path)
    assert gen.main(["--root", str(root), "--list-rule-files"]) == 0
    assert capsys.readouterr().out == "alerts/gpu.rules.yml\n"


def test_a_broken_dashboard_stops_generation(tmp_path: Path) -> None:
    root = make_root(tmp_path)
    (root / "dashboards" / "json" / "bad.json").write_text("{not json")
    with pytest.raises(json.JSONDecodeError):
        gen.render(root)


def test_the_charts_sharded_analyzer_follows_the_overlays_patch_and_refuses_other_ops(
    tmp_path: Path,
) -> None:
    for rel in ("alerts", "dashboards/json", "deploy/kubernetes", "deploy/helm"):
        shutil.copytree(ROOT / rel, tmp_path / rel)
    (tmp_path / "remediation").mkdir()
    shutil.copy(ROOT / "remediation" / "default_policy.yaml", tmp_path / "remediation")
    assert gen.stale(tmp_path) == {}
    kfile = tmp_path / "deploy/kubernetes/overlays/analyzer-sharded/kustomization.yaml"
    text = kfile.read_text()
    kfile.write_text(text.replace("value: 60\n", "value: 90\n", 1))  # minReadySeconds
    stale = gen.stale(tmp_path)
    assert list(stale) == [Path("deploy/helm/gpuwarden/templates/analyzer.yaml")]
    assert "+  minReadySeconds: 90" in stale[next(iter(stale))]
    # an op the chart's renderer does not apply stops the generation, not the helm install
    kfile.write_text(text.replace("- op: add\n", "- op: remove\n", 1))
    with pytest.raises(ValueError, match="unsupported patch op 'remove'"):
        gen.render(tmp_path)
