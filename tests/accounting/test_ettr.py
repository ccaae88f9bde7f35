"""ETTR per job run and for the cluster, by hand, and the accounting identity for any
timeline: allocated GPU-time = productive + restart + recompute."""

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accounting import report
from accounting.costs import hit_costs
from accounting.model import Exposure, Incident, JobHit, JobRun
from accounting.window import Window
from tests.accounting.builders import at, gpus, incident, job
from tests.accounting.helpers import report_of

FLEET = gpus("n1", 8, at(0), at(100))


def test_ettr_of_a_job_is_productive_over_allocated_gpu_time() -> None:
    # 8 GPUs for 100 h; interrupted at 50 h, resumed at 52 h, last checkpoint at 49 h:
    # 16 GPU-h restarting and 8 redone out of 800.
    inc = incident(
        "a",
        onset=at(50),
        detected=at(50),
        jobs=[
            job("j", 8, at(50), resumed=at(52), last_checkpoint=at(49), start=at(0), end=at(100))
        ],
    )
    doc = report_of([inc], FLEET)
    assert doc["ettr"]["jobs"] == [{"job_id": "j", "ettr": pytest.approx(776 / 800)}]
    assert doc["ettr"]["cluster"]["gpu_hour_weighted"] == pytest.approx(776 / 800)


def test_requeues_of_one_run_are_joined_and_the_cluster_is_weighted_two_ways() -> None:
    incs = [
        incident(
            "a",
            onset=at(10),
            detected=at(10),
            jobs=[
                job(
                    "big",
                    8,
                    at(10),
                    resumed=at(12),
                    last_checkpoint=at(10),
                    start=at(0),
                    end=at(40),
                )
            ],
        ),
        incident(
            "b",
            onset=at(30),
            detected=at(30),
            jobs=[
                job(
                    "big",
                    8,
                    at(30),
                    resumed=at(32),
                    last_checkpoint=at(30),
                    start=at(12),
                    end=at(100),
                ),
                job(
                    "small",
                    2,
                    at(30),
                    resumed=at(40),
                    last_checkpoint=at(20),
                    start=at(20),
                    end=at(60),
                ),
            ],
        ),
    ]
    doc = report_of(incs, FLEET)
    jobs = {j["job_id"]: j["ettr"] for j in doc["ettr"]["jobs"]}
    # big: 8 x 100 h allocated, 8 x (2 + 2) lost; small: 2 x 40 allocated, 2 x (10 + 10) lost
    assert jobs == {"big": pytest.approx(768 / 800), "small": pytest.approx(40 / 80)}
    cluster = doc["ettr"]["cluster"]
    assert cluster["gpu_hour_weighted"] == pytest.approx((768 + 40) / 880)
    assert cluster["job_count_weighted"] == pytest.approx((768 / 800 + 0.5) / 2)


def test_ettr_is_unknown_without_an_allocation_or_without_a_checkpoint_time() -> None:
    incs = [
        incident("a", jobs=[job("no_alloc", 8, at(10), resumed=at(11), last_checkpoint=at(9))]),
        incident("b", jobs=[job("no_ckpt", 8, at(10), resumed=at(11), start=at(0), end=None)]),
    ]
    doc = report_of(incs, FLEET)
    assert doc["ettr"] == {
        "cluster": {"gpu_hour_weighted": None, "job_count_weighted": None},
        "jobs": [{"job_id": "no_alloc", "ettr": None}, {"job_id": "no_ckpt", "ettr": None}],
        "never_resumed": [],
    }


def test_a_run_from_the_scheduler_that_no_failure_hit_counts_as_fully_productive() -> None:
    incs = [
        incident(
            "a",
            jobs=[
                job(
                    "j", 8, at(10), resumed=at(20), last_checkpoint=at(10), start=at(0), end=at(100)
                )
            ],
        )
    ]
    import json

    from accounting.interchange import read_exposure, read_incidents

    built = report.build(
        read_incidents([json.dumps(i) for i in incs]),
        read_exposure([json.dumps(r) for r in FLEET]),
        runs=[JobRun("k", 8, at(0), at(100))],
    )
    cluster = report.to_json(built)["ettr"]["cluster"]
    assert cluster["gpu_hour_weighted"] == pytest.approx((720 + 800) / 1600)
    assert cluster["job_count_weighted"] == pytest.approx((0.9 + 1.0) / 2)


