"""The Prometheus source: a real Prometheus with backfilled history, recorded query_range
responses (fixtures/prometheus/), and malformed responses."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import json
import os
import re
import time
from pathlib import Path

import numpy as np
import pytest

from analyzer.cli import main as cli_main
from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.service import AnalyzerService
from analyzer.sources import SourceError
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.promhttp import decode
from exporter import catalog as c
from tests.realcomp import promtool, run_prometheus

from . import promdata
from .promdata import NODES, STEP, openmetrics

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "prometheus"
RECORDED_END = 1_700_000_000.0 - (1_700_000_000.0 % STEP)


def _fixture(form) -> str:
    """A file name for one request: the metric it reads and a hash of the whole form."""
    q = form["query"]
    name = re.search(r"gpuwarden_\w+", q)
    digest = hashlib.sha1(repr(sorted(form.items())).encode()).hexdigest()[:8]
    return f"{name.group(0) if name else 'query'}-{digest}"


class Recording:
    """Wraps an HTTP client and keeps each response by request, for ``UPDATE_GOLDEN=1``."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.bodies: dict[str, bytes] = {}

    async def post(self, path, form):
        body = await self.inner.post(path, form)
        self.bodies[_fixture(form)] = body
        return body

    async def close(self):
        await self.inner.close()


class Replay:
    def __init__(self, bodies) -> None:
        self.bodies = bodies

    async def post(self, path, form):
        if _fixture(form) not in self.bodies and "gpuwarden_feature:" in form["query"]:
            # recorded before the feature rules (alerts/features/): that Prometheus had none,
            # and answered a feature read with an empty vector
            return b'{"status":"success","data":{"resultType":"vector","result":[]}}'
        return self.bodies[_fixture(form)]


def _expected(findings):
    return {(f.node, f.subject, f.kind) for f in findings}


WANT = {
    ("node-01", "gpu=3", "xid_fatal"),
    ("node-00", "port=mlx5_2/1", "ib_port_down"),
    ("node-02", "link=gpu5/1", "nvlink_errors"),  # read through the per-GPU sums
    ("node-01", "link=gpu2/1", "nvlink_down"),  # node-01 serves no sums: read link by link
    ("node-02", "port=mlx5_4/1", "ib_errors"),  # through the per-port sum
    ("node-01", "port=mlx5_5/1", "ib_errors"),  # counter by counter
}


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
                return await source.read(end + 5)
            finally:
                await source.close()

        w = asyncio.run(read())
    assert w.nodes == NODES and w.jobs == {"777": (0, 1, 2)}
    assert w.sku == ("h100-sxm",) * 3  # the model, from gpu_info's name
    assert len(w.t) == 41 and w.t[-1] == end
    assert [(e.node, e.gpu, e.xid) for e in w.xids] == [(1, 3, 79)]
    util = w.get(c.GPU_UTILIZATION)
    assert util is not None and util.shape == (41, 3, 8) and np.all(util == 0.8)
    assert _expected(Engine(default_detectors()).cycle(w)) == WANT
    if os.environ.get("UPDATE_GOLDEN"):
        FIXTURES.mkdir(parents=True, exist_ok=True)
        for old in FIXTURES.glob("*.json"):
            old.unlink()
        for q, body in rec.bodies.items():
            (FIXTURES / f"{q}.json").write_text(json.dumps(json.loads(body), indent=1) + "\n")


