"""Evidence from Prometheus' HTTP API (a hand-written fake of query and query_range):
presence becomes exposure intervals, allocation becomes job runs and the jobs an incident
hit, the finding before detection becomes the onset."""

from __future__ import annotations

from typing import Any

from accounting import report
from accounting.model import Exposure, Incident, JobHit, JobRun
from accounting.prometheus_evidence import PrometheusEvidence, intervals
from exporter import catalog as c

STEP = 300.0


Points = list[float] | list[tuple[float, float]]  # sample times (value 1) or (time, value)


def _points(points: Points) -> list[tuple[float, float]]:
    return [p if isinstance(p, tuple) else (p, 1.0) for p in points]


def _compare(op: str, points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """PromQL's ``== 0`` keeps the samples equal to 0 (with their value, 0); ``== bool 0``
    keeps every sample, valued 1 where it equals 0 and 0 elsewhere."""
    if op == "== bool 0":
        return [(t, 1.0 if v == 0 else 0.0) for t, v in points]
    if op == "== 0":
        return [(t, v) for t, v in points if v == 0]
    return points


class FakeProm:
    """Series as (labels, samples); a selector's braces are matched label by label, and a
    comparison with 0 (``== 0`` or ``== bool 0``) is applied as Prometheus would. Native
    series only: the dcgm-exporter half of a query is left to the real-Prometheus tests."""

    def __init__(self, series: dict[str, list[tuple[dict[str, str], Points]]]) -> None:
        self.series = series
        self.calls: list[tuple[str, dict[str, str]]] = []

    def _match(self, query: str) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        out = []
        for part in query.split(" or "):
            if part.startswith("label_replace("):
                continue  # dcgm-exporter's dialect: proved on a real Prometheus (_real.py)
            part = part.strip("() ")
            selector, _, op = part.partition(" ==")
            name, _, sel = selector.partition("{")
            want = dict(kv.split("=", 1) for kv in sel.rstrip("}").split(",") if kv)
            want = {k: v.strip('"') for k, v in want.items()}
            for labels, points in self.series.get(name, []):
                if all(labels.get(k) == v for k, v in want.items()):
                    out.append((labels, _compare(f"=={op}" if op else "", _points(points))))
        return out

    def get(self, path: str, params: dict[str, str]) -> Any:
        self.calls.append((path, params))
        found = self._match(params["query"])
        if path.endswith("query_range"):
            lo, hi = float(params["start"]), float(params["end"])
            result = [
                {"metric": labels, "values": [[t, _text(v)] for t, v in points if lo <= t <= hi]}
                for labels, points in found
            ]
            return {"data": {"result": [r for r in result if r["values"]]}}
        if "time" not in params:  # now: every series still there
            return {"data": {"result": [{"metric": labels} for labels, _ in found]}}
        at = float(params["time"])
        return {"data": {"result": [{"metric": labels, "value": [at, "1"]}
                                    for labels, points in found
                                    if any(abs(t - at) <= 2 * STEP for t, _ in points)]}}  # fmt: skip


def _text(value: float) -> str:
    """Sample values as Prometheus writes them: "0", "1", not "0.0"."""
    return repr(int(value)) if value == int(value) else repr(value)


def _every(start: float, end: float) -> list[float]:
    return [start + k * STEP for k in range(int((end - start) / STEP) + 1)]


def test_runs_of_samples_become_intervals_and_the_last_stays_open_near_the_end() -> None:
    times = _every(0, 3000) + _every(6000, 9000)
    assert list(intervals(times, STEP, 9100)) == [(0, 3300), (6000, None)]
    assert list(intervals(times, STEP, 20000)) == [(0, 3300), (6000, 9300)]


def test_presence_of_gpu_info_is_exposure_per_serial() -> None:
    info = c.GPU_INFO.name
    prom = FakeProm({info: [
        ({"node": "n1", "gpu": "0", "serial": "S0", "name": "H100"}, _every(0, 3000)),
        ({"node": "n1", "gpu": "1", "serial": "S1", "name": "H100"}, _every(0, 9000)),
    ]})  # fmt: skip
    rows = PrometheusEvidence(prom, step_s=STEP).exposure(0, 9000)
    assert sorted(rows, key=lambda r: str(r.unit)) == [
        Exposure("S0", "n1", "0", "H100", 0, 3300),
        Exposure("S1", "n1", "1", "H100", 0, None),
    ]


def test_long_ranges_are_read_in_chunks_under_the_point_limit() -> None:
    prom = FakeProm({c.GPU_INFO.name: [({"node": "n1", "gpu": "0"}, [0.0])]})
    PrometheusEvidence(prom, step_s=STEP).exposure(0, 365 * 86400)
    starts = [float(p["start"]) for _, p in prom.calls]
    ends = [float(p["end"]) for _, p in prom.calls]
    assert len(prom.calls) > 1
    assert all((e - s) / STEP <= 10_000 for s, e in zip(starts, ends, strict=True))


def test_the_onset_is_the_start_of_the_finding_run_before_detection() -> None:
    prom = FakeProm({c.FINDING.name: [({"node": "n1", "kind": "xid"}, _every(9000, 12000))]})
    evidence = PrometheusEvidence(prom, step_s=STEP)
    assert evidence.onset("n1", "3", detected=12000) == 9000
    assert evidence.onset("n2", None, detected=12000) is None


def test_a_gpu_reported_lost_sets_the_onset_when_it_was_first_seen_down() -> None:
    # gpu_up is 1 until 9000, 0 from 9300 (fell off the bus) to the detection at 12000;
    # GPU 1 beside it stays up. Prometheus answers the real values, 1s and 0s.
    up = c.GPU_UP.name
    down = [(t, 0.0 if t >= 9300 else 1.0) for t in _every(0, 12000)]
    prom = FakeProm({up: [
        ({"node": "n1", "gpu": "0", "reason": ""}, down),
        ({"node": "n1", "gpu": "1", "reason": ""}, [(t, 1.0) for t in _every(0, 12000)]),
    ]})  # fmt: skip
    evidence = PrometheusEvidence(prom, step_s=STEP)
    assert evidence.onset("n1", "0", detected=12000) == 9300
    assert evidence.onset("n1", "1", detected=12000) is None  # up all along: no evidence
    assert evidence.onset("n1", None, detected=12000) == 9300  # the node's: any GPU lost


def test_the_fake_answers_a_plain_equals_zero_with_the_zeros_as_prometheus_does() -> None:
    # the fake answers "up == 0" with the zeros themselves, as Prometheus does: a query
    # written that way could never yield an onset, which is why the ledger asks "== bool 0"
    down = [(t, 0.0) for t in _every(9000, 12000)]
    prom = FakeProm({c.GPU_UP.name: [({"node": "n1", "gpu": "0"}, down)]})
    body = prom.get("/api/v1/query_range", {
        "query": f'{c.GPU_UP.name}{{node="n1"}} == 0', "start": "0", "end": "12000",
        "step": "300",
    })  # fmt: skip
    assert {v for r in body["data"]["result"] for _, v in r["values"]} == {"0"}


def test_jobs_on_the_node_at_onset_are_interrupted_and_resumed_when_allocated_again() -> None:
    alloc = c.GPU_ALLOCATION_INFO.name
    prom = FakeProm({alloc: [
        ({"node": "n1", "gpu": "0", "job_id": "42"}, _every(0, 9000)),
        ({"node": "n1", "gpu": "1", "job_id": "42"}, _every(0, 9000)),
        ({"node": "n2", "gpu": "0", "job_id": "42"}, _every(12000, 20000)),
    ]})  # fmt: skip
    evidence = PrometheusEvidence(prom, step_s=STEP)
    (hit,) = evidence.jobs("n1", "0", onset=8000, at=9600)
    assert hit == JobHit("42", 2, 9300, 12000, None)  # two GPUs at a time, never three
    assert evidence.jobs("n1", "0", onset=3000, at=4000) == []  # ran on past the mitigation
    assert evidence.runs(0, 20000) == [JobRun("42", 2, 0, None)]


def test_the_gpu_model_and_count_come_from_gpu_info() -> None:
    info = c.GPU_INFO.name
    gpus = [({"node": "n1", "gpu": str(g), "name": "A100"}, [100.0]) for g in range(4)]
    evidence = PrometheusEvidence(FakeProm({info: gpus}), step_s=STEP)
    assert evidence.gpu_model("n1") == "A100"
    assert evidence.gpus("n1") == 4
    assert evidence.gpu_model("n9") is None
    assert evidence.gpus("n9") == 8  # nothing known: the default


def test_a_job_never_allocated_again_is_not_charged_restart_to_the_reports_end() -> None:
    # job 42 ran on n1's two GPUs until 9000 (its last sample; the run ends a step later,
    # 9300) and was never allocated again: the ledger's hit has no resumption, but the
    # allocation series says the run ended, so its restart stops there, not at 100,000
    alloc = c.GPU_ALLOCATION_INFO.name
    prom = FakeProm({alloc: [
        ({"node": "n1", "gpu": "0", "job_id": "42"}, _every(0, 9000)),
        ({"node": "n1", "gpu": "1", "job_id": "42"}, _every(0, 9000)),
    ]})  # fmt: skip
    evidence = PrometheusEvidence(prom, step_s=STEP)
    hits = evidence.jobs("n1", "0", onset=8000, at=9600)
    assert hits == [JobHit("42", 2, 9300, None, None)]
    inc = Incident("i", "n1", "0", "H100", "gpu", "xid_fatal", 8000, 8000, 9600, None, 0,
                   tuple(hits))  # fmt: skip
    built = report.build([inc], [], since=0, until=100_000, runs=evidence.runs(0, 100_000))
    (cost,) = built.costs
    assert cost.restart_h == 0.0
    assert built.ettr.never_resumed == ("42",)
