"""Per-incident TTD/TTM/TTR and GPU-hours lost, each worked out by hand."""

import pytest

from tests.accounting.builders import H, at, gpus, incident, job
from tests.accounting.helpers import report_of

FLEET = gpus("n1", 8, at(0), at(100))  # the window is [0 h, 100 h] unless a job reaches back


def _one(doc: dict) -> dict:
    (inc,) = doc["incidents"]
    return inc


def test_times_and_the_three_costs_of_one_incident() -> None:
    # onset 10 h, detected 10.5 h, mitigated 11 h, back 15 h; 8 GPUs out; a 16-GPU job
    # interrupted at 10.5 h, resumed at 12 h, last checkpoint at 9 h.
    inc = incident(
        "a",
        onset=at(10),
        detected=at(10.5),
        mitigated=at(11),
        returned=at(15),
        gpus_out=8,
        jobs=[job("j", 16, at(10.5), resumed=at(12), last_checkpoint=at(9))],
    )
    got = _one(report_of([inc], FLEET))
    assert got["id"] == "a"
    assert got["ttd_s"] == 0.5 * H
    assert got["ttm_s"] == 0.5 * H
    assert got["ttr_s"] == 5 * H
    lost = got["gpu_hours_lost"]
    assert lost["restart"] == pytest.approx(16 * 1.5)
    assert lost["recompute"] == pytest.approx(16 * 1.5)
    assert lost["capacity"] == pytest.approx(8 * 4)
    assert lost["total"] == pytest.approx(24 + 24 + 32)


def test_every_interval_is_clipped_to_the_window() -> None:
    inc = incident(
        "a",
        onset=at(10),
        detected=at(10),
        mitigated=at(10),
        returned=at(30),
        gpus_out=2,
        jobs=[job("j", 4, at(10), resumed=at(30), last_checkpoint=at(2))],
    )
    got = _one(report_of([inc], FLEET, since=at(5), until=at(20)))
    lost = got["gpu_hours_lost"]
    assert lost == pytest.approx({"restart": 40, "recompute": 20, "capacity": 20, "total": 80})
    assert got["ttr_s"] == 20 * H  # durations are not clipped


def test_a_null_end_counts_to_the_reports_end() -> None:
    inc = incident(
        "a",
        onset=at(10),
        detected=at(11),
        mitigated=at(12),
        returned=None,
        gpus_out=1,
        jobs=[job("j", 2, at(11), resumed=None, last_checkpoint=at(11))],
    )
    got = _one(report_of([inc], FLEET))  # the report ends at 100 h, the fleet's last time
    assert got["ttr_s"] == 90 * H
    assert got["gpu_hours_lost"] == pytest.approx(
        {"restart": 2 * 89, "recompute": 0, "capacity": 88, "total": 2 * 89 + 88}
    )


@pytest.mark.parametrize(
    "change", [{"mitigated": None, "gpus_out": 8}, {"mitigated": at(11), "gpus_out": 0}]
)
def test_unmitigated_or_nothing_taken_out_costs_no_capacity_and_has_no_ttm(change: dict) -> None:
    got = _one(report_of([incident("a", returned=at(20), **change)], FLEET))
    assert got["ttm_s"] is None
    assert got["gpu_hours_lost"]["capacity"] == 0


def test_a_job_without_a_checkpoint_time_leaves_recompute_unknown_and_listed() -> None:
    incs = [
        incident("a", jobs=[job("j1", 8, at(10), resumed=at(11))]),
        incident(
            "b",
            onset=at(20),
            detected=at(20),
            jobs=[job("j2", 8, at(20), resumed=at(21), last_checkpoint=at(19))],
        ),
    ]
    doc = report_of(incs, FLEET)
    first, second = doc["incidents"]
    assert first["gpu_hours_lost"]["recompute"] is None
    assert first["gpu_hours_lost"]["total"] == pytest.approx(8)  # restart only, never guessed
    assert second["gpu_hours_lost"]["recompute"] == pytest.approx(8)
    assert doc["totals"]["unknown_recompute"] == ["a"]