@pytest.mark.real
def test_incremental_reads_of_a_real_prometheus_equal_a_cold_full_window_read(tmp_path):
    end = (time.time() // STEP) * STEP - 7200
    om = tmp_path / "data.om"
    om.write_text(openmetrics(end))
    data = tmp_path / "data"
    assert promtool("tsdb", "create-blocks-from", "openmetrics", str(om), str(data)).returncode == 0
    data.chmod(0o777)
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data) as p:

        async def reads():
            inc = PrometheusSource(p.url, window=600, step=STEP)
            cold = PrometheusSource(p.url, window=600, step=STEP)
            try:
                for back in (12, 7, 6, 2, 0):
                    w = await inc.read(end - back * STEP + 6)
                return w, await cold.read(end + 6), inc.stats, cold.stats
            finally:
                await inc.close()
                await cold.close()

        w_inc, w_cold, s_inc, s_cold = asyncio.run(reads())
    assert w_inc.nodes == w_cold.nodes == NODES
    for k in w_cold.metrics:
        assert np.array_equal(w_inc.metrics[k], w_cold.metrics[k], equal_nan=True), k
    assert [(e.t, e.node, e.gpu, e.xid) for e in w_inc.xids] == [
        (e.t, e.node, e.gpu, e.xid) for e in w_cold.xids
    ] and len(w_cold.xids) == 1
    assert w_inc.jobs == w_cold.jobs
    assert s_inc.cycle_bytes < s_cold.cycle_bytes / 2  # the last incremental read was small


def test_recorded_query_range_responses_give_the_same_findings():
    bodies = {p.stem: p.read_bytes() for p in FIXTURES.glob("*.json")}
    assert len(bodies) >= 8
    source = PrometheusSource("http://recorded", window=600, step=STEP, http=Replay(bodies))
    w = asyncio.run(source.read(RECORDED_END + 5))
    assert w.nodes == NODES and w.sku == ("h100-sxm",) * 3
    assert _expected(Engine(default_detectors()).cycle(w)) == WANT


@pytest.mark.parametrize(
    "body, why",
    [
        (b"[", "not JSON"),
        (b"[]", "not a JSON object"),
        (b'{"status": "error", "error": "bad query"}', "bad query"),
        (b'{"status": "success", "data": {"resultType": "scalar", "result": []}}', "matrix"),
        (b'{"status": "success", "data": {"resultType": "matrix", "result": {}}}', "not a list"),
    ],
)
def test_malformed_responses_raise_a_clear_source_error(body, why):
    with pytest.raises(SourceError, match=why):
        decode(body, "q")


@pytest.mark.parametrize("typed", [True, False])
def test_a_long_server_error_keeps_its_reason_and_cuts_the_quoted_query(typed):
    """VictoriaMetrics quotes a refused query whole before the reason."""
    query = 'max by (node) (m{node=~"' + "|".join(f"gpu-node-{i:05d}" for i in range(2000)) + '"})'
    error = (
        f"error when executing query={query!r}: too long query; mustn't exceed -search.maxQueryLen"
    )
    body = {"status": "error", "errorType": "422", "error": error}
    if not typed:  # the generic decoder's path: a body the typed one refuses
        body["data"] = []
    with pytest.raises(SourceError) as e:
        decode(json.dumps(body).encode(), "q")
    text = str(e.value)
    assert text.startswith("q: status 'error': error when executing query=")
    assert text.endswith("mustn't exceed -search.maxQueryLen") and len(text) < 700
    assert f"...[{len(error) - 560} characters]..." in text
    short = {"status": "error", "error": "bad query " * 50}  # 500 characters: whole
    with pytest.raises(SourceError, match=r"(bad query ){50}$"):
        decode(json.dumps(short).encode(), "q")


def test_bad_samples_are_skipped_and_nan_is_kept():
    body = {"status": "success", "data": {"resultType": "matrix", "result": [
        {"metric": {"node": "n", "gpu": "0"}, "values": [[0, "1"], [15, "NaN"], ["x", "2"], [30], [45, "+Inf"]]},
        {"metric": "not a dict", "values": []},
    ]}}  # fmt: skip
    got = decode(json.dumps(body).encode(), "q")
    assert len(got.labels) == 1 and got.counts.tolist() == [2]
    assert got.times.tolist() == [0, 15] and got.values[0] == 1.0
    assert np.isnan(got.values[1])


