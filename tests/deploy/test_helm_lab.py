"""`helm template` for every values set, then a server-side dry-run apply of what it renders
against the real API server (the Prometheus Operator's published CRDs installed first,
fixtures/crds). The namespaces the chart creates are applied for real first: a dry-run
create stores nothing, so without them every namespaced object would meet a 404, the
namespace-order defect this chart fixes by creating them."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import yaml

from tests.deploy.test_helm_chart import EXAMPLES, rendered
from tests.kube.shipped import DEPLOY, kustomize
from tests.kubelab import KubeLab

pytestmark = pytest.mark.real


class _NoValue(yaml.SafeLoader):
    """SafeLoader without YAML 1.1's `=` (value) resolver."""


_NoValue.yaml_implicit_resolvers = {
    k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:value"]
    for k, v in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
CRDS = Path(__file__).resolve().parents[2] / "fixtures" / "crds"


def install_operator_crds(lab: KubeLab, scratch: Path) -> None:
    """The Prometheus Operator CRDs the chart's optional objects need (fixtures/crds)."""
    for name in ("servicemonitors", "prometheusrules"):
        lab.install_crd(CRDS / f"monitoring.coreos.com_{name}.yaml")
    plain = scratch / "monitoring.coreos.com_alertmanagerconfigs.yaml"
    gz = CRDS / "monitoring.coreos.com_alertmanagerconfigs.yaml.gz"
    # its enums hold a bare `=`, which PyYAML reads as the YAML 1.1 value tag: read it with
    # that resolver dropped and hand install_crd the same object as JSON (also YAML)
    docs = [d for d in yaml.load_all(gzip.decompress(gz.read_bytes()), _NoValue) if d]
    plain.write_text("\n---\n".join(json.dumps(d) for d in docs))
    lab.install_crd(plain)


@pytest.fixture(scope="module")
def operator_crds(kube_lab: KubeLab, tmp_path_factory: pytest.TempPathFactory) -> None:
    install_operator_crds(kube_lab, tmp_path_factory.mktemp("crds"))


@pytest.mark.parametrize("values", EXAMPLES, ids=lambda p: p.stem)
def test_each_values_sets_rendering_passes_a_server_side_dry_run_apply(
    kube_lab: KubeLab, operator_crds: None, values: Path
) -> None:
    docs = rendered(values)
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    kube_lab.apply_yaml(namespaces, manager="helm-test")
    rest = [d for d in docs if d["kind"] != "Namespace"]
    kube_lab.apply_yaml(rest, manager="helm-test", dry_run=True)  # raises on any refusal
    assert rest, yaml.safe_dump(docs)


@pytest.mark.parametrize(
    ("overlay", "own"),
    [("analyzer-sharded", {"Role", "RoleBinding", "PodDisruptionBudget"}),
     ("remediation-standby", {"Role", "RoleBinding"})],
)  # fmt: skip
def test_the_overlays_build_passes_a_server_side_dry_run_apply(
    kube_lab: KubeLab, operator_crds: None, overlay: str, own: set[str]
) -> None:
    docs = kustomize(DEPLOY / "overlays" / overlay)
    kube_lab.apply_yaml([d for d in docs if d["kind"] == "Namespace"], manager="kustomize-test")
    rest = [d for d in docs if d["kind"] != "Namespace"]
    kube_lab.apply_yaml(rest, manager="kustomize-test", dry_run=True)  # raises on any refusal
    assert own <= {d["kind"] for d in rest}
