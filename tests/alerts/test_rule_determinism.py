"""A given input pages the same way every run: each alert reads only recordings evaluated
earlier in its own group (Prometheus runs groups concurrently, each on its own timer, so a
read across groups sees the recording one evaluation late or early), and the whole promtool
suite gives the same results with the rule files and groups in any order. This holds for
the generated xid.rules.yml too (alerts/generate_xid_rules.py emits one group, recordings
first).
"""

from __future__ import annotations

import random
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


def shuffled_suite(tmp: Path, seed: int) -> list[str]:
    """Every promtool test file with its rule files and its groups in a random order."""
    rnd, out = random.Random(seed), []
    for f in TEST_FILES:
        spec = yaml.safe_load(f.read_text())
        rules = [(f.parent / r).resolve() for r in spec["rule_files"]]
        rnd.shuffle(rules)
        groups = [
            (r.name, g["name"]) for r in rules for g in yaml.safe_load(r.read_text())["groups"]
        ]
        rnd.shuffle(groups)
        spec["rule_files"] = [str(r) for r in rules]
        spec["group_eval_order"] = [g for _, g in groups]
        (tmp / f.name).write_text(yaml.safe_dump(spec, sort_keys=False))
        out.append(str(tmp / f.name))
    return out


@pytest.mark.real
def test_the_whole_promtool_suite_gives_the_same_results_in_any_group_order(
    tmp_path: Path,
) -> None:
    # the three orders run side by side (each promtool pass is one busy core for a minute)
    runs = []
    for seed in (1, 2, 3):
        d = tmp_path / f"seed{seed}"
        d.mkdir()
        argv = [require_binary("promtool"), "test", "rules", *shuffled_suite(d, seed)]
        runs.append((d, subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)))
    results = []
    try:
        for d, proc in runs:
            out, _ = proc.communicate(timeout=600)  # the whole suite: slow
            text = out.decode().replace(str(d), "DIR")
            assert proc.returncode == 0, text[-4000:]
            results.append(text)
    finally:
        for _, proc in runs:
            proc.kill()
            proc.wait()
    assert results[0] == results[1] == results[2]
