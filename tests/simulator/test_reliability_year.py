"""The simulated year knows the truth: the report on its interchange lines finds the true
failure rates inside its 90 % intervals at the stated rate over 200 years, and the same
GPU-hours lost."""

import json
from collections import defaultdict
from pathlib import Path

import pytest

from accounting import report
from accounting.interchange import exposure_from, incident_from
from gpuwarden import cli
from simulator import reliability_year as ry

SMALL_DENSE = ry.Setup(fleet=(("H100", 8), ("A100", 8)), rate_scale=10.0)


def _report(year: ry.Year) -> report.Report:
    return report.build(
        [incident_from(o) for o in year.incidents],
        [exposure_from(o) for o in year.exposure],
        since=year.since,
        until=year.until,
    )


def test_rates_are_the_published_counts_over_their_exposure() -> None:
    h100 = ry.rates("H100")
    assert h100["gpu"] == pytest.approx(196 / (16_384 * 54 * 24))
    assert h100["nic"] == pytest.approx(42 / (2_048 * 54 * 24))
    a100 = ry.rates("A100")
    assert a100["gpu"] / h100["gpu"] == pytest.approx(6.50 / (419 / (2_048 * 54) * 1000))


def test_a_seed_gives_the_same_year_every_time() -> None:
    assert ry.simulate(7).incidents == ry.simulate(7).incidents
    assert ry.simulate(7).incidents != ry.simulate(8).incidents


def test_the_report_on_the_exported_files_matches_the_true_gpu_hours_lost(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    year = ry.simulate(2026, ry.Setup(lemons=1))
    inc, exp = tmp_path / "incidents.jsonl", tmp_path / "exposure.jsonl"
    inc.write_text("".join(json.dumps(o) + "\n" for o in year.incidents))
    exp.write_text("".join(json.dumps(o) + "\n" for o in year.exposure))
    assert (
        cli.main(["report", "--incidents", str(inc), "--exposure", str(exp), "--format", "json"])
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["window"]["until"] == year.until  # the latest time in the files
    lost = doc["totals"]["gpu_hours_lost"]
    for cause in ("restart", "recompute", "capacity"):
        assert lost[cause] == pytest.approx(year.lost[cause], rel=0.01)
    truth = year.lost["restart"] + year.lost["recompute"] + year.lost["capacity"]
    assert lost["total"] == pytest.approx(truth, rel=0.01)
    assert len(doc["incidents"]) == len(year.incidents)
    assert year.lemon_units[0] in {lem["unit"] for lem in doc["lemons"]}


def test_job_ettr_is_productive_over_allocated_as_the_year_tallied_it() -> None:
    year = ry.simulate(11)
    rep = _report(year)
    lost = year.lost["restart"] + year.lost["recompute"]
    assert rep.ettr.gpu_hour_weighted == pytest.approx(1 - lost / year.lost["allocated"], rel=1e-6)


@pytest.mark.slow
def test_the_90_percent_intervals_cover_the_true_mtbf_about_90_percent_of_200_years() -> None:
    covered: dict[tuple[str, str], int] = defaultdict(int)
    seen: dict[tuple[str, str], int] = defaultdict(int)
    for seed in range(200):
        year = ry.simulate(seed, SMALL_DENSE)
        for cell in _report(year).cells:
            if cell.exposure_hours is None or cell.lower90 is None:
                continue
            key = (cell.gpu_model, cell.component)
            true_mtbf = 1.0 / year.true_rate[key]
            upper = cell.upper90 if cell.upper90 is not None else float("inf")
            covered[key] += cell.lower90 <= true_mtbf <= upper
            seen[key] += 1
    assert min(seen.values()) == 200 and len(seen) == 12
    pooled = sum(covered.values()) / sum(seen.values())
    assert 0.85 <= pooled <= 0.95
    # the exact interval is conservative with few failures, never much below its level
    assert all(covered[k] / seen[k] >= 0.82 for k in seen), {k: covered[k] / seen[k] for k in seen}
