import io
import json

import pytest

from accounting import interchange, writer
from accounting.interchange import InterchangeError, read_exposure, read_incidents
from tests.accounting.builders import at, exposure, incident, job


def _lines(*objs: object) -> list[str]:
    return [json.dumps(o) + "\n" for o in objs]


def test_a_bad_seventh_line_is_an_error_naming_file_and_line_and_nothing_is_returned() -> None:
    lines = [*_lines(*(incident(f"i{k}") for k in range(6))), "{not json\n"]
    with pytest.raises(InterchangeError, match=r"^incidents\.jsonl:7: "):
        read_incidents(lines, "incidents.jsonl")


def test_line_numbers_count_blank_lines_too() -> None:
    lines = [*_lines(incident("a")), "\n", *_lines(incident("b", component="cpu"))]
    with pytest.raises(InterchangeError, match=r"^f:3: component"):
        read_incidents(lines, "f")


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"schema": "gpuwarden.incident/v2"}, "schema"),
        ({"onset": "yesterday"}, "onset"),
        ({"onset": "2026-01-01T00:00:00"}, "offset"),
        ({"detected": None}, "detected"),
        ({"gpus_out": -1}, "gpus_out"),
        ({"gpus_out": 1.5}, "gpus_out"),
        ({"gpus_out": True}, "gpus_out"),
        ({"jobs": {}}, "jobs"),
        ({"jobs": [{"job_id": "1", "gpus": 8}]}, "interrupted"),
        ({"detected": at(9)}, "detected < onset"),
        ({"mitigated": at(11), "returned": at(10.5)}, "returned"),
        ({"id": ""}, "id"),
    ],
)
def test_a_malformed_incident_is_refused_with_the_reason(change: dict, why: str) -> None:
    with pytest.raises(InterchangeError, match=rf"^x:1: .*{why}"):
        read_incidents(_lines(incident("a", **change)), "x")


def test_a_json_value_that_is_not_an_object_is_refused() -> None:
    with pytest.raises(InterchangeError, match=r"^x:1: expected a JSON object"):
        read_incidents(["[1, 2]\n"], "x")


def test_a_duplicate_id_names_both_lines() -> None:
    with pytest.raises(InterchangeError, match=r"^x:2: id 'a' already on line 1"):
        read_incidents(_lines(incident("a"), incident("a")), "x")


def test_unknown_keys_are_ignored_and_rfc3339_equals_epoch_seconds() -> None:
    a = incident(
        "a", onset="2026-01-01T10:00:00Z", detected="2026-01-01T11:00:00+01:00", ticket="RMA-123"
    )
    (parsed,) = read_incidents(_lines(a), "x")
    assert parsed.onset == at(10)
    assert parsed.detected == at(10)
    (lower,) = read_incidents(_lines(incident("b", onset="2026-01-01t10:00:00.000000z")), "x")
    assert lower.onset == at(10)


def test_overlapping_intervals_of_one_unit_are_refused_but_adjacent_ones_are_fine() -> None:
    ok = _lines(exposure("s1", "n1", "0", at(0), at(5)), exposure("s1", "n1", "0", at(5), None))
    assert len(read_exposure(ok, "e")) == 2
    bad = ok + _lines(exposure("s1", "n1", "0", at(100), at(200)))
    with pytest.raises(InterchangeError, match=r"^e:3: unit 's1' overlaps"):
        read_exposure(bad, "e")


def test_an_exposure_line_ending_before_it_starts_is_refused() -> None:
    with pytest.raises(InterchangeError, match=r"^e:1: end < start"):
        read_exposure(_lines(exposure("s1", "n1", None, at(5), at(1))), "e")


def test_load_names_the_path_given(tmp_path) -> None:
    path = tmp_path / "incidents.jsonl"
    path.write_text("".join(_lines(incident("a"))) + "\n" * 5 + '{"schema": 1}\n')
    with pytest.raises(InterchangeError, match=r"incidents\.jsonl:7: schema"):
        interchange.load_incidents(path)


def test_written_lines_read_back_to_the_same_records() -> None:
    src = incident(
        "a",
        gpu=None,
        component="host",
        mitigated=at(11),
        returned=at(20.5),
        gpus_out=8,
        jobs=[job("77", 16, at(10.25), resumed=at(12), last_checkpoint=at(9.5))],
    )
    (inc,) = read_incidents(_lines(src), "x")
    (row,) = read_exposure(_lines(exposure("n1", "n1", None, at(0), None)), "e")
    out = io.StringIO()
    writer.write_lines(out, [writer.incident_line(inc)])
    assert read_incidents(out.getvalue().splitlines(), "x") == [inc]
    out = io.StringIO()
    writer.write_lines(out, [writer.exposure_line(row)])
    written = json.loads(out.getvalue())
    assert written["start"] == "2026-01-01T00:00:00Z" and written["end"] is None
    assert read_exposure(out.getvalue().splitlines(), "e") == [row]


def test_integer_ids_are_given_back_as_integers() -> None:
    from accounting import report

    line = incident(7, jobs=[job(1234, 8, at(10), resumed=at(11))])
    (inc,) = read_incidents(_lines(line), "x")
    doc = report.to_json(report.build([inc], [], since=at(0), until=at(20)))
    assert doc["incidents"][0]["id"] == 7
    assert doc["totals"]["unknown_recompute"] == [7]
    assert doc["ettr"]["jobs"] == [{"job_id": 1234, "ettr": None}]


def test_an_empty_gpu_is_the_nodes_fault_and_a_missing_fault_class_is_empty() -> None:
    line = incident("a", gpu="", component="host")
    del line["fault_class"]
    (inc,) = read_incidents(_lines(line), "x")
    assert inc.gpu is None and inc.fault_class == ""
