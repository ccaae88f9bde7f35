"""docs/deploy.md describes what is shipped: its paths exist and its names match the files."""

from __future__ import annotations

import re

from tests.deploy.support import KUBE, ROOT, build

DOC = (ROOT / "docs" / "deploy.md").read_text()


def test_every_path_the_deploy_guide_names_exists() -> None:
    paths = set(
        re.findall(r"`((?:deploy|alerts|remediation|dashboards|benchmarks)/[^`\s<>*]*)`", DOC)
    )
    assert len(paths) > 10
    missing = sorted(p for p in paths if not (ROOT / p.rstrip("/")).exists())
    assert missing == []


def test_the_guide_creates_the_secret_and_names_the_service_the_manifests_use() -> None:
    docs = build(KUBE / "base")
    (deployment,) = [d for d in docs if d["metadata"]["name"] == "gpuwarden-remediation"
                     and d["kind"] == "Deployment"]  # fmt: skip
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    (secret,) = [v["secret"]["secretName"] for v in volumes if "secret" in v]
    assert f"create secret generic {secret}" in DOC
    ns = deployment["metadata"]["namespace"]
    assert f"http://gpuwarden-remediation.{ns}.svc:9836/alertmanager" in DOC


def test_the_measured_numbers_table_is_present_for_the_benchmarks() -> None:
    section = DOC.split("### Measured numbers", 1)[1]
    rows = [ln for ln in section.splitlines() if ln.startswith("| ") and "---" not in ln]
    assert len(rows) >= 5 and rows[0].startswith("| quantity | measured |")
