"""Engine isolation, outputs (/metrics, /findings, Alertmanager), the HTTP service, the
embedded scrape source, and the CLI."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client.parser import text_string_to_metric_families

from analyzer.cli import main as cli_main
from analyzer.detectors.memory import MemoryDetector
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.output import alertmanager_alerts, render_metrics
from analyzer.service import AnalyzerService
from analyzer.sources.scrape import ScrapeSource, Target, load_targets, parse_exposition
from exporter import catalog as c
from tests.realcomp import free_port, promtool, run_alertmanager, wait_until

from .synth import healthy, window


class Boom:
    name = "boom"

    def detect(self, w):
        raise RuntimeError("detector bug")


class Fixed:
    name = "fixed"

    def __init__(self, findings):
        self.findings = findings

    def detect(self, w):
        return list(self.findings)


F = Finding(
    "node-01", "gpu=3", "xid_fatal", "critical", "drain", "fixed", 1.0, 100.0, {"xid": 79.0}
)


def test_a_raising_detector_is_counted_and_the_cycle_goes_on():
    eng = Engine([Boom(), Fixed([F])])
    out = eng.cycle(window(healthy(nodes=2, T=3)))
    assert out == [F] and eng.stats.errors["boom"] == 1 and eng.stats.cycles == 1


def test_finding_since_is_kept_across_cycles():
    later = Finding(**{**F.__dict__, "since": 500.0})
    eng = Engine([Fixed([F])])
    eng.cycle(window(healthy(nodes=2, T=3)))
    eng.detectors = [Fixed([later])]
    assert eng.cycle(window(healthy(nodes=2, T=3)))[0].since == 100.0


def test_workload_imbalance_can_never_recommend_a_drain():
    with pytest.raises(ValueError):
        Finding("n", "job=1", "workload_imbalance", "info", "drain", "x", 1.0, 0.0)


def test_metrics_render_findings_and_self_metrics():
    eng = Engine([Fixed([F])])
    eng.cycle(window(healthy(nodes=2, T=3)))
    text = render_metrics(eng.findings, eng.stats, {"prometheus": 2})
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    finding = {"node": "node-01", "subject": "gpu=3", "kind": "xid_fatal",
               "severity": "critical", "action": "drain", "detector": "fixed"}  # fmt: skip
    assert samples[(c.FINDING.name, tuple(sorted(finding.items())))] == 1.0
    assert samples[(c.ANALYZER_SOURCE_ERRORS.name, (("source", "prometheus"),))] == 2.0
    assert samples[(c.ANALYZER_CYCLES.name, ())] == 1.0
    assert samples[(c.ANALYZER_WINDOW_NODES.name, ())] == 2.0
    eng.cycle(window(healthy(nodes=5, T=3)))  # the last cycle's window, not a sum
    again = render_metrics(eng.findings, eng.stats, {})
    assert f"{c.ANALYZER_WINDOW_NODES.name} 5.0" in again.splitlines()
    assert f"# TYPE {c.ANALYZER_CYCLES.name} counter" in text.splitlines()
    lint = promtool("check", "metrics", stdin=text.encode())
    assert lint.returncode == 0 and not lint.stdout.strip(), lint.stdout.decode()


def test_alertmanager_alerts_carry_identity_labels_and_end_unless_resent():
    (a,) = alertmanager_alerts([F], now=1000.0, resolve_after=45.0)
    assert a["labels"]["gpu"] == "3" and a["labels"]["xid"] == "79"
    assert a["labels"]["fault_class"] == "xid_fatal" and a["labels"]["action"] == "drain"
    assert a["endsAt"] == "1970-01-01T00:17:25Z"


@pytest.fixture
async def client_for():
    made = []

    async def make(app: web.Application) -> TestClient:
        client = TestClient(TestServer(app, host="127.0.0.1"))
        await client.start_server()
        made.append(client)
        return client

    yield make
    for client in made:
        await client.close()


class Src:
    name = "fake"

    def __init__(self, fail=False):
        self.fail = fail

    async def read(self, now):
        if self.fail:
            raise RuntimeError("prometheus down")
        d = healthy(nodes=2, T=5)
        d["metrics"][c.GPU_ROW_REMAP_FAILED.name][-1, 1, 2] = 1
        return window(d)


async def test_service_serves_findings_metrics_and_health(client_for):
    svc = AnalyzerService(Src(), Engine([MemoryDetector()]), interval=15, clock=lambda: 1000.0)
    client = await client_for(_no_loop(svc))
    assert (await client.get("/healthz")).status == 503
    await svc.run_cycle()
    assert (await client.get("/healthz")).status == 200
    body = await (await client.get("/findings")).json()
    assert [(f["node"], f["subject"], f["kind"]) for f in body["findings"]] == [
        ("node-01", "gpu=2", "row_remap_failed")
    ]
    text = await (await client.get("/metrics")).text()
    assert 'kind="row_remap_failed"' in text


async def test_a_failing_source_is_counted_and_health_says_why(client_for):
    now = [1000.0]
    svc = AnalyzerService(Src(fail=True), Engine([]), interval=15, clock=lambda: now[0])
    client = await client_for(_no_loop(svc))
    await svc.run_cycle()
    assert svc.source_errors["fake"] == 1
    r = await client.get("/healthz")
    assert r.status == 503 and "prometheus down" in await r.text()


def _no_loop(svc: AnalyzerService) -> web.Application:
    app = svc.app()
    app.cleanup_ctx.clear()
    return app


@pytest.mark.real
async def test_findings_are_pushed_to_a_real_alertmanager():
    cfg = "route: {receiver: blackhole}\nreceivers: [{name: blackhole}]\n"
    with run_alertmanager(cfg) as am:
        svc = AnalyzerService(Src(), Engine([MemoryDetector()]), 15, am.url)
        await svc.run_cycle()
        await svc._session.close()  # type: ignore[union-attr]

        def alerts():
            import urllib.request

            with urllib.request.urlopen(f"{am.url}/api/v2/alerts", timeout=2) as r:
                return json.loads(r.read())

        got = await asyncio.to_thread(wait_until, alerts, 10, 0.1, "alert in alertmanager")
        assert (
            got[0]["labels"]["kind"] == "row_remap_failed" and got[0]["labels"]["node"] == "node-01"
        )


def _exposition(node: str, up: float) -> str:
    return "\n".join([
        f"# TYPE {c.GPU_UP.name} gauge",
        f'{c.GPU_UP.name}{{node="{node}",gpu="0",uuid="u0",reason=""}} {up}',
        f"# TYPE {c.GPU_UTILIZATION.name} gauge",
        f'{c.GPU_UTILIZATION.name}{{node="{node}",gpu="0",uuid="u0"}} 0.5',
        f"# TYPE {c.GPU_TEMPERATURE.name} gauge",
        f'{c.GPU_TEMPERATURE.name}{{gpu="0",uuid="u0"}} 40',
        "# TYPE other_metric gauge",
        "other_metric 1",
    ]) + "\n"  # fmt: skip


def test_exposition_keeps_queried_metrics_and_fills_the_node_from_the_target():
    got = parse_exposition(_exposition("n1", 1), {"node": "fromtarget", "__metrics_path__": "/x"})
    names = {k[0] for k in got}
    assert names == {c.GPU_UP.name, c.GPU_UTILIZATION.name, c.GPU_TEMPERATURE.name}
    temp = next(k for k in got if k[0] == c.GPU_TEMPERATURE.name)
    assert dict(temp[1])["node"] == "fromtarget"


class Fetch:
    def __init__(self):
        self.up = 1.0

    async def fetch(self, url):
        if "broken" in url:
            raise OSError("connection refused")
        return _exposition(url.rsplit("/", 2)[-2], self.up)


def test_embedded_scrape_builds_a_window_and_a_dead_target_costs_an_error():
    fetch = Fetch()
    targets = [Target("http://sim/nodes/n1/metrics", {"node": "n1"}),
               Target("http://sim/nodes/broken/metrics", {"node": "broken"})]  # fmt: skip
    src = ScrapeSource(targets, window=60, step=15, fetcher=fetch)
    for i in range(3):
        fetch.up = 0.0 if i == 2 else 1.0
        w = asyncio.run(src.read(1000.0 + 15 * i))
    assert w.nodes == ("n1",) and len(w.t) == 3 and src.errors == 3
    up = w.get(c.GPU_UP)
    assert up is not None and up[:, 0, 0].tolist() == [1.0, 1.0, 0.0]
    assert np.isnan(w.get(c.GPU_UTILIZATION)[0, 0, 1])  # type: ignore[index]


def test_file_sd_targets_are_read_with_metrics_path_and_labels(tmp_path):
    p = tmp_path / "sd.json"
    p.write_text(
        json.dumps(
            [
                {
                    "targets": ["127.0.0.1:9"],
                    "labels": {"__metrics_path__": "/nodes/a/metrics", "node": "a"},
                }
            ]
        )
    )
    (t,) = load_targets(p)
    assert t.url == "http://127.0.0.1:9/nodes/a/metrics" and t.labels == {"node": "a"}


def test_cli_rejects_bad_settings_with_one_line(capsys):
    assert cli_main(["--interval", "0", "--targets", "x"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "interval" in err
    assert cli_main(["--listen", "nope", "--prometheus", "http://x"]) == 2
    assert cli_main([]) == 2


def test_cli_once_scrapes_targets_and_prints_findings(tmp_path, capsys):
    port = free_port()

    async def serve():
        async def metrics(_):
            return web.Response(text=_exposition("n1", 0.0))

        app = web.Application()
        app.router.add_get("/nodes/n1/metrics", metrics)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        return runner

    sd = tmp_path / "sd.json"
    sd.write_text(
        json.dumps(
            [
                {
                    "targets": [f"127.0.0.1:{port}"],
                    "labels": {"__metrics_path__": "/nodes/n1/metrics", "node": "n1"},
                }
            ]
        )
    )

    async def go():
        runner = await serve()
        try:
            return await asyncio.to_thread(cli_main, ["--targets", str(sd), "--once"])
        finally:
            await runner.cleanup()

    assert asyncio.run(go()) == 0
    out = json.loads(capsys.readouterr().out)
    assert [(f["node"], f["kind"]) for f in out["findings"]] == [("n1", "gpu_lost")]


@pytest.mark.real
async def test_two_active_replicas_make_one_alert_with_one_start_in_alertmanager():
    """HA: two analyzer replicas on the same data post the same alerts (same labels, same
    startsAt: the fingerprint + startsAt idempotency key remediation keys on); Alertmanager
    keeps one alert per finding."""
    cfg = "route: {receiver: blackhole}\nreceivers: [{name: blackhole}]\n"
    with run_alertmanager(cfg) as am:
        replicas = [AnalyzerService(Src(), Engine([MemoryDetector()]), 15, am.url) for _ in "ab"]
        bodies = []
        for svc in replicas:  # one after the other: the replicas' cycles are not in step
            await svc.run_cycle()
            bodies.append(alertmanager_alerts(svc.engine.findings, 0.0, 45.0))
            await svc._session.close()  # type: ignore[union-attr]
        assert bodies[0] == bodies[1] and bodies[0]

        def alerts():
            import urllib.request

            with urllib.request.urlopen(f"{am.url}/api/v2/alerts", timeout=2) as r:
                return json.loads(r.read())

        got = await asyncio.to_thread(wait_until, alerts, 10, 0.1, "alert in alertmanager")
        assert len(got) == len(bodies[0])
        assert {a["startsAt"][:19] for a in got} == {b["startsAt"][:19] for b in bodies[0]}
