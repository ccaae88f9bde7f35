"""The feature recording rules (alerts/features/, issue 33): generated, never stale, accepted by
the real rule engines (promtool 3.5 and 2.42, vmalert), and each feature equal, on a small
simulated fleet, to what the analyzer's own numpy computes from the raw samples."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import urllib.parse
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from analyzer.detectors.series import robust_z, total_increase
from analyzer.sources.features import FEATURES, SHARD_LABEL, shard_of
from exporter import catalog as c
from tests.alerts import featurefleet
from tests.alerts.ruleset import ALERTS, generator
from tests.realcomp import (
    VM_GENERATIONS,
    daemon,
    free_port,
    generation_source,
    http_get,
    run_prometheus,
    serve_expositions,
    unavailable,
    vm_binary,
    wait_until,
)

pytestmark = pytest.mark.real


GEN = generator("generate_feature_rules")
COMMITTED = ALERTS / "features"


def promtool_of(generation: str) -> str:
    path = generation_source(generation) / "promtool"
    if not os.access(path, os.X_OK):
        unavailable(f"promtool of the {generation} generation not at {path}")
    return str(path)


def run(*argv: str) -> tuple[int, str]:
    r = subprocess.run(argv, capture_output=True, timeout=300, check=False)
    return r.returncode, r.stdout.decode() + r.stderr.decode()


def rendered(tmp_path: Path, **plan: Any) -> Path:
    out = tmp_path / "features"
    for name, text in GEN.render_all(GEN.Plan(**plan)).items():
        out.mkdir(exist_ok=True)
        (out / name).write_text(text)
    return out


def groups(path: Path) -> list[dict[str, Any]]:
    return list(yaml.safe_load(path.read_text())["groups"])


# ------------------------------------------------------------------ generation


def test_the_committed_feature_rules_are_what_the_generator_writes() -> None:
    assert GEN.main(["--check"]) == 0
    assert sorted(p.name for p in COMMITTED.glob("*.yml")) == sorted(GEN.render_all(GEN.Plan()))


def test_a_hand_edited_or_leftover_feature_file_fails_the_check(tmp_path: Path) -> None:
    out = rendered(tmp_path)
    assert GEN.main(["--check", "--output", str(out)]) == 0
    node0 = out / "node-shard-0.rules.yml"
    node0.write_text(node0.read_text().replace("[3m]", "[5m]"))
    assert GEN.main(["--check", "--output", str(out)]) == 1
    GEN.main(["--output", str(out)])
    (out / "node-shard-9.rules.yml").write_text("groups: []\n")
    assert GEN.main(["--check", "--output", str(out)]) == 1


def test_an_offset_shorter_than_a_scrape_interval_is_refused(capsys: Any) -> None:
    assert GEN.main(["--offset", "10", "--scrape-interval", "15", "--output", "/nonexistent"]) == 2
    assert "shorter than one scrape interval" in capsys.readouterr().err
    with pytest.raises(ValueError, match="at least 1"):
        GEN.Plan(shards=0)


@pytest.mark.parametrize("shards", [1, 4, 16])
def test_there_is_one_node_group_and_one_domain_group_per_shard(shards: int) -> None:
    """and one statistics group per z-scored signal, whatever the shard count."""
    files = GEN.render_all(GEN.Plan(shards=shards))
    names = [g["name"] for t in files.values() for g in (yaml.safe_load(t).get("groups") or [])]
    for i in range(shards):
        assert names.count(f"gpuwarden-features-shard-{i}") == 1
        assert names.count(f"gpuwarden-domains-shard-{i}") == 1
    z = [f for f in FEATURES if f.kind == "job_z"]  # and one statistics group per signal
    stats = [g for t in files.values() for g in (yaml.safe_load(t).get("groups") or [])
             if g["name"].startswith("gpuwarden-jobstats-")]  # fmt: skip
    assert len(stats) == len(z) and yaml.safe_load(files["jobstats.rules.yml"])["groups"] == stats
    assert sorted(r["record"] for g in stats for r in g["rules"]) == sorted(
        f.job_record(s) for f in z for s in ("median", "mad")
    )
    relabel = yaml.safe_load(files["scrape-relabel.yml"])["relabel_configs"]
    assert relabel == [{"source_labels": ["node"], "modulus": shards,
                        "target_label": SHARD_LABEL, "action": "hashmod"}]  # fmt: skip


def test_a_node_group_reads_only_its_own_shard_and_a_domain_group_scores_only_its_own() -> None:
    """A domain group reads its own shard's raw series and the recorded job statistics; the
    statistics groups read every shard's raw series and no recording."""
    for i in range(4):
        (node,) = groups(COMMITTED / f"node-shard-{i}.rules.yml")
        for rule in node["rules"]:
            shard_sels = rule["expr"].count(f'{SHARD_LABEL}="{i}"')
            assert shard_sels >= 1 and shard_sels == rule["expr"].count("{"), rule["record"]
        (domain,) = groups(COMMITTED / f"domain-shard-{i}.rules.yml")
        for rule in domain["rules"]:  # the scored GPUs and their jobs: this shard's only;
            shard_sels = rule["expr"].count(f'{SHARD_LABEL}="{i}"')  # the job's median: all
            assert shard_sels == 2 and shard_sels == rule["expr"].count("{"), rule["record"]
            assert "gpuwarden_job:" in rule["expr"] and ":median" in rule["expr"]
    for g in groups(COMMITTED / "jobstats.rules.yml"):  # the statistics: every shard's GPUs
        for rule in g["rules"]:
            assert SHARD_LABEL + "=" not in rule["expr"] and "gpuwarden_job:" not in rule["expr"]


