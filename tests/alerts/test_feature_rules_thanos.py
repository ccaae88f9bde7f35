"""The feature rule files on Thanos' ruler (issue 33: "the same generated files run unchanged on
... Mimir's or Thanos' rulers"). A real Thanos ruler, built by tests/lab/servers.sh from its Go
module, loads the default (``--engine prometheus``) files as they are written, query_offset
and all, evaluates them through the Prometheus query API of a real Prometheus 3.5 that scrapes
stand-in exporters through the generated relabel, and remote-writes what it records back into
that Prometheus (the ruler's stateless mode). The health group (Prometheus' variant) then
watches the ruler's own metrics, as a site would load it."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from analyzer.sources.features import FEATURES, SHARD_LABEL, shard_of
from exporter import catalog as c
from tests.alerts.featurefleet import NODES, bodies
from tests.alerts.ruleset import generator
from tests.realcomp import (
    Prometheus,
    daemon,
    free_port,
    http_get,
    run_prometheus,
    serve_expositions,
    thanos_binary,
    wait_until,
)

pytestmark = pytest.mark.real

GEN = generator("generate_feature_rules")
Key = tuple[tuple[str, str], ...]


@contextlib.contextmanager
def _ruler(tmp_path: Path, rules: Path, prom: str, http: int | None = None) -> Iterator[str]:
    """``thanos rule`` over ``rules/*.rules.yml``, querying ``prom`` and remote-writing what
    it records into it (no TSDB of its own), on ``http`` (default: a free port) until the block
    ends; yields its HTTP address."""
    http, grpc = http or free_port(), free_port()
    rw = {"remote_write": [{"url": f"{prom}/api/v1/write", "name": "prometheus",
                            "queue_config": {"batch_send_deadline": "1s"}}]}  # fmt: skip
    argv = [thanos_binary(), "rule", f"--data-dir={tmp_path / 'ruler'}",
            f"--rule-file={rules}/*.rules.yml", f"--query={prom}", "--eval-interval=1s",
            f"--http-address=127.0.0.1:{http}", f"--grpc-address=127.0.0.1:{grpc}",
            f"--remote-write.config={yaml.safe_dump(rw)}", '--label=ruler="test"',
            "--log.level=warn"]  # fmt: skip
    url = f"http://127.0.0.1:{http}"
    with daemon(argv, f"{url}/-/ready", tmp_path / "ruler.log"):
        yield url


def _query(prom: Prometheus, expr: str) -> dict[Key, float]:
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")):
            float(r["value"][1]) for r in prom.query(expr)}  # fmt: skip


def _scrape_config(port: int, relabel: list[dict[str, object]], extra: list[str]) -> str:
    jobs = [{
        "job_name": "gpuwarden-exporter", "scrape_interval": "1s", "honor_labels": True,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                            "labels": {"node": n, "__metrics_path__": f"/{n}"}} for n in NODES],
        "relabel_configs": relabel,
    }]  # fmt: skip
    for target in extra:
        jobs.append({"job_name": "thanos-rule", "scrape_interval": "1s",
                     "static_configs": [{"targets": [target]}]})  # fmt: skip
    return yaml.safe_dump({"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                           "scrape_configs": jobs, "rule_files": ["health.rules.yml"]})  # fmt: skip


def test_thanos_ruler_records_every_feature_of_the_unchanged_files_equal_to_prometheus_own_evaluation(
    tmp_path: Path,
) -> None:
    """The 2-shard files of the default engine (query_offset 1 s, one scrape interval),
    byte for byte as generated: the ruler records each feature of the four nodes, in both
    shards, and every value equals Prometheus evaluating the rule's expression itself (the
    series are constant); each node's series carry the one shard the relabel gave it."""
    plan = GEN.Plan(shards=2, interval=2.0, scrape_interval=1.0, offset=1.0)
    files = GEN.render_all(plan)
    rules = tmp_path / "rules"
    rules.mkdir()
    for name, text in files.items():
        if name.endswith(("shard-0.rules.yml", "shard-1.rules.yml", "jobstats.rules.yml")):
            (rules / name).write_text(text)
            assert "query_offset: 1s" in text  # the field Thanos must take as Prometheus does
    assert {shard_of(n, 2) for n in NODES} == {0, 1}
    relabel = yaml.safe_load(files["scrape-relabel.yml"])["relabel_configs"]
    with (
        serve_expositions(bodies()) as port,
        run_prometheus(
            _scrape_config(port, relabel, []),
            {"health.rules.yml": "groups: []\n"},
            flags=("--web.enable-remote-write-receiver",),
        ) as prom,
    ):
        prom.wait_for(f"count({c.GPU_UP.name}) == 8", 60)
        with _ruler(tmp_path, rules, prom.url) as ruler:
            served = {c.GPU_SM_CLOCK, c.GPU_TEMPERATURE, c.GPU_POWER, c.GPU_UTILIZATION,
                      c.GPU_UP}  # fmt: skip
            want = [f for f in FEATURES if f.metric in served]
            assert len(want) >= 8
            wait_until(lambda: all(_query(prom, f"last_over_time({f.record}[1m])") for f in want),
                       120, 1.0, "the ruler's recorded features")  # fmt: skip
            body = json.loads(http_get(f"{ruler}/api/v1/rules"))
            groups = {g["name"] for g in body["data"]["groups"]}
        for f in want:
            got = _query(prom, f"last_over_time({f.record}[1m])")
            direct: dict[Key, float] = {}
            for shard in range(2):
                direct |= _query(prom, f.expr(shard))
            # the ruler adds its external labels to what it writes; the rest must be equal
            got = {tuple(kv for kv in k if kv[0] != "ruler"): v for k, v in got.items()}
            assert set(got) == set(direct), f.record
            for k, v in got.items():
                assert v == pytest.approx(direct[k], rel=1e-9, abs=1e-9), (f.record, k)
        up = _query(prom, c.GPU_UP.name)
    assert {"gpuwarden-features-shard-0", "gpuwarden-features-shard-1"} <= groups
    assert any(g.startswith("gpuwarden-jobstats-") for g in groups)
    shards = {(dict(k)["node"], dict(k)[SHARD_LABEL]) for k in up}
    assert shards == {(n, str(shard_of(n, 2))) for n in NODES}


def test_the_health_alerts_fire_on_the_thanos_rulers_own_metrics_for_its_failing_feature_group_alone(
    tmp_path: Path,
) -> None:
    """Prometheus scrapes the ruler's /metrics and evaluates the generated health group
    (Prometheus' variant, as a site loads it): a feature group whose recording rule fails on
    every evaluation (two series of one labelset) fires GpuwardenFeatureRulesFailing naming
    that group; the healthy feature group fires nothing; the series the slow and missed alerts
    read exist for both groups, under the ruler's own ``rule_group`` label."""
    rules = tmp_path / "rules"
    rules.mkdir()
    bad, good = "gpuwarden-features-shard-0", "gpuwarden-features-shard-1"
    a = 'label_replace(vector(N), "node", "a", "", "")'
    dup = f'{a.replace("N", "1")} or label_replace({a.replace("N", "2")}, "x", "y", "", "")'
    exprs = {bad: f'label_replace({dup}, "x", "", "", "")',  # drops x: two of {node="a"}
             good: a.replace("N", "1")}  # fmt: skip
    for name, expr in exprs.items():
        (rules / f"{name}.rules.yml").write_text(yaml.safe_dump({"groups": [{
            "name": name, "interval": "1s", "query_offset": "1s",
            "rules": [{"record": f"gpuwarden_node:probe_{name[-1]}", "expr": expr}]}]}))  # fmt: skip
    health = GEN.render_all(GEN.Plan())["rule-health.rules.yml"]
    # the ruler on a port fixed before either starts, which Prometheus scrapes
    ruler_http = free_port()
    config = _scrape_config(free_port(), [], [f"127.0.0.1:{ruler_http}"])
    flags = ("--web.enable-remote-write-receiver",)
    with (
        run_prometheus(config, {"health.rules.yml": health}, flags=flags) as prom,
        _ruler(tmp_path, rules, prom.url, ruler_http),
    ):

        def firing() -> dict[str, set[str]]:
            out: dict[str, set[str]] = {}
            for a in prom.query('ALERTS{alertstate="firing"}'):
                out.setdefault(a["metric"]["alertname"], set()).add(
                    a["metric"].get("rule_group", "")
                )
            return out

        wait_until(lambda: firing().get("GpuwardenFeatureRulesFailing"), 120, 1.0,
                   "GpuwardenFeatureRulesFailing")  # fmt: skip
        probe = "last_over_time(gpuwarden_node:probe_1[1m])"  # the healthy group records
        wait_until(lambda: _query(prom, probe), 60, 0.5, "the healthy group's recording")
        time.sleep(3)
        got = firing()
        dur = _query(prom, "prometheus_rule_group_last_duration_seconds")
        missed = _query(prom, "prometheus_rule_group_iterations_missed_total")
        interval = _query(prom, "prometheus_rule_group_interval_seconds")
    assert set(got) == {"GpuwardenFeatureRulesFailing"}
    [failing] = got["GpuwardenFeatureRulesFailing"]
    assert failing.endswith(f";{bad}")
    for series in (dur, missed, interval):
        named = {dict(k)["rule_group"].rpartition(";")[2] for k in series}
        assert {bad, good} <= named
    assert all(v == 0 for v in missed.values())
