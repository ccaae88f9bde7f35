"""The Prometheus source: a real Prometheus with backfilled history, recorded query_range
responses (fixtures/prometheus/), and malformed responses."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import numpy as np
import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources import SourceError
from analyzer.sources.prometheus import PrometheusSource, parse_matrix
from exporter import catalog as c
from tests.realcomp import promtool, run_prometheus

from .promdata import NODES, STEP, openmetrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prometheus"
RECORDED_END = 1_700_000_000.0 - (1_700_000_000.0 % STEP)


class Recording:
    """Wraps an HTTP client and keeps each response by query, for ``UPDATE_GOLDEN=1``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.bodies: dict[str, object] = {}

    async def get_json(self, url, params):
        body = await self.inner.get_json(url, params)
        self.bodies[params["query"]] = body
        return body


class Replay:
    def __init__(self, bodies) -> None:
        self.bodies = bodies

    async def get_json(self, url, params):
        return self.bodies.get(
            params["query"], {"status": "success", "data": {"resultType": "matrix", "result": []}}
        )


def _expected(findings):
    return {(f.node, f.subject, f.kind) for f in findings}


WANT = {("node-01", "gpu=3", "xid_fatal"), ("node-00", "port=mlx5_2/1", "ib_port_down")}


@pytest.mark.real
def test_prometheus_source_reads_backfilled_history_and_detectors_find_the_faults(tmp_path):
    end = RECORDED_END if os.environ.get("UPDATE_GOLDEN") else (time.time() // STEP) * STEP - 7200
    om = tmp_path / "data.om"
    om.write_text(openmetrics(end))
    data = tmp_path / "data"
    r = promtool("tsdb", "create-blocks-from", "openmetrics", str(om), str(data))
    assert r.returncode == 0, r.stderr.decode()
    data.chmod(0o777)
    with run_prometheus(
        "global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data
    ) as prom:
        source = PrometheusSource(prom.url, window=600, step=STEP)
        rec = Recording(source.http)
        source.http = rec

        async def read():
            try:
                return await source.read(end)
            finally:
                await source.close()

        w = asyncio.run(read())
    assert w.nodes == NODES and w.jobs == {"777": (0, 1, 2)}
    assert len(w.t) == 41 and w.t[-1] == end
    assert [(e.node, e.gpu, e.xid) for e in w.xids] == [(1, 3, 79)]
    util = w.get(c.GPU_UTILIZATION)
    assert util is not None and util.shape == (41, 3, 8) and np.all(util == 0.8)
    assert _expected(Engine(default_detectors()).cycle(w)) == WANT
    if os.environ.get("UPDATE_GOLDEN"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for q, body in rec.bodies.items():
            (FIXTURES / f"{q}.json").write_text(json.dumps(body, indent=1) + "\n")


def test_recorded_query_range_responses_give_the_same_findings():
    bodies = {p.stem: json.loads(p.read_text()) for p in FIXTURES.glob("*.json")}
    assert len(bodies) >= 8
    source = PrometheusSource("http://recorded", window=600, step=STEP, http=Replay(bodies))
    w = asyncio.run(source.read(RECORDED_END))
    assert w.nodes == NODES
    assert _expected(Engine(default_detectors()).cycle(w)) == WANT


@pytest.mark.parametrize(
    "body, why",
    [
        ([], "not a JSON object"),
        ({"status": "error", "error": "bad query"}, "bad query"),
        ({"status": "success", "data": {"resultType": "vector", "result": []}}, "matrix"),
        ({"status": "success", "data": {"resultType": "matrix", "result": {}}}, "not a list"),
    ],
)
def test_malformed_responses_raise_a_clear_source_error(body, why):
    with pytest.raises(SourceError, match=why):
        parse_matrix(body, "q", 0.0, 15.0, 5)


def test_bad_samples_are_skipped_and_nan_is_kept():
    body = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"node": "n", "gpu": "0"}, "values": [[0, "1"], [15, "NaN"], ["x", "2"], [30], [45, "+Inf"]]},
        {"metric": "not a dict", "values": []},
    ]}}  # fmt: skip
    (s,) = parse_matrix(body, "q", 0.0, 15.0, 5)
    assert s.index.tolist() == [0, 1] and s.values[0] == 1.0 and np.isnan(s.values[1])


def test_a_failing_server_is_an_error_not_an_empty_window():
    class Down:
        async def get_json(self, url, params):
            raise SourceError("connection refused")

    with pytest.raises(SourceError):
        asyncio.run(PrometheusSource("http://x", http=Down()).read(1000.0))