def test_a_job_never_resumed_is_charged_restart_only_to_its_runs_end_and_listed() -> None:
    # 8 GPUs from 0 h; interrupted at 20 h with a checkpoint at 18 h, never resumed; the run
    # ended at 30 h (cancelled): 8 x 10 h restart, not 8 x 80 h to the report's end at 100 h.
    # A second job, still running (end null), does wait to the report's end: 4 x 60 h.
    incs = [
        incident(
            "a",
            onset=at(20),
            detected=at(20),
            jobs=[job("gone", 8, at(20), last_checkpoint=at(18), start=at(0), end=at(30))],
        ),
        incident(
            "b",
            onset=at(40),
            detected=at(40),
            jobs=[job("waits", 4, at(40), last_checkpoint=at(40), start=at(0), end=None)],
        ),
    ]
    doc = report_of(incs, FLEET)
    lost = {i["id"]: i["gpu_hours_lost"] for i in doc["incidents"]}
    assert lost["a"]["restart"] == pytest.approx(8 * 10)
    assert lost["a"]["recompute"] == pytest.approx(8 * 2)
    assert lost["b"]["restart"] == pytest.approx(4 * 60)
    assert doc["ettr"]["never_resumed"] == ["gone"]
    jobs = {j["job_id"]: j["ettr"] for j in doc["ettr"]["jobs"]}
    assert jobs["gone"] == pytest.approx((240 - 96) / 240)  # 8 x 30 h allocated, 8 x 12 lost
    assert jobs["waits"] == pytest.approx(160 / 400)  # 4 x 100 h allocated, 4 x 60 lost


def test_a_run_from_the_scheduler_caps_the_restart_of_a_hit_that_carries_no_run_times() -> None:
    # what the ledger gets from Prometheus: the hit has no start/end, the run comes apart
    hit = job("j", 2, at(20), last_checkpoint=at(19))
    incs = [incident("a", onset=at(20), detected=at(20), jobs=[hit])]
    built = report.build(_read(incs), _read_exposure(FLEET), runs=[JobRun("j", 2, at(5), at(21))])
    (cost,) = built.costs
    assert cost.restart_h == pytest.approx(2 * 1)
    assert built.ettr.never_resumed == ("j",)


def test_a_hit_without_a_checkpoint_before_the_window_leaves_the_ettr_known() -> None:
    # interrupted at 10 h without a checkpoint, resumed at 12 h; the window starts at 20 h:
    # whatever was redone lies before it, so the ETTR inside the window is known (and 1)
    incs = [
        incident(
            "a", onset=at(10), jobs=[job("j", 8, at(10), resumed=at(12), start=at(0), end=at(100))]
        )
    ]
    doc = report_of(incs, FLEET, since=at(20), until=at(100))
    assert doc["ettr"]["jobs"] == [{"job_id": "j", "ettr": pytest.approx(1.0)}]
    assert report_of(incs, FLEET)["ettr"]["jobs"] == [{"job_id": "j", "ettr": None}]


def _read(lines: list[dict]) -> list[Incident]:
    import json

    from accounting.interchange import read_incidents

    return read_incidents([json.dumps(i) for i in lines])


def _read_exposure(lines: list[dict]) -> list[Exposure]:
    import json

    from accounting.interchange import read_exposure

    return read_exposure([json.dumps(r) for r in lines])


# (interrupted, resumed or None, last checkpoint or None)
Events = list[tuple[int, int | None, int | None]]
END = 250  # the timeline; the window is any part of it
Timeline = tuple[int, int | None, int, Events]  # (start, end or None: still running, gpus, events)


@st.composite
def timelines(draw: st.DrawFn) -> Timeline:
    start = draw(st.integers(0, END - 1))
    end = draw(st.integers(start + 1, END))  # runs that end early, and runs to the end
    gpus_ = draw(st.integers(1, 16))
    stops = sorted(draw(st.lists(st.integers(start, end - 1), max_size=6)))
    events: Events = []
    checkpoint = start  # the latest checkpoint before an interruption never moves back
    for k, interrupted in enumerate(stops):
        last = k == len(stops) - 1
        resumed = None if last and draw(st.booleans()) else draw(st.integers(interrupted, end))
        checkpoint = draw(st.integers(checkpoint, interrupted))
        known = draw(st.integers(0, 3)) > 0  # a hit without a checkpoint, one time in four
        events.append((interrupted, resumed, checkpoint if known else None))
    still_running = end == END and draw(st.booleans())
    return start, None if still_running else end, gpus_, events