def test_totals_by_cause_and_by_component() -> None:
    incs = [
        incident("a", mitigated=at(10), returned=at(12), gpus_out=1),
        incident(
            "b",
            onset=at(20),
            detected=at(20),
            component="nic",
            gpu=None,
            mitigated=at(20),
            returned=at(23),
            gpus_out=8,
            jobs=[job("j", 8, at(20), resumed=at(21), last_checkpoint=at(19.5))],
        ),
        incident("c", onset=at(30), detected=at(30), mitigated=at(30), returned=at(31), gpus_out=1),
    ]
    totals = report_of(incs, FLEET)["totals"]
    assert totals["gpu_hours_lost"] == pytest.approx(
        {"restart": 8, "recompute": 4, "capacity": 2 + 24 + 1, "total": 39}
    )
    assert totals["by_component"] == pytest.approx({"gpu": 3, "nic": 36})


def test_an_incident_is_in_the_window_when_since_le_onset_lt_until() -> None:
    incs = [incident(k, onset=at(t), detected=at(t)) for k, t in (("a", 5), ("b", 6), ("c", 20))]
    doc = report_of(incs, FLEET, since=at(5), until=at(20))
    assert [i["id"] for i in doc["incidents"]] == ["a", "b"]


def test_without_bounds_the_window_spans_the_earliest_and_latest_time_in_either_file() -> None:
    inc = incident(
        "a",
        onset=at(10),
        detected=at(10),
        jobs=[job("j", 1, at(10), resumed=at(150), last_checkpoint=at(-3))],
    )
    doc = report_of([inc], FLEET)
    assert doc["window"] == {"since": at(-3), "until": at(150)}
    assert doc["incidents"][0]["gpu_hours_lost"]["recompute"] == pytest.approx(13)


def test_a_second_interruption_inside_a_restart_is_not_counted_twice() -> None:
    # Job j is interrupted at 10 h (resumed 12 h) and again at 11 h by a second incident
    # (resumed 13 h), with a checkpoint from before the first resumption.
    incs = [
        incident("a", jobs=[job("j", 1, at(10), resumed=at(12), last_checkpoint=at(9))]),
        incident(
            "b",
            onset=at(11),
            detected=at(11),
            jobs=[job("j", 1, at(11), resumed=at(13), last_checkpoint=at(9))],
        ),
    ]
    first, second = report_of(incs, FLEET)["incidents"]
    assert first["gpu_hours_lost"]["restart"] == pytest.approx(2)
    assert first["gpu_hours_lost"]["recompute"] == pytest.approx(1)
    assert second["gpu_hours_lost"]["restart"] == pytest.approx(1)  # only 12 h -> 13 h is new
    assert second["gpu_hours_lost"]["recompute"] == pytest.approx(0)


def _read(*lines: dict):  # type: ignore[no-untyped-def]
    import json

    from accounting.interchange import read_incidents

    return read_incidents([json.dumps(o) for o in lines], "incidents")


def test_one_job_hit_by_two_incidents_at_once_is_charged_to_the_first_by_id_whatever_the_order() -> (
    None
):
    from accounting.costs import hit_costs
    from accounting.window import Window

    for order in (("b", "a"), ("a", "b")):
        incs = _read(
            *(incident(i, onset=at(10), jobs=[job("j", 4, at(10), resumed=at(12))]) for i in order)
        )
        costs = {h.incident_id: h.restart_s for h in hit_costs(incs, Window(at(0), at(100)))}
        assert costs == {"a": 4 * 2 * H, "b": 0.0}


def test_a_hit_carries_its_jobs_gpus_and_no_unknown_time_when_its_checkpoint_is_known() -> None:
    from accounting.costs import hit_costs
    from accounting.window import Window

    incs = _read(incident("a", jobs=[job("j", 4, at(10), resumed=at(12), last_checkpoint=at(9))]))
    (hit,) = hit_costs(incs, Window(at(0), at(100)))
    assert hit.gpus == 4 and hit.recompute_s == 4 * H and hit.unknown_s == 0.0


def test_incidents_with_one_onset_are_listed_by_id() -> None:
    doc = report_of([incident("b"), incident("a")], FLEET)
    assert [i["id"] for i in doc["incidents"]] == ["a", "b"]
