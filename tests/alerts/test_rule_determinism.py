"""A given input pages the same way every run: each alert reads only recordings evaluated
earlier in its own group (Prometheus runs groups concurrently, each on its own timer, so a
read across groups sees the recording one evaluation late or early), and the whole promtool
suite passes with the rule files and groups in the reverse order. This holds for
the generated xid.rules.yml too (alerts/generate_xid_rules.py emits one group, recordings
first).
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.alerts.ruleset import RULE_FILES, TEST_FILES
from tests.realcomp import require_binary


def recordings() -> dict[str, tuple[str, str, int]]:
    out = {}
    for f in RULE_FILES:
        for g in yaml.safe_load(f.read_text())["groups"]:
            for i, r in enumerate(g["rules"]):
                if "record" in r:
                    out[r["record"]] = (f.name, g["name"], i)
    return out


def test_every_alert_reads_only_recordings_evaluated_before_it_in_its_own_group() -> None:
    rec, wrong = recordings(), []
    for f in RULE_FILES:
        for g in yaml.safe_load(f.read_text())["groups"]:
            for i, r in enumerate(g["rules"]):
                for name, (_, group, at) in rec.items():
                    reads = re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", str(r["expr"]))
                    if reads and (group != g["name"] or at >= i):
                        wrong.append(f"{f.name}: {r.get('alert') or r.get('record')} reads {name}")
    assert wrong == []


def reordered_suite(tmp: Path) -> list[str]:
    """Every promtool test file with its rule files and its groups in the reverse of the order
    test_promtool.py runs them in. Whether a read across groups sees a recording late depends
    only on which of the two groups runs first; reversed, every pair runs the other way round,
    so this order and the shipped one together cover every pair (three random orders did not
    prove that, and cost three promtool passes of a busy core each)."""
    out = []
    for f in TEST_FILES:
        spec = yaml.safe_load(f.read_text())
        rules = [(f.parent / r).resolve() for r in spec["rule_files"]]
        groups = [g["name"] for r in rules for g in yaml.safe_load(r.read_text())["groups"]]
        spec["rule_files"] = [str(r) for r in reversed(rules)]
        spec["group_eval_order"] = groups[::-1]
        (tmp / f.name).write_text(yaml.safe_dump(spec, sort_keys=False))
        out.append(str(tmp / f.name))
    return out


def test_the_reordered_suite_reverses_every_pair_of_groups(tmp_path: Path) -> None:
    for f, written in zip(TEST_FILES, reordered_suite(tmp_path), strict=True):
        spec = yaml.safe_load(f.read_text())
        shipped = [
            g["name"]
            for r in spec["rule_files"]
            for g in yaml.safe_load((f.parent / r).read_text())["groups"]
        ]
        order = yaml.safe_load(Path(written).read_text())["group_eval_order"]
        assert order == shipped[::-1], f.name
        assert len(set(order)) == len(order), f"{f.name}: a group name twice, order ambiguous"


@pytest.mark.real
def test_the_whole_promtool_suite_passes_with_every_group_order_reversed(tmp_path: Path) -> None:
    argv = [require_binary("promtool"), "test", "rules", *reordered_suite(tmp_path)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)  # the whole suite
    assert done.returncode == 0, (done.stdout + done.stderr)[-4000:]
