"""ETTR per job run and for the cluster, by hand, and the accounting identity for any
timeline: allocated GPU-time = productive + restart + recompute."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remediation.accounting import report
from remediation.accounting.costs import hit_costs
from remediation.accounting.model import Incident, JobHit, JobRun
from remediation.accounting.window import Window
from tests.remediation.accounting.builders import at, gpus, incident, job
from tests.remediation.accounting.helpers import report_of

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

    from remediation.accounting.interchange import read_exposure, read_incidents

    built = report.build(
        read_incidents([json.dumps(i) for i in incs]),
        read_exposure([json.dumps(r) for r in FLEET]),
        runs=[JobRun("k", 8, at(0), at(100))],
    )
    cluster = report.to_json(built)["ettr"]["cluster"]
    assert cluster["gpu_hour_weighted"] == pytest.approx((720 + 800) / 1600)
    assert cluster["job_count_weighted"] == pytest.approx((0.9 + 1.0) / 2)


Events = list[tuple[int, int | None, int]]  # (interrupted, resumed, last checkpoint)
END = 250  # every run ends with the window: a run never resumed waits until then


@st.composite
def timelines(draw: st.DrawFn) -> tuple[int, int, int, Events]:
    start = draw(st.integers(0, END - 1))
    gpus_ = draw(st.integers(1, 16))
    stops = sorted(draw(st.lists(st.integers(start, END - 1), max_size=6)))
    events = []
    checkpoint = start  # the latest checkpoint before an interruption never moves back
    for k, interrupted in enumerate(stops):
        last = k == len(stops) - 1
        resumed = None if last and draw(st.booleans()) else draw(st.integers(interrupted, END))
        checkpoint = draw(st.integers(checkpoint, interrupted))
        events.append((interrupted, resumed, checkpoint))
    return start, END, gpus_, events


def _independent(start: int, end: int, events: Events) -> tuple[int, int, int]:
    """(productive, restart, recompute) seconds, walking the run one second at a time."""
    productive = restart = recompute = 0
    for t in range(start, end):
        if any(i <= t < (end if r is None else r) for i, r, _ in events):
            restart += 1
            continue
        later = [(i, c) for i, _, c in events if i > t]
        if later and min(later)[1] <= t:
            recompute += 1
        else:
            productive += 1
    return productive, restart, recompute


def _incidents(jobs: list[tuple[int, int, int, Events]]) -> list[Incident]:
    """One incident per interruption time: jobs interrupted at the same second share it
    (one failure hitting several jobs)."""
    hits: dict[int, list[JobHit]] = {}
    for n, (start, end, gpus_, events) in enumerate(jobs):
        for i, r, c in events:
            hit = JobHit(f"j{n}", gpus_, float(i), None if r is None else float(r), float(c),
                         float(start), float(end))  # fmt: skip
            hits.setdefault(i, []).append(hit)
    return [
        Incident(
            f"i{t}", "n1", "0", "H100", "gpu", "x", float(t), float(t), None, None, 0, tuple(group)
        )
        for t, group in sorted(hits.items())
    ]


@settings(max_examples=300, deadline=None)
@given(st.lists(timelines(), min_size=1, max_size=3))
def test_every_jobs_allocated_gpu_time_is_productive_plus_restart_plus_recompute(jobs) -> None:
    runs = [JobRun(f"j{n}", g, float(s), float(e)) for n, (s, e, g, _) in enumerate(jobs)]
    window = Window(0.0, float(END))
    per_job: dict[str, list[float]] = {}
    for hit in hit_costs(_incidents(jobs), window):
        got = per_job.setdefault(str(hit.job_id), [0.0, 0.0])
        got[0] += hit.restart_s
        got[1] += hit.recompute_s or 0.0
    built = report.build(_incidents(jobs), [], since=0.0, until=float(END), runs=runs)
    ettr = {j.job_id: j.ettr for j in built.ettr.jobs}
    for n, (start, end, gpus_, events) in enumerate(jobs):
        restart, recompute = per_job.get(f"j{n}", [0.0, 0.0])
        productive, want_restart, want_recompute = _independent(start, end, events)
        assert restart == pytest.approx(gpus_ * want_restart, abs=1e-6)
        assert recompute == pytest.approx(gpus_ * want_recompute, abs=1e-6)
        allocated = gpus_ * (end - start)
        assert allocated == pytest.approx(gpus_ * productive + restart + recompute, abs=1e-6)
        assert ettr[f"j{n}"] == pytest.approx(productive / (end - start), abs=1e-9)
    # and the incidents' totals are the same GPU-time, nothing counted twice or lost
    total = sum(c.restart_h + (c.recompute_h or 0.0) for c in built.costs) * 3600
    assert total == pytest.approx(sum(sum(v) for v in per_job.values()), abs=1e-6)
