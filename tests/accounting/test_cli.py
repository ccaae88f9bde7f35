"""`gpuwarden report` end to end on interchange files."""

import json
from pathlib import Path

import pytest

from gpuwarden import cli
from tests.accounting.builders import at, gpus, incident, job


def _write(path: Path, objs: list[dict]) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objs))
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    incs = [
        incident(
            "a",
            onset=at(10),
            detected=at(10.5),
            mitigated=at(11),
            returned=at(15),
            gpus_out=8,
            jobs=[job("j", 16, at(10.5), resumed=at(12), last_checkpoint=at(9))],
        ),
        incident("b", onset=at(30), detected=at(30), component="nic", gpu=None),
    ]
    return (
        _write(tmp_path / "incidents.jsonl", incs),
        _write(tmp_path / "exposure.jsonl", gpus("n1", 8, at(0), at(100))),
    )


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    rc = cli.main(["report", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_json_report_from_files_has_the_contract_keys(files, capsys) -> None:
    inc, exp = files
    rc, out, _ = _run(["--incidents", str(inc), "--exposure", str(exp), "--format", "json"], capsys)
    assert rc == 0
    doc = json.loads(out)
    assert {"mtbf", "lemons", "incidents", "totals", "ettr"} <= set(doc)
    assert [i["id"] for i in doc["incidents"]] == ["a", "b"]
    assert doc["totals"]["gpu_hours_lost"]["total"] == pytest.approx(24 + 24 + 32)
    assert set(doc["mtbf"][0]) == {
        "gpu_model",
        "gpu_model_names",
        "component",
        "failures",
        "exposure_hours",
        "mtbf_hours",
        "lower90",
        "upper90",
    }


def test_text_report_names_the_window_losses_and_cells(files, capsys) -> None:
    inc, exp = files
    rc, out, _ = _run(["--incidents", str(inc), "--exposure", str(exp)], capsys)
    assert rc == 0
    assert "2026-01-01T00:00:00Z .. 2026-01-05T04:00:00Z" in out
    assert "GPU-hours lost: 80.0 = restart 24.0 + recompute 24.0 + capacity 32.0" in out
    assert "few failures" in out


def test_since_and_until_take_rfc3339_or_epoch_seconds(files, capsys) -> None:
    inc, exp = files
    rc, out, _ = _run(
        [
            "--incidents",
            str(inc),
            "--exposure",
            str(exp),
            "--format",
            "json",
            "--since",
            "2026-01-01T20:00:00Z",
            "--until",
            str(at(50)),
        ],
        capsys,
    )
    assert rc == 0
    assert [i["id"] for i in json.loads(out)["incidents"]] == ["b"]


def test_a_malformed_file_exits_2_naming_the_line_and_prints_nothing(files, capsys) -> None:
    inc, exp = files
    lines = [json.dumps(incident(f"i{k}")) + "\n" for k in range(6)]
    inc.write_text("".join(lines) + '{"schema": "gpuwarden.incident/v1"}\n')
    rc, out, err = _run(["--incidents", str(inc), "--exposure", str(exp)], capsys)
    assert rc == 2 and out == ""
    assert err.startswith(f"{inc}:7: ")


def test_exported_files_read_back_to_the_same_report(files, tmp_path, capsys) -> None:
    inc, exp = files
    g, h = tmp_path / "out-incidents.jsonl", tmp_path / "out-exposure.jsonl"
    rc, first, _ = _run(
        [
            "--incidents",
            str(inc),
            "--exposure",
            str(exp),
            "--format",
            "json",
            "--export-incidents",
            str(g),
            "--export-exposure",
            str(h),
        ],
        capsys,
    )
    assert rc == 0
    rc, second, _ = _run(["--incidents", str(g), "--exposure", str(h), "--format", "json"], capsys)
    assert rc == 0 and json.loads(second) == json.loads(first)


def test_no_journal_and_no_files_is_a_one_line_error(tmp_path, capsys) -> None:
    rc, out, err = _run(["--state-db", str(tmp_path / "absent.db")], capsys)
    assert rc == 2 and out == "" and "no journal at" in err


def test_until_before_since_is_refused(files, capsys) -> None:
    inc, _ = files
    rc, _, err = _run(["--incidents", str(inc), "--since", "100", "--until", "50"], capsys)
    assert rc == 2 and "--until must be after --since" in err


def test_a_bad_time_flag_is_a_one_line_error(files, capsys) -> None:
    inc, _ = files
    rc, out, err = _run(["--incidents", str(inc), "--since", "last tuesday"], capsys)
    assert rc == 2 and out == "" and "--since: 'last tuesday' is not an RFC 3339 time" in err


def test_html_is_written_beside_the_printed_report(files, tmp_path, capsys) -> None:
    inc, exp = files
    page = tmp_path / "r.html"
    rc, out, _ = _run(
        ["--incidents", str(inc), "--exposure", str(exp), "--html", str(page)], capsys
    )
    assert rc == 0 and "GPU-hours lost" in out
    assert page.read_text().count('<svg id="') == 4


def test_until_now_counts_what_is_still_out_to_the_present(tmp_path, capsys) -> None:
    import time

    out = incident("a", onset=at(10), detected=at(10), mitigated=at(10), gpus_out=1)
    inc = _write(tmp_path / "incidents.jsonl", [out])
    rc, text, _ = _run(["--incidents", str(inc), "--format", "json", "--until", "now"], capsys)
    assert rc == 0
    (got,) = json.loads(text)["incidents"]
    assert got["ttr_s"] == pytest.approx(time.time() - at(10), abs=60)