@pytest.mark.parametrize("typed", [True, False])
def test_a_victoriametrics_partial_answer_is_kept_and_read_as_a_warning(typed):
    """vmselect of a VictoriaMetrics cluster answers ``success`` without the vmstorage nodes it
    could not reach, and says so only in ``isPartial`` (its Prometheus API's extra field, as
    vmalert's datasource reads it): counted like Thanos' warnings, the series kept."""
    from analyzer.sources.promhttp import PARTIAL

    series = [{"metric": {"node": "n"}, "values": [[0, "1"], [15, "2"]]}]
    for partial, warnings, want in ((True, [], [PARTIAL]), (False, [], []),
                                    (True, ["w"], ["w", PARTIAL]), (None, ["w"], ["w"])):  # fmt: skip
        body = {"status": "success", "data": {"resultType": "matrix", "result": series}}
        if partial is not None:
            body["isPartial"] = partial
        if warnings:
            body["warnings"] = warnings
        if not typed:  # a pair the typed decoder refuses sends the body the generic way
            body["data"]["result"] = [*series, {"metric": {"node": "m"}, "values": [["x"]]}]
        got = decode(json.dumps(body).encode(), "q")
        assert got.warnings == want, (partial, warnings)
        assert got.counts.tolist()[0] == 2 and got.values[:2].tolist() == [1.0, 2.0]


@pytest.fixture(scope="module")
def backfilled(tmp_path_factory):
    """A real Prometheus serving promdata's history, ending two hours ago."""
    yield from promdata.backfilled(tmp_path_factory.mktemp("prom"))


def _cli_findings(text):
    return {(f["node"], f["subject"], f["kind"]) for f in json.loads(text)["findings"]}


@pytest.mark.real
def test_at_reproduces_the_findings_a_cycle_made_at_that_moment(backfilled, capsys):
    prom, end = backfilled
    service = AnalyzerService(PrometheusSource(prom.url), Engine(default_detectors()), 15.0)

    async def live():
        await service.run_cycle(end + 6)
        await service.source.close()

    asyncio.run(live())
    assert _expected(service.engine.findings) == WANT
    iso = datetime.datetime.fromtimestamp(end + 6, tz=datetime.UTC).isoformat()
    assert cli_main(["--prometheus", prom.url, "--at", iso]) == 0
    assert _cli_findings(capsys.readouterr().out) == WANT


@pytest.mark.real
def test_replay_prints_one_line_per_cycle_and_the_fault_appears_when_it_happened(
    backfilled, capsys
):
    prom, end = backfilled
    args = [
        "--prometheus",
        prom.url,
        "--replay",
        str(end - 8 * STEP + 6),
        str(end + 6),
        "--step",
        "30",
    ]
    assert cli_main(args) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["generated_at"] for x in lines] == [end - 8 * STEP + 6 + 30 * i for i in range(5)]
    kinds = [{f["kind"] for f in x["findings"]} for x in lines]
    assert "ib_port_down" not in kinds[0] and "ib_port_down" in kinds[-1]  # down at the last 3
    assert all("xid_fatal" in k for k in kinds)  # XID 79 logged 10 steps before the end


def test_time_travel_needs_prometheus_and_a_sane_range(capsys, tmp_path):
    sd = tmp_path / "sd.json"
    sd.write_text("[]")
    assert cli_main(["--targets", str(sd), "--at", "1700000000"]) == 2
    assert "need --prometheus" in capsys.readouterr().err
    assert cli_main(["--prometheus", "http://p:9090", "--replay", "20", "10"]) == 2
    assert "before FROM" in capsys.readouterr().err


@pytest.mark.real
def test_answers_come_uncompressed_unless_gzip_is_asked_for(backfilled):
    from analyzer.sources.promhttp import AiohttpProm

    prom, end = backfilled

    async def encoding(gzip: bool) -> str:
        import aiohttp

        http = AiohttpProm(prom.url, 10.0, gzip)
        async with (
            aiohttp.ClientSession() as s,
            s.post(f"{prom.url}/api/v1/query", data={"query": "up"}, headers=http.headers) as r,
        ):
            return r.headers.get("Content-Encoding", "identity")

    assert asyncio.run(encoding(False)) == "identity"
    assert asyncio.run(encoding(True)) == "gzip"
    src = PrometheusSource(prom.url, gzip=True)  # and the source still reads through it

    async def read():
        try:
            return await src.read(end + 6)
        finally:
            await src.close()

    assert asyncio.run(read()).nodes == NODES