def _independent(
    start: int, end: int | None, events: Events, since: int, until: int
) -> tuple[int, int, int, int]:
    """(productive, restart, recompute, unknown) seconds of the run inside [since, until),
    walking it one second at a time: restart from an interruption to its resumption (or
    to the run's end, or the window's while it still runs); before an interruption, from
    its checkpoint, recompute, or unknown without one."""
    stop = until if end is None else end
    productive = restart = recompute = unknown = 0
    for t in range(max(start, since), min(stop, until)):
        if any(i <= t < min(stop, stop if r is None else r) for i, r, _ in events):
            restart += 1
            continue
        later = [i for i, _, _ in events if i > t]
        if not later:
            productive += 1
            continue
        checkpoint = next(c for i, _, c in events if i == min(later))  # the first of ties
        if checkpoint is None:
            unknown += 1
        elif checkpoint <= t:
            recompute += 1
        else:
            productive += 1
    return productive, restart, recompute, unknown


def _incidents(jobs: list[Timeline]) -> list[Incident]:
    """One incident per interruption time: jobs interrupted at the same second share it
    (one failure hitting several jobs)."""
    hits: dict[int, list[JobHit]] = {}
    for n, (start, end, gpus_, events) in enumerate(jobs):
        for i, r, c in events:
            hit = JobHit(f"j{n}", gpus_, float(i), None if r is None else float(r),
                         None if c is None else float(c), float(start),
                         None if end is None else float(end))  # fmt: skip
            hits.setdefault(i, []).append(hit)
    return [
        Incident(
            f"i{t}", "n1", "0", "H100", "gpu", "x", float(t), float(t), None, None, 0, tuple(group)
        )
        for t, group in sorted(hits.items())
    ]


@st.composite
def windows(draw: st.DrawFn) -> tuple[int, int]:
    """The whole timeline, or a window narrower than it."""
    if draw(st.booleans()):
        return 0, END
    since = draw(st.integers(0, END - 1))
    return since, draw(st.integers(since + 1, END))


@settings(max_examples=400, deadline=None)
@given(st.lists(timelines(), min_size=1, max_size=3), windows(), st.booleans())
def test_every_jobs_allocated_gpu_time_is_productive_plus_restart_plus_recompute(
    jobs: list[Timeline], window_: tuple[int, int], runs_apart: bool
) -> None:
    # the run's times come on the hits (interchange extension) or, as from Prometheus, apart
    since, until = window_
    runs = [
        JobRun(f"j{n}", g, float(s), None if e is None else float(e))
        for n, (s, e, g, _) in enumerate(jobs)
    ]
    incidents = _incidents(jobs)
    if runs_apart:
        incidents = [
            dataclasses.replace(
                inc,
                jobs=tuple(dataclasses.replace(h, start=None, end=None) for h in inc.jobs),
            )
            for inc in incidents
        ]
    window = Window(float(since), float(until))
    in_window = {inc.id for inc in incidents if window.holds(inc.onset)}
    per_job: dict[str, list[float]] = {}
    in_window_lost = 0.0
    for hit in hit_costs(incidents, window, runs):
        got = per_job.setdefault(str(hit.job_id), [0.0, 0.0])
        got[0] += hit.restart_s
        got[1] += hit.recompute_s or 0.0
        if hit.incident_id in in_window:
            in_window_lost += hit.restart_s + (hit.recompute_s or 0.0)
    built = report.build(incidents, [], since=float(since), until=float(until), runs=runs)
    ettr = {j.job_id: j.ettr for j in built.ettr.jobs}
    for n, (start, end, gpus_, events) in enumerate(jobs):
        restart, recompute = per_job.get(f"j{n}", [0.0, 0.0])
        productive, want_restart, want_recompute, unknown = _independent(
            start, end, events, since, until
        )
        assert restart == pytest.approx(gpus_ * want_restart, abs=1e-6)
        assert recompute == pytest.approx(gpus_ * want_recompute, abs=1e-6)
        length = Window(float(since), float(until)).clip(float(start), end)
        allocated = gpus_ * length
        assert allocated == pytest.approx(
            gpus_ * (productive + unknown) + restart + recompute, abs=1e-6
        )
        if unknown or not length:
            assert ettr.get(f"j{n}") is None
        else:
            assert ettr[f"j{n}"] == pytest.approx(productive / length, abs=1e-9)
    # the never-resumed jobs are those whose run ended while they waited, hit in the window
    want_ended = {
        f"j{n}"
        for n, (_, end, _, events) in enumerate(jobs)
        if end is not None and any(r is None and window.holds(float(i)) for i, r, _ in events)
    }
    assert set(built.ettr.never_resumed) == want_ended
    # and the incidents' totals are the same GPU-time, nothing counted twice or lost
    total = sum(c.total_h for c in built.costs) * 3600
    assert total == pytest.approx(in_window_lost, abs=1e-6)
