"""Evidence from Prometheus' HTTP API (a hand-written fake of query and query_range):
presence becomes exposure intervals, allocation becomes job runs and the jobs an incident
hit, the finding before detection becomes the onset."""

from __future__ import annotations

from typing import Any

from exporter import catalog as c
from remediation.accounting.model import Exposure, JobHit, JobRun
from remediation.accounting.prometheus_evidence import PrometheusEvidence, intervals

STEP = 300.0


class FakeProm:
    """Series as (labels, sample times); a selector's braces are matched label by label."""

    def __init__(self, series: dict[str, list[tuple[dict[str, str], list[float]]]]) -> None:
        self.series = series
        self.calls: list[tuple[str, dict[str, str]]] = []

    def _match(self, query: str) -> list[tuple[dict[str, str], list[float]]]:
        out = []
        for part in query.split(" or "):
            part = part.strip("() ").split(" == ")[0]
            name, _, sel = part.partition("{")
            want = dict(kv.split("=", 1) for kv in sel.rstrip("}").split(",") if kv)
            want = {k: v.strip('"') for k, v in want.items()}
            for labels, times in self.series.get(name, []):
                if all(labels.get(k) == v for k, v in want.items()):
                    out.append((labels, times))
        return out

    def get(self, path: str, params: dict[str, str]) -> Any:
        self.calls.append((path, params))
        found = self._match(params["query"])
        if path.endswith("query_range"):
            lo, hi = float(params["start"]), float(params["end"])
            result = [
                {"metric": labels, "values": [[t, "1"] for t in times if lo <= t <= hi]}
                for labels, times in found
            ]
            return {"data": {"result": [r for r in result if r["values"]]}}
        if "time" not in params:  # now: every series still there
            return {"data": {"result": [{"metric": labels} for labels, _ in found]}}
        at = float(params["time"])
        return {"data": {"result": [{"metric": labels, "value": [at, "1"]}
                                    for labels, times in found
                                    if any(abs(t - at) <= 2 * STEP for t in times)]}}  # fmt: skip


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
