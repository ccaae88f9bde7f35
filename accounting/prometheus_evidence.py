"""``Evidence`` from a Prometheus-compatible HTTP API: presence (``gpuwarden_gpu_info``),
allocation (``gpuwarden_gpu_allocation_info``) and the first finding or lost GPU before a
detection (``gpuwarden_finding``, ``gpuwarden_gpu_up``).

On a dcgm-exporter fleet presence and allocation come from dcgm-exporter's own series
(``promql.py``): every GPU it reports has the presence field, its identity labels name the
node (``Hostname``, 4.x ``hostname``), the model and the UUID, and ``hpc_job`` names the
Slurm job (``--hpc-job-mapping-dir``), so the ledger's exposure and ETTR need no gpuwarden
exporter.

Series are read at ``STEP_S`` resolution in chunks of at most ``MAX_POINTS`` points (the
Prometheus query_range limit is 11,000 per series); a gap longer than two steps ends a
presence or allocation interval. What a series cannot show stays unknown: no checkpoint
time is guessed (checkpoints are the job's acks, not a Prometheus series).
"""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from collections import Counter, defaultdict
from collections.abc import Iterator
from typing import Any, Protocol

from accounting import promql
from accounting.model import Exposure, JobHit, JobRun
from exporter import catalog as c

STEP_S = 300.0
MAX_POINTS = 10_000
ONSET_LOOKBACK_S = 6 * 3600.0
Samples = list[tuple[dict[str, str], list[float]]]  # (labels, sample times)


class PromApi(Protocol):
    def get(self, path: str, params: dict[str, str]) -> Any: ...


class UrllibApi:
    def __init__(self, url: str, timeout_s: float = 30.0) -> None:
        self.url, self.timeout_s = url.rstrip("/"), timeout_s

    def get(self, path: str, params: dict[str, str]) -> Any:
        query = urllib.parse.urlencode(params)
        with urllib.request.urlopen(f"{self.url}{path}?{query}", timeout=self.timeout_s) as r:
            return json.load(r)


def _q(name: str, **labels: str | None) -> str:
    sel = ",".join(f'{k}="{v}"' for k, v in labels.items() if v is not None)
    return f"{name}{{{sel}}}"


def concurrent(series: Samples) -> int:
    """The most series present at one sample time: a job's GPUs, not every GPU it ever had."""
    counts = Counter(t for _, times in series for t in times)
    return max(counts.values(), default=0)


def intervals(
    times: list[float], step: float, until: float
) -> Iterator[tuple[float, float | None]]:
    """Runs of samples no more than two steps apart; the last open if it reaches ``until``."""
    if not times:
        return
    start = prev = times[0]
    for t in times[1:]:
        if t - prev > 2 * step:
            yield start, prev + step
            start = t
        prev = t
    yield start, (None if until - prev <= 2 * step else prev + step)


class PrometheusEvidence:
    def __init__(self, url: str | PromApi, gpus_per_node: int = 8, step_s: float = STEP_S) -> None:
        self.api = UrllibApi(url) if isinstance(url, str) else url
        self.gpus_per_node, self.step = gpus_per_node, step_s
        self._info: Samples | None = None

    def _range(self, query: str, since: float, until: float) -> Samples:
        merged: dict[tuple[tuple[str, str], ...], list[float]] = defaultdict(list)
        chunk = self.step * MAX_POINTS
        start = since
        while start <= until:
            end = min(until, start + chunk)
            params = {
                "query": query,
                "start": repr(start),
                "end": repr(end),
                "step": repr(self.step),
            }
            body = self.api.get("/api/v1/query_range", params)
            for series in body.get("data", {}).get("result", []):
                key = tuple(sorted(series["metric"].items()))
                # a sample is evidence when its value is not 0: a finding's 1, a lost GPU's
                # ``== bool 0`` 1; presence and allocation series are always 1
                merged[key] += [float(t) for t, v in series["values"] if float(v) != 0.0]
            start = end + self.step
        return [(dict(k), sorted(set(v))) for k, v in merged.items()]

    def _instant(self, query: str, at: float | None = None) -> list[dict[str, str]]:
        params = {"query": query} | ({} if at is None else {"time": repr(at)})
        body = self.api.get("/api/v1/query", params)
        return [s["metric"] for s in body.get("data", {}).get("result", [])]

    def onset(self, node: str, gpu: str | None, detected: float) -> float | None:
        """The start of the last run of evidence before ``detected``: an active finding, or
        the GPU reported lost. ``== bool 0`` turns "up is 0" into a 1 that ``_range`` keeps
        (a plain ``== 0`` filter returns the zeros themselves, which it drops)."""
        since = detected - ONSET_LOOKBACK_S
        lost = f"{_q(c.GPU_UP.name, node=node, gpu=gpu)} == bool 0"
        query = f"{_q(c.FINDING.name, node=node)} or ({lost})"
        times = sorted(t for _, ts in self._range(query, since, detected) for t in ts)
        runs = list(intervals(times, self.step, detected))
        return runs[-1][0] if runs else None

    def gpu_model(self, node: str) -> str | None:
        names = [m.get("name") for m in self._instant(promql.gpus(node))]
        return next((n for n in names if n), None)

    def gpus(self, node: str) -> int | None:
        return len(self._instant(promql.gpus(node))) or self.gpus_per_node

    def exposure(self, since: float, until: float) -> list[Exposure]:
        rows = []
        for labels, times in self._range(promql.gpus(), since, until):
            node, gpu = labels.get("node", ""), labels.get("gpu")
            unit = labels.get("serial") or labels.get("uuid") or f"{node}/{gpu}"
            model = labels.get("name") or "unknown"
            rows += [
                Exposure(unit, node, gpu, model, s, e)
                for s, e in intervals(times, self.step, until)
            ]
        return rows

    def _allocations(self, since: float, until: float) -> Samples:
        return self._range(promql.allocations(), since, until)

    def runs(self, since: float, until: float) -> list[JobRun]:
        per_job: dict[str, Samples] = defaultdict(list)
        for labels, times in self._allocations(since, until):
            per_job[labels.get("job_id", "")].append((labels, times))
        out = []
        for job_id, series in per_job.items():
            starts = [ts[0] for _, ts in series if ts]
            ends = [e for _, ts in series for _, e in intervals(ts, self.step, until)]
            end = None if any(e is None for e in ends) else max(e for e in ends if e is not None)
            out.append(JobRun(job_id, concurrent(series), min(starts), end))
        return out

    def jobs(self, node: str, gpu: str | None, onset: float, at: float) -> list[JobHit]:
        """The jobs on the node at onset whose allocation ended by ``at`` (the mitigation):
        interrupted then, resumed when the job id was allocated again. A job still running
        past ``at`` was not stopped by the failure and is not a hit."""
        since, until = onset - ONSET_LOOKBACK_S, at + 7 * 86400.0
        present = self._instant(promql.allocations(node=node), onset)
        hits = []
        for job_id in sorted({m.get("job_id", "") for m in present}):
            series = self._range(promql.allocations(job_id=job_id), since, until)
            times = sorted({t for _, ts in series for t in ts})
            runs = list(intervals(times, self.step, until))
            covering = [e for s, e in runs if s <= onset]
            if not covering or covering[-1] is None or covering[-1] > at + 2 * self.step:
                continue  # still running after the mitigation: the failure did not stop it
            interrupted = min(covering[-1], at)
            resumed = next((s for s, _ in runs if s > interrupted), None)
            hits.append(JobHit(job_id, concurrent(series), interrupted, resumed, None))
        return hits
