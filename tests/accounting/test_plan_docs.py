"""The planner's output pasted in README.md and docs/accounting.md is what the command prints
today for the README's simulated year (seed 2026, one lemon)."""

import json
from pathlib import Path

import pytest

from gpuwarden import cli
from simulator import reliability_year as ry

ROOT = Path(__file__).resolve().parents[2]
PLAN = ["--plan", "H100", "--plan-gpus", "1024,4096", "--checkpoint-cost", "5m",
        "--restart-time", "10m"]  # fmt: skip


def test_the_pasted_plan_is_what_the_command_prints_for_the_readmes_year(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    year = ry.simulate(2026, ry.Setup(lemons=1))
    inc, exp = tmp_path / "incidents.jsonl", tmp_path / "exposure.jsonl"
    inc.write_text("".join(json.dumps(o) + "\n" for o in year.incidents))
    exp.write_text("".join(json.dumps(o) + "\n" for o in year.exposure))
    assert cli.main(["report", "--incidents", str(inc), "--exposure", str(exp), *PLAN]) == 0
    out = capsys.readouterr().out
    block = out[out.index("Planning: ") :]
    assert block.count("\n") == 17
    for doc in ("README.md", "docs/accounting.md"):
        text = (ROOT / doc).read_text()
        assert " ".join(PLAN) in text.replace("\\\n  ", ""), doc
        assert f"```\n{block}```" in text, doc