def test_every_prometheus_group_evaluates_at_least_one_scrape_interval_late() -> None:
    plan = GEN.Plan()
    for path in _rule_files(COMMITTED):
        for g in groups(path):
            assert g["query_offset"] == "30s" and plan.offset >= plan.scrape_interval
            assert g["interval"] == "15s"


def test_the_vmalert_variant_differs_only_by_the_offset_field(tmp_path: Path) -> None:
    vm = rendered(tmp_path, engine="vmalert")
    for path in _rule_files(COMMITTED):
        prom = groups(path)
        for g in prom:
            del g["query_offset"]
        assert groups(vm / path.name) == prom


# ------------------------------------------------------------------ the real engines


def test_promtool_3_5_accepts_every_feature_rule_file() -> None:
    files = sorted(COMMITTED.glob("*.rules.yml"))
    rc, out = run(promtool_of("current"), "check", "rules", *map(str, files))
    assert rc == 0, out
    assert out.count("SUCCESS") == len(files)


def test_promtool_2_42_accepts_the_vmalert_variant_and_refuses_query_offset(
    tmp_path: Path,
) -> None:
    """Prometheus < 2.53 has no query_offset: such a site loads the variant without it."""
    vm = sorted(rendered(tmp_path, engine="vmalert").glob("*.rules.yml"))
    rc, out = run(promtool_of("stable"), "check", "rules", *map(str, vm))
    assert rc == 0, out
    rc, out = run(
        promtool_of("stable"), "check", "rules", str(COMMITTED / "node-shard-0.rules.yml")
    )
    assert rc != 0 and "query_offset" in out


@pytest.mark.parametrize("vm_generation", VM_GENERATIONS)
def test_vmalert_dry_run_loads_the_vmalert_variant_and_names_what_it_refuses(
    tmp_path: Path, vm_generation: str
) -> None:
    vmalert = vm_binary("vmalert", vm_generation)
    vm = rendered(tmp_path, engine="vmalert")
    rc, out = run(vmalert, "-dryRun", f"-rule={vm}/*.rules.yml")
    assert rc == 0 and "fatal" not in out, out
    rc, out = run(vmalert, "-dryRun", f"-rule={COMMITTED}/node-shard-0.rules.yml")
    assert rc != 0 and "query_offset" in out


def test_prometheus_hashmod_puts_each_node_on_the_shard_shard_of_computes(tmp_path: Path) -> None:
    nodes = [f"gpu-node-{i:03d}" for i in range(24)]
    relabel = yaml.safe_load(GEN.render_all(GEN.Plan(shards=4))["scrape-relabel.yml"])
    targets = [{"targets": [f"127.0.0.1:{20000 + i}"], "labels": {"node": n}}
               for i, n in enumerate(nodes)]  # fmt: skip
    config = {
        "global": {"scrape_interval": "1h"},
        "scrape_configs": [{
            "job_name": "gpuwarden-exporter",
            "file_sd_configs": [{"files": ["targets.json"]}],
            "relabel_configs": relabel["relabel_configs"],
        }],
    }  # fmt: skip
    with run_prometheus(yaml.safe_dump(config), {"targets.json": json.dumps(targets)}) as prom:
        body = json.loads(http_get(f"{prom.url}/api/v1/targets"))
        deadline = time.monotonic() + 30
        while len(body["data"]["activeTargets"]) < len(nodes) and time.monotonic() < deadline:
            time.sleep(0.25)
            body = json.loads(http_get(f"{prom.url}/api/v1/targets"))
    got = {
        t["labels"]["node"]: int(t["labels"][SHARD_LABEL]) for t in body["data"]["activeTargets"]
    }
    assert got == {n: shard_of(n, 4) for n in nodes}
    assert len(set(got.values())) == 4  # 24 nodes reach every shard


