"""docs/deploy.md's table of Kubernetes behaviours names real-server tests that exist, and a
test that runs on both control planes (the ``any_kube_lab`` fixture) is listed with both."""

from __future__ import annotations

import re
from pathlib import Path

from tests.kubelab import versions

ROOT = Path(__file__).resolve().parents[2]


def rows() -> list[tuple[list[tuple[str, str]], str]]:
    text = (ROOT / "docs" / "deploy.md").read_text()
    section = text.split("### Which Kubernetes behaviours are proven on a real API server")[1]
    out = []
    for line in section.split("\n\n| behaviour |")[1].split("\n\n")[0].splitlines()[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        refs, path = [], ""
        for ref in re.findall(r"`([^`]+::[^`]+)`", cells[1]):
            where, name = ref.split("::")
            path = path if where == "..." else where
            refs.append((path, name))
        out.append((refs, cells[2]))
    return out


def test_every_test_the_table_names_exists_and_lists_the_versions_it_runs_on() -> None:
    table = rows()
    assert len(table) >= 15
    both = {versions()["KUBE_VERSION"].lstrip("v"), versions()["OLDEST_KUBE_VERSION"].lstrip("v")}
    for refs, said in table:
        assert refs, said
        listed = set(re.findall(r"\d+\.\d+\.\d+", said))
        assert listed and listed <= both, said
        for path, name in refs:
            source = (ROOT / path).read_text()
            m = re.search(rf"^(?:async )?def {name}\((.*?)\) ->", source, re.M | re.S)
            assert m, f"{path}::{name} is not a test"
            if "any_kube_lab" in m.group(1):
                assert listed == both, f"{name} runs on both control planes: {said}"
