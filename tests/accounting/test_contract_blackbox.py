"""Issue 27's interchange contract, checked from the outside only: every test writes small
hand-made v1 JSON-lines files, runs ``gpuwarden report`` (the top-level CLI's ``main``, or
a subprocess where the exit status and streams matter) and compares the JSON report with
answers worked out by hand in the comments. Nothing here imports the accounting package.
The chi-squared and Poisson quantiles come from scipy, as the contract states them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import chi2, poisson

from gpuwarden.cli import main

T0 = datetime(2026, 1, 1, tzinfo=UTC)
H = 3600.0


def epoch(hours: float) -> float:
    """Epoch seconds ``hours`` after T0."""
    return T0.timestamp() + hours * H


def iso(hours: float) -> str:
    """RFC 3339 (Z) ``hours`` after T0."""
    return (T0 + timedelta(hours=hours)).isoformat().replace("+00:00", "Z")


def incident(id_: Any, node: str, gpu: str | None, component: str, **kw: Any) -> dict[str, Any]:
    line: dict[str, Any] = {
        "schema": "gpuwarden.incident/v1",
        "id": id_,
        "node": node,
        "gpu": gpu,
        "gpu_model": "H100",
        "component": component,
        "fault_class": "xid",
        "mitigated": None,
        "returned": None,
        "gpus_out": 0,
        "jobs": [],
    }
    line.update(kw)
    return line


def exposure(unit: str, node: str, gpu: str | None, start: Any, end: Any, model: str = "H100"):
    return {
        "schema": "gpuwarden.exposure/v1",
        "unit": unit,
        "node": node,
        "gpu": gpu,
        "gpu_model": model,
        "start": start,
        "end": end,
    }


def job(job_id: Any, gpus: int, interrupted: Any, resumed: Any, last_checkpoint: Any):
    return {
        "job_id": job_id,
        "gpus": gpus,
        "interrupted": interrupted,
        "resumed": resumed,
        "last_checkpoint": last_checkpoint,
    }


def write_lines(path: Path, rows: list[Any]) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows),
        encoding="utf-8",
    )
    return path


def report(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    incidents: list[Any],
    exposures: list[Any],
    *extra: str,
) -> dict[str, Any]:
    inc = write_lines(tmp_path / "incidents.jsonl", incidents)
    exp = write_lines(tmp_path / "exposure.jsonl", exposures)
    capsys.readouterr()
    argv = ["report", "--incidents", str(inc), "--exposure", str(exp), "--format", "json"]
    rc = main([*argv, *extra])
    out = capsys.readouterr()
    assert rc == 0, out.err
    result: dict[str, Any] = json.loads(out.out)
    return result


def cell(rep: dict[str, Any], model: str, component: str) -> dict[str, Any]:
    found = [c for c in rep["mtbf"] if c["gpu_model"] == model and c["component"] == component]
    assert len(found) == 1, rep["mtbf"]
    return found[0]


def by_id(rep: dict[str, Any]) -> dict[Any, dict[str, Any]]:
    return {i["id"]: i for i in rep["incidents"]}


def lower90(t: float, r: int) -> float:
    return 2 * t / chi2.ppf(0.95, 2 * r + 2)


def upper90(t: float, r: int) -> float:
    return 2 * t / chi2.ppf(0.05, 2 * r)


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(Path.cwd())}
    return subprocess.run(
        [sys.executable, "-m", "gpuwarden", "report", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


# --- one incident, every formula -------------------------------------------------------

TWO_GPUS = [
    exposure("n1/0", "n1", "0", iso(0), iso(100)),
    exposure("n1/1", "n1", "1", iso(0), iso(100)),
]
ONE_GPU_FAULT = incident(
    "i1",
    "n1",
    "0",
    "gpu",
    onset=iso(10),
    detected=epoch(10) + 600,
    mitigated=epoch(10) + 1200,
    returned=iso(20),
    gpus_out=1,
    jobs=[job("j1", 2, iso(10), iso(12), iso(9))],
)


def test_an_incidents_durations_are_detected_less_onset_mitigated_less_detected_and_returned_less_onset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    (only,) = rep["incidents"]
    assert only["id"] == "i1"
    assert only["ttd_s"] == pytest.approx(600)
    assert only["ttm_s"] == pytest.approx(600)
    assert only["ttr_s"] == pytest.approx(10 * H)


def test_gpu_hours_lost_are_gpus_times_restart_recompute_and_capacity_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    lost = rep["incidents"][0]["gpu_hours_lost"]
    # restart 2 GPUs x (12h - 10h); recompute 2 x (10h - 9h); capacity 1 x (20h - 10h20m)
    assert lost["restart"] == pytest.approx(4.0)
    assert lost["recompute"] == pytest.approx(2.0)
    assert lost["capacity"] == pytest.approx(20 - 10 - 1 / 3)
    assert lost["total"] == pytest.approx(4 + 2 + 20 - 10 - 1 / 3)
    totals = rep["totals"]
    assert set(totals) >= {"gpu_hours_lost", "by_component", "unknown_recompute"}
    assert totals["unknown_recompute"] == []
    assert totals["gpu_hours_lost"]["total"] == pytest.approx(lost["total"])
    assert totals["by_component"]["gpu"] == pytest.approx(lost["total"])


def test_the_mtbf_cell_is_gpu_hours_over_failures_with_the_exact_chi_squared_90_interval(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    gpu = cell(rep, "H100", "gpu")
    assert gpu["failures"] == 1
    assert gpu["exposure_hours"] == pytest.approx(200.0)  # 2 GPUs x 100 h
    assert gpu["mtbf_hours"] == pytest.approx(200.0)
    assert gpu["lower90"] == pytest.approx(lower90(200.0, 1))
    assert gpu["upper90"] == pytest.approx(upper90(200.0, 1))
    assert gpu["lower90"] < gpu["mtbf_hours"] < gpu["upper90"]


def test_the_report_json_has_the_contracts_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    assert {"mtbf", "lemons", "incidents", "totals", "ettr"} <= set(rep)
    assert set(rep["mtbf"][0]) >= {
        "gpu_model",
        "component",
        "failures",
        "exposure_hours",
        "mtbf_hours",
        "lower90",
        "upper90",
    }
    assert set(rep["incidents"][0]) >= {"id", "ttd_s", "ttm_s", "ttr_s", "gpu_hours_lost"}
    assert set(rep["incidents"][0]["gpu_hours_lost"]) == {
        "restart",
        "recompute",
        "capacity",
        "total",
    }
    assert set(rep["ettr"]) >= {"cluster", "jobs"}
    assert isinstance(rep["ettr"]["jobs"], list)
    assert all(set(j) >= {"job_id", "ettr"} for j in rep["ettr"]["jobs"])


# --- times and keys --------------------------------------------------------------------


def test_rfc3339_with_offsets_and_fractions_and_epoch_integers_and_floats_mean_the_same_times(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    mixed = incident(
        "i1",
        "n1",
        "0",
        "gpu",
        onset=(T0 + timedelta(hours=10)).astimezone().isoformat(),  # local offset
        detected="2026-01-01T12:10:00.5+02:00",  # 10:10:00.5Z
        mitigated=int(epoch(10) + 1200),
        returned=epoch(20) + 0.25,
        gpus_out=1,
        jobs=[job("j1", 2, epoch(10), "2026-01-01T07:00:00-05:00", iso(9))],  # 12:00Z
    )
    rep = report(tmp_path, capsys, [mixed], TWO_GPUS)
    only = rep["incidents"][0]
    assert only["ttd_s"] == pytest.approx(600.5)
    assert only["ttm_s"] == pytest.approx(599.5)
    assert only["ttr_s"] == pytest.approx(10 * H + 0.25)
    assert only["gpu_hours_lost"]["restart"] == pytest.approx(4.0)
    assert only["gpu_hours_lost"]["recompute"] == pytest.approx(2.0)


def test_unknown_keys_anywhere_are_ignored(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    noisy = {
        **ONE_GPU_FAULT,
        "ticket": "RMA-4411",
        "notes": {"by": "ops"},
        "jobs": [{**ONE_GPU_FAULT["jobs"][0], "user": "alice", "partition": "train"}],
    }
    rows = [{**r, "serial": "1650xyz", "rack": 7} for r in TWO_GPUS]
    plain = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    rep = report(tmp_path, capsys, [noisy], rows)
    assert rep["incidents"] == plain["incidents"]
    assert rep["mtbf"] == plain["mtbf"]


# --- the window ------------------------------------------------------------------------


def test_without_until_the_report_ends_at_the_latest_time_in_either_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The exposure's latest time is 100 h, the incident's returned is 150 h: an open exposure
    # row (end null) counts up to 150 h, and so does a job that never resumed.
    rows = [exposure("n1/0", "n1", "0", iso(0), None)]
    late = incident(
        "i1",
        "n1",
        "0",
        "gpu",
        onset=iso(50),
        detected=iso(50),
        mitigated=iso(51),
        returned=iso(150),
        gpus_out=1,
        jobs=[job("j1", 4, iso(50), None, iso(50))],
    )
    rows.append(exposure("n1/1", "n1", "1", iso(0), iso(100)))
    rep = report(tmp_path, capsys, [late], rows)
    assert cell(rep, "H100", "gpu")["exposure_hours"] == pytest.approx(150 + 100)
    lost = rep["incidents"][0]["gpu_hours_lost"]
    assert lost["restart"] == pytest.approx(4 * 100)
    assert lost["capacity"] == pytest.approx(99)


def test_without_since_the_report_starts_at_the_earliest_time_in_either_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Exposure starts at 0 h but the job's last checkpoint is at -5 h: the recompute is
    # counted in full (4 GPUs x 15 h), not cut at the exposure's start.
    early = incident(
        "i1",
        "n1",
        "0",
        "gpu",
        onset=iso(10),
        detected=iso(10),
        jobs=[job("j1", 4, iso(10), iso(11), iso(-5))],
    )
    rep = report(tmp_path, capsys, [early], TWO_GPUS, "--until", iso(100))
    lost = rep["incidents"][0]["gpu_hours_lost"]
    assert lost["recompute"] == pytest.approx(4 * 15)
    assert lost["restart"] == pytest.approx(4 * 1)


def test_an_incident_is_in_the_window_when_since_is_at_most_its_onset_and_until_after_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    onsets = {"before": 9.5, "at-since": 10, "inside": 20, "at-until": 30, "after": 31}
    incs = [incident(k, "n1", "0", "gpu", onset=iso(h), detected=iso(h)) for k, h in onsets.items()]
    rep = report(tmp_path, capsys, incs, TWO_GPUS, "--since", iso(10), "--until", iso(30))
    assert sorted(by_id(rep)) == ["at-since", "inside"]
    assert cell(rep, "H100", "gpu")["failures"] == 2
    assert cell(rep, "H100", "gpu")["exposure_hours"] == pytest.approx(2 * 20)


def test_the_window_flags_take_epoch_seconds_as_well_as_rfc3339(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report(
        tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS, "--since", str(epoch(5)), "--until", iso(50)
    )
    assert cell(rep, "H100", "gpu")["exposure_hours"] == pytest.approx(2 * 45)


def test_every_interval_is_clipped_to_the_window_before_summing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Window [15 h, 50 h].
    # "early" (onset 16 h): recompute from 14 h to 16 h, 2 GPUs: only 15-16 h counts = 2;
    #   restart 16-17 h, 2 GPUs = 2; capacity 4 GPUs from 17 h to 18 h, less GPU 0 which
    #   "outside" (isolated alone from 10 h 20 min to 20 h) already took out = 3.
    # "late" (onset 40 h): restart 3 GPUs from 40 h, never resumed: to 50 h = 30;
    #   recompute 3 GPUs 38-40 h = 6; capacity 8 GPUs from 41 h, never returned: 9 h = 72.
    # "outside" (onset 10 h) is not in the window although its capacity runs to 20 h.
    early = incident(
        "early",
        "n1",
        "0",
        "gpu",
        onset=iso(16),
        detected=iso(16),
        mitigated=iso(17),
        returned=iso(18),
        gpus_out=4,
        jobs=[job("j1", 2, iso(16), iso(17), iso(14))],
    )
    late = incident(
        "late",
        "n1",
        None,
        "host",
        onset=iso(40),
        detected=iso(40),
        mitigated=iso(41),
        returned=None,
        gpus_out=8,
        jobs=[job("j2", 3, iso(40), None, iso(38))],
    )
    outside = {**ONE_GPU_FAULT, "id": "outside"}
    rows = [exposure("n1/0", "n1", "0", iso(0), iso(100)), exposure("n1", "n1", None, iso(0), None)]
    rep = report(
        tmp_path, capsys, [early, late, outside], rows, "--since", iso(15), "--until", iso(50)
    )
    got = by_id(rep)
    assert sorted(got) == ["early", "late"]
    assert got["early"]["gpu_hours_lost"] == pytest.approx(
        {"restart": 2, "recompute": 2, "capacity": 3, "total": 7}
    )
    assert got["late"]["gpu_hours_lost"] == pytest.approx(
        {"restart": 30, "recompute": 6, "capacity": 72, "total": 108}
    )
    assert rep["totals"]["gpu_hours_lost"]["total"] == pytest.approx(115)
    assert rep["totals"]["by_component"]["gpu"] == pytest.approx(7)
    assert rep["totals"]["by_component"]["host"] == pytest.approx(108)
    assert cell(rep, "H100", "gpu")["exposure_hours"] == pytest.approx(35)
    assert cell(rep, "H100", "host")["exposure_hours"] == pytest.approx(35)
    assert cell(rep, "H100", "host")["failures"] == 1


# --- exposure units --------------------------------------------------------------------


def test_a_unit_with_several_in_service_lines_is_exposed_for_their_sum(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        exposure("SN-0001", "n1", "0", iso(0), iso(10)),
        exposure("SN-0001", "n1", "0", iso(20), iso(30)),
        exposure("SN-0001", "n1", "0", epoch(40), None),
    ]
    fault = incident("i1", "n1", "0", "gpu", onset=iso(25), detected=iso(25))
    rep = report(tmp_path, capsys, [fault], rows, "--until", iso(45))
    assert cell(rep, "H100", "gpu")["exposure_hours"] == pytest.approx(10 + 10 + 5)


def test_a_node_without_node_rows_is_exposed_for_the_union_of_its_gpus_rows(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # n2's GPUs: 0-10 h and 5-20 h, union 0-20 h = 20 node-hours (not the 25 h sum).
    # n3 has its own node row, 0-50 h, which counts instead of its GPU's 0-10 h.
    rows = [
        exposure("n2/0", "n2", "0", iso(0), iso(10)),
        exposure("n2/1", "n2", "1", iso(5), iso(20)),
        exposure("n3/0", "n3", "0", iso(0), iso(10)),
        exposure("n3", "n3", None, iso(0), iso(50)),
    ]
    nic = incident("i1", "n2", None, "nic", onset=iso(8), detected=iso(8))
    rep = report(tmp_path, capsys, [nic], rows)
    got = cell(rep, "H100", "nic")
    assert got["failures"] == 1
    assert got["exposure_hours"] == pytest.approx(20 + 50)
    assert got["mtbf_hours"] == pytest.approx(70)
    # The GPU cells count GPU-unit-hours: 10 + 15 + 10.
    assert cell(rep, "H100", "gpu")["exposure_hours"] == pytest.approx(35)


def test_a_node_without_node_rows_and_gaps_between_its_gpus_rows_is_not_exposed_in_the_gap(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        exposure("n2/0", "n2", "0", iso(0), iso(10)),
        exposure("n2/1", "n2", "1", iso(30), iso(40)),
    ]
    fault = incident("i1", "n2", None, "storage", onset=iso(5), detected=iso(5))
    rep = report(tmp_path, capsys, [fault], rows)
    assert cell(rep, "H100", "storage")["exposure_hours"] == pytest.approx(20)


@pytest.mark.parametrize("component", ["gpu", "gpu_memory", "nvlink"])
def test_gpu_components_are_measured_in_gpu_unit_hours(
    component: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [exposure(f"n1/{g}", "n1", str(g), iso(0), iso(10)) for g in range(8)]
    rows.append(exposure("n1", "n1", None, iso(0), iso(10)))
    fault = incident("i1", "n1", "3", component, onset=iso(5), detected=iso(5))
    rep = report(tmp_path, capsys, [fault], rows)
    assert cell(rep, "H100", component)["exposure_hours"] == pytest.approx(80)
    assert cell(rep, "H100", component)["mtbf_hours"] == pytest.approx(80)


@pytest.mark.parametrize("component", ["nic", "host", "storage"])
def test_node_components_are_measured_in_node_unit_hours(
    component: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [exposure(f"n1/{g}", "n1", str(g), iso(0), iso(10)) for g in range(8)]
    fault = incident("i1", "n1", None, component, onset=iso(5), detected=iso(5))
    rep = report(tmp_path, capsys, [fault], rows)
    assert cell(rep, "H100", component)["exposure_hours"] == pytest.approx(10)


def test_models_are_separate_cells(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rows = [
        exposure("h/0", "h", "0", iso(0), iso(10), model="H100"),
        exposure("a/0", "a", "0", iso(0), iso(40), model="A100"),
    ]
    faults = [
        incident("i1", "a", "0", "gpu", gpu_model="A100", onset=iso(5), detected=iso(5)),
        incident("i2", "a", "0", "gpu", gpu_model="A100", onset=iso(6), detected=iso(6)),
    ]
    rep = report(tmp_path, capsys, faults, rows)
    a100 = cell(rep, "A100", "gpu")
    assert (a100["failures"], a100["exposure_hours"]) == (2, pytest.approx(40))
    assert a100["mtbf_hours"] == pytest.approx(20)
    assert a100["lower90"] == pytest.approx(lower90(40, 2))
    assert a100["upper90"] == pytest.approx(upper90(40, 2))
    h100 = cell(rep, "H100", "gpu")
    assert (h100["failures"], h100["exposure_hours"]) == (0, pytest.approx(10))


# --- null and zero cases ---------------------------------------------------------------


def test_mitigated_null_gives_no_capacity_and_no_ttm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fault = incident(
        "i1", "n1", "0", "gpu", onset=iso(10), detected=iso(11), returned=iso(20), gpus_out=8
    )
    rep = report(tmp_path, capsys, [fault], TWO_GPUS)
    only = rep["incidents"][0]
    assert only["ttm_s"] is None
    assert only["ttd_s"] == pytest.approx(H)
    assert only["ttr_s"] == pytest.approx(10 * H)
    assert only["gpu_hours_lost"]["capacity"] == 0


def test_gpus_out_zero_gives_no_capacity_and_no_ttm(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fault = incident(
        "i1",
        "n1",
        "0",
        "gpu",
        onset=iso(10),
        detected=iso(11),
        mitigated=iso(12),
        returned=iso(20),
        gpus_out=0,
    )
    rep = report(tmp_path, capsys, [fault], TWO_GPUS)
    only = rep["incidents"][0]
    assert only["ttm_s"] is None
    assert only["gpu_hours_lost"]["capacity"] == 0
    assert only["gpu_hours_lost"]["total"] == 0


def test_a_unit_still_out_and_a_job_never_resumed_count_to_the_reports_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fault = incident(
        "i1",
        "n1",
        "0",
        "gpu",
        onset=iso(10),
        detected=iso(10),
        mitigated=iso(12),
        returned=None,
        gpus_out=2,
        jobs=[job("j1", 8, iso(10), None, iso(10))],
    )
    rep = report(tmp_path, capsys, [fault], TWO_GPUS, "--until", iso(40))
    lost = rep["incidents"][0]["gpu_hours_lost"]
    assert lost["capacity"] == pytest.approx(2 * 28)
    assert lost["restart"] == pytest.approx(8 * 30)
    assert lost["recompute"] == 0


def test_a_job_without_last_checkpoint_makes_the_recompute_unknown_and_lists_the_incident(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blind = incident(
        "blind",
        "n1",
        "0",
        "gpu",
        onset=iso(10),
        detected=iso(10),
        jobs=[job("j1", 2, iso(10), iso(11), iso(9)), job("j2", 1, iso(10), iso(12), None)],
    )
    seen = incident(
        "seen",
        "n1",
        "1",
        "gpu",
        onset=iso(20),
        detected=iso(20),
        jobs=[job("j3", 1, iso(20), iso(21), iso(19))],
    )
    rep = report(tmp_path, capsys, [blind, seen], TWO_GPUS)
    assert rep["totals"]["unknown_recompute"] == ["blind"]
    got = by_id(rep)
    assert got["blind"]["gpu_hours_lost"]["recompute"] is None
    assert got["blind"]["gpu_hours_lost"]["restart"] == pytest.approx(2 + 2)
    assert got["seen"]["gpu_hours_lost"]["recompute"] == pytest.approx(1)


def test_software_and_unknown_cells_report_failures_without_exposure(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    faults = [
        incident("s1", "n1", "0", "software", onset=iso(1), detected=iso(1)),
        incident("s2", "n1", None, "software", onset=iso(2), detected=iso(2)),
        incident("u1", "n1", "1", "unknown", onset=iso(3), detected=iso(3)),
    ]
    rep = report(tmp_path, capsys, faults, TWO_GPUS)
    soft, unknown = cell(rep, "H100", "software"), cell(rep, "H100", "unknown")
    assert soft["failures"] == 2
    assert unknown["failures"] == 1
    for c in (soft, unknown):
        assert c["exposure_hours"] is None
        assert c["mtbf_hours"] is None


def test_a_cell_with_exposure_and_no_failure_is_listed_with_no_mtbf_and_no_upper_bound(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rep = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    nvlink = cell(rep, "H100", "nvlink")
    assert nvlink["failures"] == 0
    assert nvlink["exposure_hours"] == pytest.approx(200)
    assert nvlink["mtbf_hours"] is None
    assert nvlink["upper90"] is None
    assert nvlink["lower90"] == pytest.approx(lower90(200, 0))
    host = cell(rep, "H100", "host")
    assert (host["failures"], host["exposure_hours"]) == (0, pytest.approx(100))


# --- lemons ----------------------------------------------------------------------------


def test_a_lemon_is_a_unit_whose_failures_exceed_the_poisson_99th_percentile_at_its_models_rate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Ten GPUs of 100 h each; "n1/0" failed 4 times, "n1/1" twice: the model's rate is
    # 6 / 1000 h, the mean per GPU 0.6, the 99th percentile 3. Only 4 > 3.
    rows = [exposure(f"n1/{g}", "n1", str(g), iso(0), iso(100)) for g in range(8)]
    rows += [exposure(f"n2/{g}", "n2", str(g), iso(0), iso(100)) for g in range(2)]
    faults = [
        incident(f"a{k}", "n1", "0", "gpu", onset=iso(10 + k), detected=iso(10 + k))
        for k in range(4)
    ]
    faults += [
        incident(f"b{k}", "n1", "1", "gpu", onset=iso(50 + k), detected=iso(50 + k))
        for k in range(2)
    ]
    rep = report(tmp_path, capsys, faults, rows)
    threshold = poisson.ppf(0.99, 100 * 6 / 1000)
    assert 2 <= threshold < 4
    assert rep["lemons"] == [
        {
            "unit": "n1/0",
            "node": "n1",
            "gpu": "0",
            "gpu_model": "H100",
            "component": "gpu",
            "failures": 4,
            "exposure_hours": pytest.approx(100),
        }
    ]


def test_a_node_lemon_is_judged_on_its_node_hours(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Four nodes of 100 h (node rows); "bad" has 9 host faults, the others 1 each: the
    # model's rate is 12 / 400 h, the mean per node 3.0, the 99th percentile 8. Only 9 > 8.
    names = ["bad", "ok1", "ok2", "ok3"]
    rows = [exposure(n, n, None, iso(0), iso(100)) for n in names]
    faults = [
        incident(f"bad{k}", "bad", None, "host", onset=iso(1 + k), detected=iso(1 + k))
        for k in range(9)
    ]
    faults += [
        incident(f"{n}-x", n, None, "host", onset=iso(50), detected=iso(50)) for n in names[1:]
    ]
    rep = report(tmp_path, capsys, faults, rows)
    threshold = poisson.ppf(0.99, 100 * 12 / 400)
    assert 1 <= threshold == 8
    lemons = rep["lemons"]
    assert [(x["node"], x["component"], x["failures"]) for x in lemons] == [("bad", "host", 9)]
    assert lemons[0]["gpu"] is None
    assert lemons[0]["exposure_hours"] == pytest.approx(100)


# --- malformed input -------------------------------------------------------------------

GOOD = dict(ONE_GPU_FAULT)


def failed_run(tmp_path: Path, incidents: list[Any], exposures: list[Any]):
    inc = write_lines(tmp_path / "incidents.jsonl", incidents)
    exp = write_lines(tmp_path / "exposure.jsonl", exposures)
    out_inc, out_exp = tmp_path / "out-inc.jsonl", tmp_path / "out-exp.jsonl"
    done = run_cli(
        "--incidents",
        str(inc),
        "--exposure",
        str(exp),
        "--format",
        "json",
        "--export-incidents",
        str(out_inc),
        "--export-exposure",
        str(out_exp),
    )
    assert done.returncode != 0
    assert done.stdout == ""
    assert not out_inc.exists() and not out_exp.exists()
    return done


@pytest.mark.parametrize(
    "bad",
    [
        "{not json",
        '["a", "list"]',
        json.dumps({**GOOD, "id": "i9", "schema": "gpuwarden.incident/v2"}),
        json.dumps({**GOOD, "id": "i9", "component": "fan"}),
        json.dumps({**GOOD, "id": "i1"}),  # the id of line 1 again
        json.dumps({**GOOD, "id": "i9", "onset": "yesterday"}),
    ],
    ids=["not-json", "not-an-object", "wrong-schema", "unknown-component", "duplicate-id", "time"],
)
def test_a_malformed_incident_line_is_an_error_naming_its_1_based_line_and_nothing_is_reported(
    bad: str, tmp_path: Path
) -> None:
    incs = [GOOD, "", json.dumps({**GOOD, "id": "i2"}), bad, json.dumps({**GOOD, "id": "i3"})]
    done = failed_run(tmp_path, incs, TWO_GPUS)
    assert f"{tmp_path / 'incidents.jsonl'}:4:" in done.stderr


def test_a_malformed_exposure_line_names_the_exposure_file_and_its_line(tmp_path: Path) -> None:
    rows = [*TWO_GPUS, {**TWO_GPUS[0], "schema": "gpuwarden.incident/v1"}]
    done = failed_run(tmp_path, [GOOD], rows)
    assert f"{tmp_path / 'exposure.jsonl'}:3:" in done.stderr


def test_the_incident_schema_in_the_exposure_file_is_refused(tmp_path: Path) -> None:
    done = failed_run(tmp_path, [GOOD], [GOOD])
    assert f"{tmp_path / 'exposure.jsonl'}:1:" in done.stderr


def test_the_error_is_printed_as_the_path_given_then_the_line(tmp_path: Path) -> None:
    write_lines(tmp_path / "incidents.jsonl", [GOOD, GOOD, GOOD, GOOD, GOOD, GOOD, "{"])
    write_lines(tmp_path / "exposure.jsonl", TWO_GPUS)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpuwarden",
            "report",
            "--incidents",
            "incidents.jsonl",
            "--exposure",
            "exposure.jsonl",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path.cwd())},
        timeout=120,
        check=False,
    )
    assert done.returncode != 0
    assert done.stdout == ""
    # Line 2 is already a duplicate id: the first bad line is named.
    assert done.stderr.startswith("incidents.jsonl:2:")


# --- round trip ------------------------------------------------------------------------


def test_exported_lines_read_back_give_the_same_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    incs = [
        {**ONE_GPU_FAULT, "ticket": "RMA-1", "detected": "2026-01-01T12:10:00+02:00"},
        incident(
            7,
            "n1",
            None,
            "host",
            onset=epoch(30),
            detected=epoch(30) + 60,
            mitigated=epoch(31),
            returned=None,
            gpus_out=8,
            jobs=[job(1234, 2, epoch(30), None, None), job("j9", 1, iso(30), iso(32), iso(29))],
        ),
        incident("s1", "n1", "1", "software", onset=iso(40), detected=iso(40)),
    ]
    rows = [
        *TWO_GPUS,
        exposure("SN-9", "n2", "0", iso(5), iso(50), model="A100"),
        exposure("SN-9", "n2", "0", iso(60), None, model="A100"),
    ]
    first = report(
        tmp_path,
        capsys,
        incs,
        rows,
        "--export-incidents",
        str(tmp_path / "x-inc.jsonl"),
        "--export-exposure",
        str(tmp_path / "x-exp.jsonl"),
    )
    capsys.readouterr()
    argv = ["report", "--format", "json"]
    argv += ["--incidents", str(tmp_path / "x-inc.jsonl")]
    argv += ["--exposure", str(tmp_path / "x-exp.jsonl")]
    assert main(argv) == 0
    again = json.loads(capsys.readouterr().out)
    assert again == first
    assert by_id(first)[7]["gpu_hours_lost"]["recompute"] is None
    assert first["totals"]["unknown_recompute"] == [7]
    exported = [json.loads(x) for x in (tmp_path / "x-inc.jsonl").read_text().splitlines()]
    assert {x["schema"] for x in exported} == {"gpuwarden.incident/v1"}
    assert sorted(map(str, (x["id"] for x in exported))) == ["7", "i1", "s1"]


# --- found in review: input the administrator's tools write ------------------------------


def test_epoch_seconds_written_as_a_string_are_epoch_seconds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    as_text = {
        **ONE_GPU_FAULT,
        "onset": str(int(epoch(10))),
        "detected": f"{epoch(10) + 600:.1f}",
    }
    rep = report(tmp_path, capsys, [as_text], TWO_GPUS)
    assert rep["incidents"][0]["ttd_s"] == pytest.approx(600)
    assert rep["incidents"][0]["ttr_s"] == pytest.approx(10 * H)


def test_a_byte_order_mark_and_crlf_line_ends_are_read_as_windows_tools_write_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plain = report(tmp_path, capsys, [ONE_GPU_FAULT], TWO_GPUS)
    inc, exp = tmp_path / "win-inc.jsonl", tmp_path / "win-exp.jsonl"
    inc.write_bytes(b"\xef\xbb\xbf" + json.dumps(ONE_GPU_FAULT).encode() + b"\r\n")
    exp.write_bytes(b"\xef\xbb\xbf" + "\r\n".join(map(json.dumps, TWO_GPUS)).encode() + b"\r\n")
    capsys.readouterr()
    argv = ["report", "--incidents", str(inc), "--exposure", str(exp), "--format", "json"]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == plain


def test_a_line_that_is_not_utf8_is_an_error_naming_its_line(tmp_path: Path) -> None:
    inc = tmp_path / "incidents.jsonl"
    write_lines(tmp_path / "exposure.jsonl", TWO_GPUS)
    first = json.dumps(ONE_GPU_FAULT).encode()
    inc.write_bytes(first + b'\n{"id": "caf\xe9"}\n')
    done = run_cli("--incidents", str(inc), "--exposure", str(tmp_path / "exposure.jsonl"))
    assert done.returncode != 0
    assert done.stdout == ""
    assert done.stderr.startswith(f"{inc}:2:")


def test_an_incident_not_yet_returned_has_its_ttr_counted_to_the_reports_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The reading chosen (docs/accounting.md): "a null end time counting to the report's
    # end" holds for ttr too, so an open incident's ttr is a lower bound, never dropped.
    fault = incident(
        "i1", "n1", "0", "gpu", onset=iso(10), detected=iso(10), mitigated=iso(11), gpus_out=1
    )
    rep = report(tmp_path, capsys, [fault], TWO_GPUS, "--until", iso(30))
    assert rep["incidents"][0]["ttr_s"] == pytest.approx(20 * H)
    assert rep["incidents"][0]["gpu_hours_lost"]["capacity"] == pytest.approx(19)


def test_times_with_sub_microsecond_digits_survive_export_and_import_exactly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Journal times come from time.time(): 1767261600.1234567 has more digits than
    # datetime's microseconds, and the report read back must be the same to the last bit.
    t = epoch(10) + 0.1234567
    fine = incident(
        "i1",
        "n1",
        "0",
        "gpu",
        onset=t,
        detected=t + 0.3333333,
        mitigated=t + 1000.7777777,
        returned=t + 9999.1111111,
        gpus_out=1,
        jobs=[job("j1", 2, t, t + 77.77777, t - 1234.56789)],
    )
    rows = [exposure("n1/0", "n1", "0", t - 1e5 + 0.123456789, None)]
    out_inc, out_exp = tmp_path / "x-inc.jsonl", tmp_path / "x-exp.jsonl"
    flags = ["--export-incidents", str(out_inc), "--export-exposure", str(out_exp)]
    first = report(tmp_path, capsys, [fine], rows, *flags)
    argv = ["report", "--format", "json", "--incidents", str(out_inc), "--exposure", str(out_exp)]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first
    assert json.loads(out_inc.read_text())["onset"].endswith("Z")


def test_a_journal_exported_and_imported_gives_the_same_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The remediation service writes the journal on a clock with sub-microsecond digits,
    # as time.time() has; nothing of the accounting package is used to build it.
    from remediation.clock import FakeClock
    from tests.accounting.helpers import service
    from tests.remediation.helpers import alert, topology_file

    clock = FakeClock(1_800_000_000.1234567)
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 4))
    for node, starts_at, gpu in [
        ("gpu-node-001", "2027-01-15T07:58:00.5Z", "3"),
        ("gpu-node-002", "2027-01-15T09:00:00.25Z", "1"),
    ]:
        fired = alert(node=node, starts_at=starts_at, fp=f"fp-{node}", gpu=gpu, xid="79")
        svc.journal.accept([fired], clock.now())
        svc.engine.decide(fired)
        clock.advance(30.0000001)
        for action in svc.journal.pending_actions():
            svc.executor.run(action)
        clock.advance(3600.3333333)
        assert svc.engine.release(node, True).allow
        clock.advance(7200)
    svc.journal.close()
    db = tmp_path / "state.db"
    out_inc, out_exp = tmp_path / "x-inc.jsonl", tmp_path / "x-exp.jsonl"
    capsys.readouterr()
    argv = ["report", "--format", "json", "--state-db", str(db)]
    argv += ["--export-incidents", str(out_inc), "--export-exposure", str(out_exp)]
    assert main(argv) == 0
    first = json.loads(capsys.readouterr().out)
    assert [i["id"] for i in first["incidents"]] == ["gw-1", "gw-2"]
    argv = ["report", "--format", "json", "--incidents", str(out_inc), "--exposure", str(out_exp)]
    assert main(argv) == 0
    assert json.loads(capsys.readouterr().out) == first
