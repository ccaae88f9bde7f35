"""The shipped rule files pass `promtool check rules`, and their unit tests pass `promtool
test rules` (real promtool, one call each)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.alerts.ruleset import RULE_FILES, TEST_FILES
from tests.realcomp import promtool

# On both Prometheus generations (tests/realcomp.py GENERATIONS).
pytestmark = [pytest.mark.real, pytest.mark.usefixtures("prom_generation")]


def test_there_is_a_rule_file_and_a_test_file_per_subject() -> None:
    subjects = {f.name.removesuffix(".rules.yml") for f in RULE_FILES}
    tested = {
        f.name.removesuffix("_test.yml")
        for f in TEST_FILES
        if not f.name.startswith("scenarios_")  # on-call scenarios span subjects (issue 17)
    }
    shipped = {"gpu", "memory", "nvlink", "infiniband", "xid", "findings", "pipeline"}
    assert shipped | {"remediation"} <= subjects
    assert tested == subjects


def test_every_rule_file_passes_promtool_check_rules() -> None:
    r = promtool("check", "rules", *map(str, RULE_FILES))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert r.stdout.decode().count("SUCCESS") == len(RULE_FILES)


def test_every_promtool_unit_test_passes() -> None:
    r = promtool("test", "rules", *map(str, TEST_FILES))
    out = r.stdout.decode() + r.stderr.decode()
    assert r.returncode == 0, out
    assert out.count("SUCCESS") == len(TEST_FILES), out


def test_promtool_test_rules_fails_on_a_wrong_expectation(tmp_path: Path) -> None:
    """The unit tests can fail: the same firing case with a wrong severity is rejected."""
    broken = (TEST_FILES[0].parent / "memory_test.yml").read_text()
    broken = broken.replace("rule_files: [../memory.rules.yml]", "rule_files: [RULES]")
    broken = broken.replace("severity: critical, action: drain", "severity: warning, action: drain")
    rules = TEST_FILES[0].parent.parent / "memory.rules.yml"
    (tmp_path / "t.yml").write_text(broken.replace("RULES", str(rules)))
    r = promtool("test", "rules", str(tmp_path / "t.yml"))
    assert r.returncode != 0
    assert "GpuEccUncorrectable" in r.stdout.decode() + r.stderr.decode()


def test_the_unit_tests_pass_whichever_rule_group_runs_first(tmp_path: Path) -> None:
    """Prometheus gives no order between groups: alerts may read the previous recording."""
    reordered = []
    for f in TEST_FILES:
        spec = yaml.safe_load(f.read_text())
        rules = [(f.parent / r).resolve() for r in spec["rule_files"]]
        groups = [g["name"] for r in rules for g in yaml.safe_load(r.read_text())["groups"]]
        if len(groups) < 2:
            continue
        spec["rule_files"] = [str(r) for r in rules]
        spec["group_eval_order"] = list(reversed(groups))
        out = tmp_path / f.name
        out.write_text(yaml.safe_dump(spec, sort_keys=False))
        reordered.append(str(out))
    if not reordered:  # every rule file is one group: nothing to reorder (test_rule_determinism)
        for f in RULE_FILES:
            assert len(yaml.safe_load(f.read_text())["groups"]) == 1, f.name
        return
    r = promtool("test", "rules", *reordered)
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
