"""`gpuwarden report --plan`: the planner's block in the text report, its key in the JSON,
its table in the HTML page, and bad settings refused with one line before anything is read."""

import json
from pathlib import Path

import pytest

from gpuwarden import cli
from tests.accounting.builders import at, gpus, incident, job

PLAN = ["--plan", "H100", "--plan-gpus", "8,64", "--checkpoint-cost", "5m"]


def _write(path: Path, objs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


@pytest.fixture
def files(tmp_path: Path) -> list[str]:
    incs = [
        incident(f"i{k}", onset=at(10 * k + 1), detected=at(10 * k + 1),
                 mitigated=at(10 * k + 2), returned=at(10 * k + 6), gpus_out=8)
        for k in range(4)
    ]  # fmt: skip
    fleet = gpus("n1", 8, at(0), at(1000)) + gpus("n2", 2, at(0), at(1000))
    return [
        "--incidents", str(_write(tmp_path / "i.jsonl", incs)),
        "--exposure", str(_write(tmp_path / "e.jsonl", fleet)),
    ]  # fmt: skip


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_the_text_report_ends_with_a_plan_block_per_job_size(files, capsys) -> None:
    rc, out, _ = _run([*files, *PLAN], capsys)
    assert rc == 0
    plan = out[out.index("Planning: checkpoint cost 5.0 min") :]
    assert "H100, 8 GPUs on 1 node\n" in plan and "H100, 64 GPUs on 8 nodes" in plan
    # 8 GPUs x 4 failures / 10,000 GPU-h x 24 h
    assert "failures a day        0.077 [" in plan
    assert "Daly's higher-order optimum" in plan
    assert "4 repair times measured" in plan


def test_the_json_report_carries_the_plan_beside_the_contracts_keys(files, capsys) -> None:
    rc, out, _ = _run([*files, *PLAN, "--format", "json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert doc["plan"]["settings"]["checkpoint_s"] == 300.0
    small, big = doc["plan"]["jobs"]
    assert (small["gpus"], big["gpus"], big["nodes"]) == (8, 64, 8)
    assert small["failures_per_day"]["estimate"] == pytest.approx(0.0768)
    assert big["failures_per_day"]["estimate"] == pytest.approx(8 * 0.0768)
    band = big["ettr"]
    assert band["low"] < band["estimate"] < band["high"]


def test_a_measured_restart_time_is_printed_with_its_count(tmp_path: Path, capsys) -> None:
    incs = [
        incident(f"r{k}", onset=at(10 * k), detected=at(10 * k),
                 jobs=[job("j", 8, at(10 * k), resumed=at(10 * k + 0.25), last_checkpoint=at(1))])
        for k in (1, 2, 3)
    ]  # fmt: skip
    files = [
        "--incidents", str(_write(tmp_path / "i.jsonl", incs)),
        "--exposure", str(_write(tmp_path / "e.jsonl", gpus("n1", 8, at(0), at(100)))),
    ]  # fmt: skip
    argv = [*files, "--plan", "H100", "--plan-gpus", "8", "--restart-time", "measured"]
    rc, out, _ = _run(argv, capsys)
    assert rc == 0
    assert "restart as measured;" in out
    assert "restart               15.0 min, the mean of 3 measured" in out
    _, out, _ = _run([*argv, "--format", "json"], capsys)
    doc = json.loads(out)["plan"]
    assert doc["settings"]["restart_s"] is None
    assert doc["jobs"][0]["restart_hours"] == pytest.approx(0.25)
    assert doc["jobs"][0]["restarts_measured"] == 3


def test_the_json_report_without_plan_has_no_plan_key(files, capsys) -> None:
    _, out, _ = _run([*files, "--format", "json"], capsys)
    assert "plan" not in json.loads(out)


def test_the_html_page_has_the_planners_table(files, capsys, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    assert _run([*files, *PLAN, "--html", str(page)], capsys)[0] == 0
    html = page.read_text()
    section = html[html.index("<h2>Planning</h2>") : html.index("<h2>Summary</h2>")]
    assert section.count("<tr>") == 3  # the header and one row per job size
    assert "<td>64</td><td>8</td>" in section


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (["--plan", "H100"], "--plan needs --plan-gpus"),
        (["--plan-gpus", "8"], "--plan-gpus needs --plan MODEL"),
        (["--plan", "H100", "--plan-gpus", "0"], "--plan-gpus: every job size"),
        (["--plan", "H100", "--plan-gpus", "8", "--checkpoint-cost=-1m"], "--checkpoint-cost"),
        (["--plan", "H100", "--plan-gpus", "8", "--restart-probability", "1.5"],
         "--restart-probability"),
        (["--plan", "B200", "--plan-gpus", "8"], "--plan: no MTBF cell with exposure for 'B200'"),
    ],
)  # fmt: skip
def test_a_bad_plan_setting_exits_2_with_one_line_and_prints_nothing(
    files, capsys, argv: list[str], why: str
) -> None:
    rc, out, err = _run([*files, *argv], capsys)
    assert rc == 2 and out == ""
    assert err.startswith(f"gpuwarden report: {why}") and err.count("\n") == 1