# ------------------------------------------------------------------ same numbers as the analyzer

STEP, T = 15, 41  # the analyzer's step and grid (a 600 s window)
NODES = [f"gpu-node-{i:02d}" for i in range(6)]
JOBS = {"job-a": NODES[:3], "job-b": NODES[3:]}
GPUS = ("0", "1")
LEMON = (NODES[2], "1")  # its SM clock 10 % behind its job's (a throttled GPU)
PEER_Z = 6.0  # the peer detector's threshold (PeerDetector.z)


def _fleet(seed: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray]:
    """Raw series (name, labels) -> T samples, as a 6-node, 2-job fleet would serve them."""
    rng = np.random.default_rng(seed)
    out: dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray] = {}
    job_of = {n: j for j, ns in JOBS.items() for n in ns}
    for n in NODES:
        for g in GPUS:
            lab = (("node", n), ("gpu", g), ("uuid", f"GPU-{n}-{g}"))
            # dyadic values (multiples of 2^-k): every sum is exact in any order, so Prometheus'
            # summation and numpy's round the mean identically and promtool compares exactly
            clock = np.round(rng.normal(1.98e9, 5e6, T), -3)
            out[(c.GPU_SM_CLOCK.name, lab)] = clock - 1.98e8 if (n, g) == LEMON else clock
            out[(c.GPU_TEMPERATURE.name, lab)] = np.round(rng.normal(65, 2, T) * 4) / 4
            out[(c.GPU_POWER.name, lab)] = np.round(rng.normal(600, 20, T) * 4) / 4
            out[(c.GPU_UTILIZATION.name, lab)] = np.round(rng.uniform(0.9, 1.0, T) * 1024) / 1024
            up = np.ones(T)
            if (n, g) == (NODES[4], "1"):
                up[-3:] = 0  # lost for the last 3 scrapes
            out[(c.GPU_UP.name, lab)] = up
            moving = (n, g) == (NODES[1], "0")
            ecc = 7 + (np.cumsum(rng.integers(0, 3, T)) if moving else np.zeros(T))
            out[(c.GPU_ECC_ERRORS.name, (*lab, ("error_type", "corrected"),
                                         ("counter_type", "volatile")))] = ecc  # fmt: skip
            out[(c.GPU_ALLOCATION_INFO.name, (("node", n), ("gpu", g), ("job_id", job_of[n]),
                                              ("scheduler", "slurm")))] = np.ones(T)  # fmt: skip
    return out


def _series(raw: dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray], shards: int
            ) -> list[dict[str, str]]:  # fmt: skip
    """promtool input_series, each carrying the shard label the scrape relabel gives it."""
    out = []
    for (name, lab), vals in sorted(raw.items()):
        labels = dict(lab) | {SHARD_LABEL: str(shard_of(dict(lab)["node"], shards))}
        sel = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        out.append({"series": f"{name}{{{sel}}}", "values": " ".join(repr(float(v)) for v in vals)})
    return out


def _job_z(x: np.ndarray, stats_of: np.ndarray, f: Any) -> tuple[np.ndarray, float, float]:
    """The robust z of ``x`` against the median and MAD of ``stats_of`` (the same samples,
    or the job's samples one step earlier: the statistics stage's lag), with f's floors."""
    med = float(np.median(stats_of))
    mad = float(np.median(np.abs(stats_of - med)))
    scale = max(1.4826 * mad, f.floor_abs, f.floor_rel * abs(med), 1e-9)
    return (x - med) / scale, med, mad


def _expected(raw: dict[tuple[str, tuple[tuple[str, str], ...]], np.ndarray], shards: int,
              lag: int = 0) -> dict[str, list[dict[str, Any]]]:  # fmt: skip
    """Per record, the samples the analyzer's numpy gives at the window's end; ``lag``: the
    job z-scores against the job statistics of that many steps earlier."""
    by_name: dict[str, dict[tuple[str, str], np.ndarray]] = {}
    for (name, lab), vals in raw.items():
        d = dict(lab)
        by_name.setdefault(name, {})[(d["node"], d.get("gpu", ""))] = vals
    exp: dict[str, list[dict[str, Any]]] = {}

    def add(record: str, labels: dict[str, str], value: float) -> None:
        if "node" in labels:
            labels = labels | {SHARD_LABEL: str(shard_of(labels["node"], shards))}
        exp.setdefault(record, []).append({"labels": labels, "value": value})

    for f in FEATURES:
        rows = by_name.get(f.metric.name)
        if rows is None:
            continue
        if f.kind == "mean":  # the straggler's mean of its last n=12 samples
            n = int(f.span // STEP)
            for (node, gpu), v in rows.items():
                add(f.record, {"node": node, "gpu": gpu}, float(np.mean(v[-n:])))
        elif f.kind == "increase":
            for (node, gpu), v in rows.items():
                inc = float(total_increase(v[:, None])[0])
                if inc > 0:
                    add(f.record, {"node": node, "gpu": gpu, "error_type": "corrected",
                                   "counter_type": "volatile"}, inc)  # fmt: skip
        elif f.kind == "moved":  # changes() over (t - 600 s, t]: the last 40 samples
            for (node, gpu), v in rows.items():
                n = int(np.count_nonzero(np.diff(v[-int(f.span // STEP) :])))
                if n:
                    add(f.record, {"node": node, "gpu": gpu, "error_type": "corrected",
                                   "counter_type": "volatile"}, float(n))  # fmt: skip
        elif f.kind == "present":
            for node in NODES:
                add(f.record, {"node": node}, float(len(GPUS)))
        elif f.kind == "lost":
            lost: dict[str, int] = {}
            for (node, _), v in rows.items():
                lost[node] = lost.get(node, 0) + int(v[-1] == 0)
            for node, k in lost.items():
                if k:
                    add(f.record, {"node": node}, float(k))
        else:  # job_z: the peer detector's robust z at the last step, floors per job
            for job, nodes in JOBS.items():
                keys = [(n, g) for n in nodes for g in GPUS]
                x = np.array([rows[k][-1] for k in keys])
                floor = max(f.floor_abs, f.floor_rel * abs(float(np.median(x))), 1e-9)
                z = robust_z(x[None, :], axis=1, floor=floor)[0]
                if lag:
                    z, _, _ = _job_z(x, np.array([rows[k][-1 - lag] for k in keys]), f)
                _, med, mad = _job_z(x, x, f)  # the statistics stage's records, now
                add(f.job_record("median"), {"job_id": job}, med)
                add(f.job_record("mad"), {"job_id": job}, mad)
                for (node, gpu), zi in zip(keys, z, strict=True):
                    add(f.record, {"node": node, "gpu": gpu, "job_id": job}, float(zi))
    return exp


def _promtool_test(rule_files: list[Path], raw: Any, shards: int, lag: int = 0
                   ) -> dict[str, Any]:  # fmt: skip
    """``lag`` 0: the statistics groups evaluated before the domain groups at each time (the
    z-scores exact); 1: after them, so each z-score reads the statistics of the step before."""
    exp = _expected(raw, shards, lag)
    assert {f.record for f in FEATURES if f.metric.name in {n for n, _ in raw}} <= set(exp)
    names = [g["name"] for p in rule_files for g in groups(p)]
    stats = [n for n in names if n.startswith("gpuwarden-jobstats-")]
    assert stats, "the statistics stage is among the files"
    others = [n for n in names if n not in stats]
    return {
        "rule_files": [str(p) for p in rule_files],
        "evaluation_interval": f"{STEP}s",
        "group_eval_order": others + stats if lag else stats + others,
        "tests": [{
            "interval": f"{STEP}s",
            "input_series": _series(raw, shards),
            "promql_expr_test": [
                {"expr": record, "eval_time": f"{(T - 1) * STEP}s",
                 "exp_samples": [{"labels": _labels(record, s["labels"]), "value": s["value"]}
                                 for s in samples]}
                for record, samples in sorted(exp.items())
            ],
        }],
    }  # fmt: skip


def _labels(record: str, labels: dict[str, str]) -> str:
    return record + "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _rule_files(out: Path) -> list[Path]:
    return sorted([*out.glob("*shard-*.rules.yml"), out / "jobstats.rules.yml"])


@pytest.mark.parametrize("seed", [1, 2])
def test_every_feature_equals_the_analyzers_numpy_on_a_simulated_fleet(
    seed: int, tmp_path: Path
) -> None:
    """Two shards, so the job's statistics come from both while each group scores its own
    GPUs. The vmalert variant (no query_offset: promtool would evaluate it 30 s early)."""
    shards = 2
    files = _rule_files(rendered(tmp_path, engine="vmalert", shards=shards))
    raw = _fleet(seed)
    assert len({shard_of(n, shards) for n in NODES}) == shards  # both shards hold GPUs
    spec = tmp_path / "features_test.yml"
    spec.write_text(yaml.safe_dump(_promtool_test(files, raw, shards), width=100000))
    rc, out = run(promtool_of("current"), "test", "rules", str(spec))
    assert rc == 0, out[-4000:]


def test_the_equality_test_fails_when_a_feature_disagrees(tmp_path: Path) -> None:
    """The comparison can fail: a mean over one sample too many is caught."""
    shards = 2
    out = rendered(tmp_path, engine="vmalert", shards=shards)
    for p in out.glob("node-shard-*.rules.yml"):
        p.write_text(p.read_text().replace("[3m]", "[195s]"))
    spec = tmp_path / "features_test.yml"
    raw = _fleet(1)
    files = _rule_files(out)
    spec.write_text(yaml.safe_dump(_promtool_test(files, raw, shards), width=100000))
    rc, text = run(promtool_of("current"), "test", "rules", str(spec))
    assert rc != 0 and "gpuwarden_feature:gpu_sm_clock_hertz:avg3m" in text


@pytest.mark.parametrize("seed", [1, 2])
def test_a_domain_group_one_statistics_step_behind_records_that_and_keeps_the_verdicts(
    seed: int, tmp_path: Path
) -> None:
    """The statistics stage's lag: with the statistics groups evaluated after the domain
    groups, each shard scores its GPUs against the job's median and MAD of the step before.
    promtool finds exactly those z-scores, and the GPUs past the peer detector's threshold are
    the same as with the exact statistics: the throttled GPU, and no other."""
    shards = 2
    files = _rule_files(rendered(tmp_path, engine="vmalert", shards=shards))
    raw = _fleet(seed)
    spec = tmp_path / "features_test.yml"
    spec.write_text(yaml.safe_dump(_promtool_test(files, raw, shards, lag=1), width=100000))
    rc, out = run(promtool_of("current"), "test", "rules", str(spec))
    assert rc == 0, out[-4000:]
    exact, lagged = _expected(raw, shards), _expected(raw, shards, lag=1)
    for f in FEATURES:
        if f.kind != "job_z":
            continue
        a, b = ({(x["labels"]["node"], x["labels"]["gpu"]): x["value"] for x in e[f.record]}
                for e in (exact, lagged))  # fmt: skip
        assert a.keys() == b.keys() and a != b, f.record  # the lag is there, and seen
        past = {k for k, z in a.items() if abs(z) > PEER_Z}
        assert past == {k for k, z in b.items() if abs(z) > PEER_Z}, f.record
        assert past == ({LEMON} if f.metric == c.GPU_SM_CLOCK else set()), f.record


# ------------------------------------------------------------------ the health alerts

HEALTH_TEST = ALERTS / "tests" / "features" / "rule-health_test.yml"


@pytest.mark.parametrize("generation", ["current", "stable"])
def test_the_health_alerts_unit_tests_pass_on_both_prometheus_generations(generation: str) -> None:
    rc, out = run(promtool_of(generation), "test", "rules", str(HEALTH_TEST))
    assert rc == 0 and "SUCCESS" in out, out


def test_every_health_alert_has_a_firing_and_a_silent_case_and_a_runbook() -> None:
    (rules,) = [yaml.safe_load((COMMITTED / "rule-health.rules.yml").read_text())["groups"]]
    names = {r["alert"] for g in rules for r in g["rules"]}
    cases = [c for t in yaml.safe_load(HEALTH_TEST.read_text())["tests"]
             for c in t["alert_rule_test"]]  # fmt: skip
    runbook = (ALERTS / "runbooks.md").read_text()
    for name in names:
        mine = [c for c in cases if c["alertname"] == name]
        assert any(c["exp_alerts"] for c in mine) and any(not c["exp_alerts"] for c in mine)
        assert f"## {name}\n" in runbook


# ------------------------------------------------------------------ vmalert evaluating them


def _vm_query(url: str, expr: str) -> dict[tuple[tuple[str, str], ...], float]:
    q = urllib.parse.urlencode({"query": expr})
    body = json.loads(http_get(f"{url}/api/v1/query?{q}"))
    assert body["status"] == "success", body
    return {tuple(sorted((k, v) for k, v in r["metric"].items() if k != "__name__")):
            float(r["value"][1]) for r in body["data"]["result"]}  # fmt: skip


@pytest.mark.parametrize("vm_generation", VM_GENERATIONS)
def test_vmalert_evaluates_the_vmalert_variant_on_victoriametrics_scraping_through_the_relabel(
    tmp_path: Path, vm_generation: str
) -> None:
    """victoria-metrics (single node: scraper, store and query API) scrapes 4 stand-in
    exporters through the generated relabel; the 2-shard groups run split over three vmalert
    instances as docs/deploy.md tells a VictoriaMetrics site (instance i: node-shard-i and
    domain-shard-i; one more: the job statistics), each writing its features back. Each node
    gets one shard, and each recorded feature equals the store evaluating the rule's
    expression itself (the series are constant). The current vmalert takes the offset as
    -rule.evalDelay, as the generated header tells sites to run it (1.79.5 has no such
    flag)."""
    vm_bin, vmalert = (
        vm_binary("victoria-metrics", vm_generation),
        vm_binary("vmalert", vm_generation),
    )
    plan = GEN.Plan(shards=2, engine="vmalert", interval=2.0, scrape_interval=1.0, offset=1.0)
    files = GEN.render_all(plan)
    instances = {"shard-0": ("node-shard-0", "domain-shard-0"),
                 "shard-1": ("node-shard-1", "domain-shard-1"), "stats": ("jobstats",)}  # fmt: skip
    for inst, names in instances.items():
        (tmp_path / inst).mkdir()
        for name in names:
            (tmp_path / inst / f"{name}.rules.yml").write_text(files[f"{name}.rules.yml"])
    nodes = featurefleet.NODES
    assert {shard_of(n, 2) for n in nodes} == {0, 1}
    relabel = yaml.safe_load(files["scrape-relabel.yml"])["relabel_configs"]
    with serve_expositions(featurefleet.bodies()) as port:
        scrape = {"scrape_configs": [{
            "job_name": "gpuwarden-exporter", "scrape_interval": "1s", "honor_labels": True,
            "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                                "labels": {"node": n, "__metrics_path__": f"/{n}"}} for n in nodes],
            "relabel_configs": relabel,
        }]}  # fmt: skip
        (tmp_path / "scrape.yml").write_text(yaml.safe_dump(scrape))
        vm_port = free_port()
        vm = f"http://127.0.0.1:{vm_port}"
        vm_argv = [vm_bin, f"-storageDataPath={tmp_path / 'vm'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
                   f"-promscrape.config={tmp_path / 'scrape.yml'}", "-search.latencyOffset=1s",
                   "-search.disableCache"]  # fmt: skip
        with daemon(vm_argv, f"{vm}/health", tmp_path / "vm.log"), contextlib.ExitStack() as alerts:
            wait_until(lambda: len(_vm_query(vm, c.GPU_UP.name)) == 8, 60, 0.5, "scrapes")
            for inst in instances:
                at = free_port()
                argv = [vmalert, f"-rule={tmp_path / inst}/*.rules.yml", f"-datasource.url={vm}",
                        f"-remoteWrite.url={vm}", f"-httpListenAddr=127.0.0.1:{at}",
                        "-remoteWrite.flushInterval=1s"]  # fmt: skip
                if vm_generation == "current":
                    argv.append(f"-rule.evalDelay={GEN._secs(plan.offset)}")
                alerts.enter_context(daemon(argv, f"http://127.0.0.1:{at}/health",
                                             tmp_path / f"vmalert-{inst}.log"))  # fmt: skip
            served = {c.GPU_SM_CLOCK, c.GPU_TEMPERATURE, c.GPU_POWER, c.GPU_UTILIZATION,
                      c.GPU_UP}  # fmt: skip
            want = {f.record for f in FEATURES if f.metric in served}
            wait_until(
                lambda: all(_vm_query(vm, f"last_over_time({r}[1m])") for r in want),
                90, 1.0, "vmalert's recorded features",
            )  # fmt: skip
            up = _vm_query(vm, c.GPU_UP.name)
            for f in FEATURES:
                if f.record not in want:
                    continue
                got = _vm_query(vm, f"last_over_time({f.record}[1m])")
                direct: dict[tuple[tuple[str, str], ...], float] = {}
                for shard in range(2):
                    direct |= _vm_query(vm, f.expr(shard))
                assert set(got) == set(direct), f.record
                for k, v in got.items():
                    assert v == pytest.approx(direct[k], rel=1e-9, abs=1e-9), (f.record, k)
                if f.metric == c.GPU_SM_CLOCK and f.kind == "job_z":  # and the analyzer's
                    for job in ("j0", "j1"):
                        keys = [(n, str(g)) for i, n in enumerate(nodes) if f"j{i % 2}" == job
                                for g in range(2)]  # fmt: skip
                        x = np.array([featurefleet.sm_clock(nodes.index(n), int(g))
                                      for n, g in keys])  # fmt: skip
                        floor = max(f.floor_abs, f.floor_rel * abs(float(np.median(x))))
                        z = robust_z(x[None, :], axis=1, floor=floor)[0]
                        mine = {(dict(k)["node"], dict(k)["gpu"]): v for k, v in got.items()}
                        for key, zi in zip(keys, z, strict=True):
                            assert mine[key] == pytest.approx(float(zi), rel=1e-9), key
    # every series of a node on one shard. VictoriaMetrics' scraper computes hashmod with
    # xxhash, not Prometheus' MD5 (observed: gpu-node-01 lands on 1 here, on 0 in Prometheus):
    # a consistent map of its own; the rules only read the label, never recompute it
    shards = {(dict(k)["node"], dict(k)[SHARD_LABEL]) for k in up}
    assert {n for n, _ in shards} == set(nodes) and len(shards) == len(nodes)
    assert {s for _, s in shards} <= {"0", "1"}


def test_the_vmalert_health_alerts_fire_on_vmalerts_own_metrics(tmp_path: Path) -> None:
    """The vmalert variant's health group over the series vmalert 1.79.5 serves (labels as
    its /metrics shows them): a slow group, a missed iteration, a failing recording rule;
    a group that is not a feature group never."""
    vm = rendered(tmp_path, engine="vmalert")
    g = 'group="gpuwarden-features-shard-1",file="/etc/vmalert/node-shard-1.rules.yml"'
    other = 'group="gpuwarden-gpu",file="/etc/vmalert/gpu.rules.yml"'
    labels = {"severity": "warning", "action": "notify", "component": "features"}
    rb = "https://github.com/gpuwarden/gpuwarden/blob/main/alerts/runbooks.md#"
    grp = "Feature rule group gpuwarden-features-shard-1"

    def ann(name: str, summary: str, description: str) -> dict[str, str]:
        return {"summary": f"{grp} {summary}", "description": description,
                "runbook_url": rb + name.lower()}  # fmt: skip

    gl = {"group": "gpuwarden-features-shard-1", "file": "/etc/vmalert/node-shard-1.rules.yml"}
    spec = {
        "rule_files": [str(vm / "rule-health.rules.yml")],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": [
                {"series": f'vmalert_iteration_duration_seconds{{{g},quantile="1"}}',
                 "values": "13x10"},
                {"series": f"vmalert_iteration_interval_seconds{{{g}}}", "values": "15x10"},
                {"series": f'vmalert_iteration_duration_seconds{{{other},quantile="1"}}',
                 "values": "14x10"},
                {"series": f"vmalert_iteration_interval_seconds{{{other}}}", "values": "15x10"},
                {"series": f"vmalert_iteration_missed_total{{{g}}}", "values": "0 0 0 2x7"},
                {"series": f'vmalert_recording_rules_error{{recording="x",{g},id="1"}}',
                 "values": "0 0 0 0 1x6"},
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "GpuwardenFeatureRulesSlow", "exp_alerts": []},
                {"eval_time": "6m", "alertname": "GpuwardenFeatureRulesSlow",
                 "exp_alerts": [{"exp_labels": {**gl, **labels}, "exp_annotations": ann(
                     "GpuwardenFeatureRulesSlow", "takes most of its interval",
                     "Its slowest recent evaluation took 13s: add shards or vmalert instances "
                     "before it misses evaluations.")}]},
                {"eval_time": "2m", "alertname": "GpuwardenFeatureRulesMissed", "exp_alerts": []},
                {"eval_time": "4m", "alertname": "GpuwardenFeatureRulesMissed",
                 "exp_alerts": [{"exp_labels": {**gl, **labels}, "exp_annotations": ann(
                     "GpuwardenFeatureRulesMissed", "skipped evaluations",
                     "2 evaluations skipped in 10 min: the analyzer's features have holes.")}]},
                {"eval_time": "3m", "alertname": "GpuwardenFeatureRulesFailing", "exp_alerts": []},
                {"eval_time": "5m", "alertname": "GpuwardenFeatureRulesFailing",
                 "exp_alerts": [{"exp_labels": {"group": gl["group"], **labels},
                                 "exp_annotations": ann(
                     "GpuwardenFeatureRulesFailing", "fails to evaluate",
                     "A feature recording rule failed: the features the analyzer reads have "
                     "holes.")}]},
            ],
        }],
    }  # fmt: skip
    path = tmp_path / "vm_health_test.yml"
    path.write_text(yaml.safe_dump(spec))
    rc, out = run(promtool_of("current"), "test", "rules", str(path))
    assert rc == 0, out[-3000:]


@pytest.mark.parametrize("vm_generation", VM_GENERATIONS)
def test_a_real_vmalert_fires_the_failing_alert_for_its_own_failing_feature_group_and_no_other(
    tmp_path: Path, vm_generation: str
) -> None:
    """vmalert evaluates the generated health group over its own /metrics, which
    victoria-metrics scrapes: a feature group whose recording rule fails on every evaluation
    (a result of two series with one labelset, which vmalert refuses to record) fires
    GpuwardenFeatureRulesFailing with that group's label; a healthy feature group and the
    health group itself do not. The series the slow-group alert joins exist, with the labels it
    joins on, for both feature groups and no other."""
    vm_bin, vmalert = (
        vm_binary("victoria-metrics", vm_generation),
        vm_binary("vmalert", vm_generation),
    )
    rules = tmp_path / "rules"
    rules.mkdir()
    health = yaml.safe_load(rendered(tmp_path, engine="vmalert").joinpath(
        "rule-health.rules.yml").read_text())  # fmt: skip
    for g in health["groups"]:
        g["interval"] = "1s"
    (rules / "rule-health.rules.yml").write_text(yaml.safe_dump(health))
    bad, good = "gpuwarden-features-shard-0", "gpuwarden-features-shard-1"
    dup = 'label_set(vector(1), "node", "a") or label_set(vector(2), "node", "a", "x", "y")'
    for name, expr in (
        (bad, f'label_del({dup}, "x")'),
        (good, 'label_set(vector(1), "node", "a")'),
    ):
        (rules / f"{name}.rules.yml").write_text(yaml.safe_dump({"groups": [
            {"name": name, "interval": "1s", "rules": [{"record": f"gpuwarden_node:probe_{name[-1]}", "expr": expr}]}
        ]}))  # fmt: skip
    vm_port, alert_port = free_port(), free_port()
    vm, va = f"http://127.0.0.1:{vm_port}", f"http://127.0.0.1:{alert_port}"
    scrape = {"scrape_configs": [{"job_name": "vmalert", "scrape_interval": "1s",
                                  "static_configs": [{"targets": [f"127.0.0.1:{alert_port}"]}]}]}  # fmt: skip
    (tmp_path / "scrape.yml").write_text(yaml.safe_dump(scrape))
    vm_argv = [vm_bin, f"-storageDataPath={tmp_path / 'vm'}", f"-httpListenAddr=127.0.0.1:{vm_port}",
               f"-promscrape.config={tmp_path / 'scrape.yml'}", "-search.latencyOffset=1s",
               "-search.disableCache"]  # fmt: skip
    alert_argv = [vmalert, f"-rule={rules}/*.rules.yml", f"-datasource.url={vm}",
                  f"-remoteWrite.url={vm}", f"-httpListenAddr=127.0.0.1:{alert_port}",
                  "-remoteWrite.flushInterval=1s", f"-notifier.url=http://127.0.0.1:{free_port()}"]  # fmt: skip
    if vm_generation == "current":
        alert_argv.append("-rule.evalDelay=1s")

    def firing() -> dict[str, set[str]]:
        body = json.loads(http_get(f"{va}/api/v1/alerts"))
        out: dict[str, set[str]] = {}
        for a in body["data"]["alerts"]:
            if a.get("state") == "firing":
                out.setdefault(a["name"], set()).add(a["labels"].get("group", ""))
        return out

    with daemon(vm_argv, f"{vm}/health", tmp_path / "vm.log"), \
            daemon(alert_argv, f"{va}/health", tmp_path / "vmalert.log"):  # fmt: skip
        wait_until(lambda: firing().get("GpuwardenFeatureRulesFailing"), 90, 1.0,
                   "GpuwardenFeatureRulesFailing")  # fmt: skip
        got = _vm_query(vm, "gpuwarden_node:probe_1")
        assert list(got.values()) == [1.0]  # the healthy group records
        time.sleep(3)  # a few more evaluations: nothing else starts firing
        assert firing() == {"GpuwardenFeatureRulesFailing": {bad}}
        expr = yaml.safe_load(yaml.safe_dump(health))["groups"][0]["rules"][0]["expr"]
        assert "vmalert_iteration_duration_seconds" in expr
        # both groups' series once each has a recent evaluation in vmalert's summary (a
        # quantile over a window with none yet is not > 0; once, in a full run, the healthy
        # group's was not there 3 s after the alert fired)
        joined = wait_until(
            lambda: (j := _vm_query(vm, expr.replace("> 0.8 *", "> 0 *")))
            and {dict(k)["group"] for k in j} == {bad, good} and j,
            30, 0.5, "both feature groups' duration and interval joined",
        )  # fmt: skip
        assert {dict(k)["group"] for k in joined} == {bad, good}
        assert all(dict(k)["file"].endswith(f"{dict(k)['group']}.rules.yml") for k in joined)
        missed = _vm_query(vm, 'vmalert_iteration_missed_total{group=~"gpuwarden-.*"}')
        assert {dict(k)["group"] for k in missed} >= {bad, good}
        assert all(v == 0 for v in missed.values())
