"""Foreign dialects (analyzer.sources.dialects): units, labels, identity, XID and lost-GPU
semantics, discovery and coverage, without a server (the real-Prometheus path:
test_dcgm_prometheus.py)."""

from __future__ import annotations

import asyncio
import json
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.service import AnalyzerService
from analyzer.settings import AnalyzerSettings
from analyzer.sources import SourceError
from analyzer.sources.dialects import DCGM, NODE_EXPORTER, coverage, dcgm, discover
from analyzer.sources.dialects.generations import generations_of, names_of, names_of_field
from analyzer.sources.dialects.identity import NodeMap, host_of, load_node_map, raw_identity
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.queries import QUERIES
from analyzer.window import Window
from common.settings import SettingsError
from exporter import catalog as c
from exporter import catalog_dcgm as cd

SCRAPE = Path(__file__).resolve().parents[2] / "fixtures" / "dcgm" / "scrape-4.x-hpc.txt"
_LINE = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def _scrape() -> list[tuple[str, dict[str, str], float]]:
    out = []
    for line in SCRAPE.read_text().splitlines():
        m = _LINE.match(line)
        if m:
            out.append((m.group(1), dict(_LABEL.findall(m.group(2))), float(m.group(3))))
    return out


def _translate(name: str, labels: dict[str, str]) -> list[tuple[str, dict[str, str], float]]:
    """What the dcgm reader makes of one scraped series: (catalogue name, labels, factor)."""
    out = []
    for q in dcgm.queries():
        if q.source == name and q.relabel is not None:
            out.append((q.metric.name, q.relabel(dict(labels)), 1.0 / q.divide))
    return out


def test_a_recorded_dcgm_scrape_reads_in_the_catalogues_units_and_labels():
    got = {}
    for name, labels, v in _scrape():
        for metric, lab, factor in _translate(name, labels):
            got[(metric, lab["gpu"], lab.get("error_type", ""), lab.get("link", ""))] = (
                v * factor,
                lab,
            )
    clock = got[(c.GPU_SM_CLOCK.name, "0", "", "")]
    assert clock[0] == pytest.approx(1.44e9) and clock[1]["node"] == "gpu-a30-07"  # MHz -> Hz
    assert got[(c.GPU_SM_CLOCK.name, "1", "", "")][0] == pytest.approx(2.1e8)
    assert got[(c.GPU_UTILIZATION.name, "0", "", "")][0] == pytest.approx(0.87)  # % -> ratio
    assert got[(c.GPU_POWER.name, "0", "", "")][0] == pytest.approx(151.372)  # W stays W
    assert got[(c.GPU_TEMPERATURE.name, "1", "", "")][0] == 33.0
    assert got[(c.GPU_SM_ACTIVE.name, "0", "", "")][0] == pytest.approx(0.734512)  # a ratio
    ecc = got[(c.GPU_ECC_ERRORS.name, "0", "uncorrected", "")]
    assert ecc[0] == 2.0 and ecc[1]["counter_type"] == "volatile"
    nvl = got[(c.NVLINK_ERRORS.name, "0", "crc_flit", "0")]  # a per-GPU sum, on link 0
    assert nvl[0] == 17.0


def test_job_attribution_comes_from_hpc_job_and_from_a_pods_name_without_its_rank():
    alloc = [q for q in dcgm.queries() if q.metric is c.GPU_ALLOCATION_INFO]
    assert {q.by[-1] for q in alloc} == {"hpc_job", "namespace"}
    hpc = next(q for q in alloc if "hpc_job" in q.by)
    assert hpc.relabel is not None
    assert hpc.relabel({"Hostname": "n1", "gpu": "0", "hpc_job": "4242"})["job_id"] == "4242"
    pod = next(q for q in alloc if "pod" in q.by)
    assert pod.relabel is not None
    ranks = [pod.relabel({"Hostname": f"n{i}", "gpu": "0", "pod": f"llm-{i}", "namespace": "ml"})
             for i in range(2)]  # fmt: skip
    workers = [pod.relabel({"hostname": "n", "gpu": "0", "pod": p, "namespace": "ml"})
               for p in ("train-worker-0", "train-worker-11", "train-launcher")]  # fmt: skip
    assert {r["job_id"] for r in ranks} == {"ml/llm"}
    assert {r["job_id"] for r in workers} == {"ml/train"}


def test_every_dcgm_field_of_a_family_the_analyzer_reads_has_a_reader_in_every_generation():
    read = {q.source for q in dcgm.queries()}
    for q in QUERIES:
        if q.metric in dcgm.NATIVE_ONLY:  # per-instance series: gpuwarden's exporter only
            assert not [x for x in dcgm.queries() if x.metric is q.metric]
            continue
        for f in q.metric.dcgm:
            if f.sum_over in ((), ("link",)):
                assert {n for n, _ in names_of(f)} <= read, f.name


def test_each_naming_generation_of_a_field_reads_in_the_catalogues_native_unit():
    clock, util = c.GPU_SM_CLOCK.dcgm[0], c.GPU_UTILIZATION.dcgm[0]
    # 4.8's MHz is divided into Hz, 4.9's base-unit clock (a new DCGM field id) is native; the
    # utilisation keeps its field id and its percent when DCGM renames it (fixtures/dcgm/)
    assert names_of(clock) == ((clock.name, 1e-6), (cd.name_in("4.9", clock.name), 1.0))
    assert names_of(util) == ((util.name, 100.0), (cd.name_in("4.9", util.name), 100.0))
    xids = names_of_field(c.DCGM_LAST_XID.name)
    assert xids == (c.DCGM_LAST_XID.name, cd.name_in("4.9", c.DCGM_LAST_XID.name))
    read = {q.source for q in dcgm.queries()}
    assert set(xids) <= read  # the last-XID gauge is read in every generation's name


def test_the_generations_present_are_told_apart_by_their_names():
    fields = (c.GPU_SM_CLOCK.dcgm[0].name, c.GPU_TEMPERATURE.dcgm[0].name, c.DCGM_LAST_XID.name)
    legacy = set(fields)
    g49 = {n for f in fields if (n := cd.name_in("4.9", f)) is not None}
    assert generations_of(legacy) == ("4.8",)
    # 4.10 names every field as 4.9 does (DCGM 4.6.1's header): its nodes read as 4.9
    assert generations_of(g49) == ("4.9",)
    assert generations_of(legacy | g49) == ("4.8", "4.9")  # a fleet mid-upgrade
    assert discover.parse(g49).dialects == ("dcgm-exporter",)


# ------------------------------------------------------------------ node identity
@pytest.mark.parametrize(
    ("labels", "node"),
    [
        ({"node": "n1", "Hostname": "h1", "instance": "i1:9400"}, "n1"),
        ({"Hostname": "h1", "hostname": "x", "instance": "i1:9400"}, "h1"),
        ({"hostname": "h2", "instance": "i1:9400"}, "h2"),  # dcgm-exporter from d5e5f51 on
        ({"instance": "gpu-09.dc1:9100"}, "gpu-09.dc1"),  # node_exporter: the host of instance
        ({"instance": "[fe80::1]:9100"}, "fe80::1"),
        ({"instance": "gpu-10"}, "gpu-10"),
        ({}, ""),
    ],
)
def test_a_foreign_series_node_is_node_then_hostname_then_the_host_of_instance(labels, node):
    assert raw_identity(labels) == node


def test_a_site_mapping_renames_hosts_exactly_first_then_by_pattern():
    m = NodeMap(r"(.+?)\.cluster\.example", {"gpu-09.cluster.example": "rack3-09"})
    assert m("gpu-09.cluster.example") == "rack3-09"
    assert m("gpu-10.cluster.example") == "gpu-10"
    assert m("login-1") == "login-1"  # outside the pattern: unchanged
    assert host_of("gpu-1:9400") == "gpu-1"


def test_a_node_map_file_reads_as_yaml_or_as_lines(tmp_path):
    (tmp_path / "a.yaml").write_text("gpu-09.dc: n09\ngpu-10.dc: n10\n")
    (tmp_path / "b.txt").write_text("# host node\ngpu-09.dc n09\ngpu-10.dc   n10\n")
    assert load_node_map(str(tmp_path / "a.yaml")) == load_node_map(str(tmp_path / "b.txt"))
    (tmp_path / "bad.txt").write_text("only-one-name\n")
    with pytest.raises(ValueError, match=r"bad\.txt:1"):
        load_node_map(str(tmp_path / "bad.txt"))


@pytest.mark.parametrize(
    ("kw", "why"),
    [
        ({"node_pattern": "(unclosed"}, "node_pattern"),
        ({"node_pattern": "no-group"}, "needs a group"),
        ({"node_map": "/nonexistent/map"}, "node identity"),
    ],
)
def test_a_bad_node_mapping_stops_the_start_with_one_line(kw, why):
    with pytest.raises(SettingsError, match=why):
        AnalyzerSettings(prometheus="http://p:9090", **kw)


def test_a_good_node_mapping_starts_and_maps(tmp_path):
    (tmp_path / "m").write_text("h1 n1\n")
    s = AnalyzerSettings(
        prometheus="http://p:9090", node_pattern=r"(\w+)\.x", node_map=str(tmp_path / "m")
    )
    assert s.nodes()("h1") == "n1" and s.nodes()("h2.x") == "h2"


# ------------------------------------------------------------------ XID gauge
def _xids(rows, anchor=None, present=None):
    vals = np.array(rows, dtype=float)
    R, T = vals.shape
    anchor = np.full(R, np.nan) if anchor is None else np.array(anchor, dtype=float)
    present = np.ones((T, 1), dtype=bool) if present is None else present
    grid = np.arange(T) * 15.0
    ev = dcgm.last_xid_events(vals, anchor, np.zeros(R, int), np.arange(R), grid, present)
    return [(e.t, e.gpu, e.xid) for e in ev]


N = np.nan


def test_a_change_of_the_last_xid_is_one_event_of_the_new_code():
    assert _xids([[31, 31, 43, 43, 13]], anchor=[31]) == [(30.0, 0, 43), (60.0, 0, 13)]


def test_a_repeat_of_the_same_xid_is_invisible_and_a_drop_to_zero_is_a_restart():
    assert _xids([[31, 31, 31, 0, 0]], anchor=[31]) == []


def test_a_series_born_non_zero_while_its_node_reported_is_an_event():
    assert _xids([[N, N, 79, 79]]) == [(30.0, 0, 79)]


def test_a_first_sample_with_nothing_known_before_it_is_a_baseline():
    assert _xids([[48, 48, 48]]) == []  # at the window's start, no anchor: could be old
    gap = np.array([[True], [False], [True]])
    assert _xids([[N, N, 48]], present=gap) == []  # after a node gap: unknown


def test_a_change_after_a_gap_is_still_one_event():
    assert _xids([[13, N, N, 31]], anchor=[13]) == [(45.0, 0, 31)]


# ------------------------------------------------------------------ lost GPU
def test_a_gpu_whose_series_vanish_while_its_siblings_report_is_lost():
    up = np.ones((6, 1, 3))
    up[3:, 0, 1] = np.nan  # GPU 1 vanished for 3 points
    up[5:, 0, 2] = np.nan  # GPU 2 for 1 point: not yet
    dcgm.vanished_as_lost(up, np.array([0]))
    assert list(up[:, 0, 1]) == [1, 1, 1, 0, 0, 0]
    assert np.isnan(up[5, 0, 2])


def test_a_whole_node_gone_quiet_stays_a_gap_not_lost_gpus():
    up = np.ones((6, 1, 2))
    up[3:] = np.nan
    dcgm.vanished_as_lost(up, np.array([0]))
    assert np.isnan(up[3:]).all()


def test_a_gpu_never_seen_in_the_window_is_not_lost():
    up = np.ones((4, 1, 2))
    up[:, 0, 1] = np.nan
    dcgm.vanished_as_lost(up, np.array([0]))
    assert np.isnan(up[:, 0, 1]).all()


# ------------------------------------------------------------------ discovery
def test_a_prometheus_without_foreign_names_gets_only_gpuwardens_queries():
    found = discover.parse([c.GPU_UP.name, "up"])
    assert found.dialects == () and discover.query_set(found) == QUERIES


def test_discovery_reads_only_the_dcgm_fields_present_and_node_exporters_ib():
    present = [c.DCGM_LAST_XID.name, c.GPU_SM_CLOCK.dcgm[0].name, c.NODE_IB_STATE,
               c.NODE_IB_ERRORS["symbol_error"]]  # fmt: skip
    found = discover.parse(present)
    assert found.dialects == (DCGM, NODE_EXPORTER)
    extra = discover.query_set(found)[len(QUERIES) :]
    sources = {q.source for q in extra}
    assert c.GPU_SM_CLOCK.dcgm[0].name in sources
    assert c.GPU_TEMPERATURE.dcgm[0].name not in sources  # absent: not asked for
    assert c.NODE_IB_STATE in sources and c.NODE_IB_RATE not in sources
    assert all(q.dialect and q.gate is None for q in extra)
    moved = {q.metric for q in extra if q.moved_only}
    assert moved == {c.IB_COUNTER}  # counters: only the series that moved are read
    assert {q.source for q in extra if q.moved_only} == {c.NODE_IB_ERRORS["symbol_error"]}


def test_dcgm_counters_are_read_moved_only_and_without_instance_where_hosts_are_named():
    qs = dcgm.queries(hostname=True)
    ecc = [q for q in qs if q.metric is c.GPU_ECC_ERRORS]
    assert ecc and all(q.moved_only for q in ecc)
    assert all("instance" not in q.by for q in qs)
    assert all("instance" in q.by for q in dcgm.queries(hostname=False))
    q = ecc[0]
    sel = 'Hostname="h",gpu="1"'
    assert q.expr(sel) == f"max by (node,Hostname,hostname,gpu) ({q.source}{{{sel}}})"
    by = "node,Hostname,hostname,gpu"
    assert q.moved_expr(600) == (
        f"max by ({by}) (max_over_time({q.source}[600s]))"
        f" - min by ({by}) (min_over_time({q.source}[600s])) > 0"
    )


def test_the_discovery_query_names_every_field_a_reader_knows():
    expr = discover.discovery_expr()
    assert expr.startswith("group by (__name__)")
    for name in (c.DCGM_LAST_XID.name, c.NODE_IB_STATE, c.GPU_UTILIZATION.dcgm[0].name):
        assert name in expr


# ------------------------------------------------------------------ coverage
def _window(dialect: str) -> Window:
    T, N, G = 3, 2, 8
    metrics = {m.name: np.ones((T, N, G)) for m in (c.GPU_UP, c.GPU_UTILIZATION, c.GPU_SM_CLOCK)}
    metrics[c.NVLINK_ERRORS.name] = np.zeros((T, N, G, 18, 4))
    return Window(t=np.arange(T) * 15.0, nodes=("a", "b"), metrics=metrics,
                  dialect_of={0: dialect, 1: "gpuwarden"}, jobs={"7": (0, 1)})  # fmt: skip


def test_coverage_names_the_csv_lines_that_would_enable_what_a_dcgm_group_cannot_judge():
    rep = coverage.report(_window(DCGM))
    dc = next(g for g in rep["groups"] if g["dialect"] == DCGM)
    by = {d["detector"]: d for d in dc["detectors"]}
    assert by["straggler"]["state"] == "partial"
    enable = "\n".join(x["enable"] for x in by["straggler"]["cannot"])
    f = c.GPU_SM_ACTIVE.dcgm[0]
    assert f"{f.name}, gauge, {f.help}" in enable  # the exact line for the CSV
    assert by["memory"]["state"] == "cannot"
    assert f"{c.GPU_ECC_ERRORS.dcgm[1].name}, counter" in "\n".join(
        x["enable"] for x in by["memory"]["cannot"])  # fmt: skip
    assert any("not to a link" in n for n in by["nvlink"]["notes"])
    text = coverage.text(rep)
    assert "== dcgm-exporter: 1 node(s) (a)" in text and "== gpuwarden: 1 node(s) (b)" in text


def test_coverage_names_each_groups_dcgm_generation_and_its_csv_lines_in_that_generations_names():
    w = _window(DCGM)
    rep = coverage.report(replace(w, dcgm_generation_of={0: "4.9"}))
    dc = next(g for g in rep["groups"] if g["dialect"] == DCGM)
    assert dc["dcgm_generations"] == ["4.9"]
    peer = next(d for d in dc["detectors"] if d["detector"] == "peer")
    enable = "\n".join(x["enable"] for x in peer["cannot"])
    power = c.GPU_POWER.dcgm[0].name
    assert f"{cd.name_in('4.9', power)}, gauge" in enable  # 4.9's name for the power field
    assert power not in enable
    assert "[dcgm-exporter naming 4.9]: 1 node(s) (a)" in coverage.text(rep)
    legacy = coverage.report(replace(w, dcgm_generation_of={0: "4.8"}))
    assert f"{power}, gauge" in "\n".join(
        x["enable"] for g in legacy["groups"] for d in g["detectors"] for x in d["cannot"]
    )


def test_every_default_detector_has_a_line_in_every_groups_coverage():
    rep = coverage.report(_window(DCGM))
    for g in rep["groups"]:
        listed = {d["detector"] for d in g["detectors"]}
        assert {d.name for d in default_detectors()} | {coverage.FAIL_SLOW} <= listed


def _enable(rep: dict, dialect: str, det: str) -> tuple[dict, str]:
    g = next(g for g in rep["groups"] if g["dialect"] == dialect)
    d = next(d for d in g["detectors"] if d["detector"] == det)
    return d, "\n".join(x["enable"] for x in d["cannot"])


def test_coverage_tells_what_enables_the_fabric_power_brake_and_marginal_detectors():
    rep = coverage.report(_window(DCGM))
    brake, enable = _enable(rep, DCGM, "power_brake")
    assert brake["state"] == "cannot" and f"{c.DCGM_CLOCK_EVENTS_COUNT.name}, counter" in enable
    fabric, enable = _enable(rep, DCGM, "fabric")
    assert fabric["state"] == "cannot" and "no fabric-health field" in enable
    marginal, enable = _enable(rep, DCGM, "marginal")  # NVLink counters there: judged
    assert marginal["state"] == "partial" and "--collector.infiniband" in enable
    assert "the dcgm reader does not read remap counts" in enable
    gone = (c.NVLINK_ERRORS.name, c.GPU_SM_CLOCK.name)
    bare = coverage.report(replace(_window(DCGM), metrics={
        k: v for k, v in _window(DCGM).metrics.items() if k not in gone}))  # fmt: skip
    marginal, enable = _enable(bare, DCGM, "marginal")  # no signal at all: nothing to judge
    assert marginal["state"] == "cannot"
    assert f"{c.NVLINK_ERRORS.dcgm[0].name}, counter" in enable


def test_coverage_says_fail_slow_only_notifies_without_power_limit_or_clock_event_reasons():
    w = _window(DCGM)
    slow, enable = _enable(coverage.report(w), DCGM, coverage.FAIL_SLOW)
    assert coverage.NOTIFY_ONLY in slow["notes"]
    assert f"{c.GPU_POWER_LIMIT.dcgm[0].name}, gauge" in enable
    assert f"{c.DCGM_CLOCK_EVENTS_COUNT.name}, counter" in enable
    limited = dict(w.metrics, **{c.GPU_POWER_LIMIT.name: np.full((3, 2, 8), 700.0)})
    slow, _ = _enable(coverage.report(replace(w, metrics=limited)), DCGM, coverage.FAIL_SLOW)
    assert slow["notes"] == [] and slow["state"] == "partial"


def test_a_finding_from_a_reduced_signal_says_so():
    w = _window(DCGM)
    f = Finding("a", "link=gpu2/0", "nvlink_errors", "warning", "cordon", "nvlink", 0.9, 0.0,
                {}, "NVLink errors recurring")  # fmt: skip
    same_on_native = Finding("b", "link=gpu2/0", "nvlink_errors", "warning", "cordon", "nvlink",
                             0.9, 0.0, {}, "NVLink errors recurring")  # fmt: skip
    got, native = coverage.annotate([f, same_on_native], w)
    assert got.evidence["reduced_signal"] == 1.0 and "not to a link" in got.summary
    assert native == same_on_native


class _WindowSource:
    name = "fake"

    def __init__(self, w: Window) -> None:
        self.w = w

    async def read(self, now: float) -> Window:
        return self.w


def test_the_service_serves_coverage_of_its_last_cycle_and_says_when_it_has_none():
    svc = AnalyzerService(_WindowSource(_window(DCGM)), Engine(default_detectors()), 15.0)
    assert svc.coverage()["groups"] == [] and "no cycle" in svc.coverage()["error"]
    asyncio.run(svc.run_cycle(100.0))
    got = {g["dialect"]: g["nodes"] for g in svc.coverage()["groups"]}
    assert got == {DCGM: ["a"], "gpuwarden": ["b"]}


class _Prom:
    """Answers discovery with ``names`` (on nodes of their own), the ``gpu_up`` read with one
    series, everything else with nothing."""

    def __init__(self, names: list[str], fail_first: bool = False) -> None:
        self.names, self.fail_first = names, fail_first
        self.discoveries = 0

    async def post(self, path, form):
        q = form["query"]
        if q == discover.discovery_expr():
            self.discoveries += 1
            if self.fail_first and self.discoveries == 1:
                raise SourceError("HTTP 503")
            result = [{"metric": {"__name__": n}, "value": [0, "1"]} for n in self.names]
            return json.dumps({"status": "success", "data": {"resultType": "vector",
                                                              "result": result}}).encode()  # fmt: skip
        if q.startswith("count(label_replace("):  # nodes only the dialect serves: some
            result = [{"metric": {}, "value": [0, "8"]}]
            return json.dumps({"status": "success", "data": {"resultType": "vector",
                                                              "result": result}}).encode()  # fmt: skip
        if path.endswith("query_range") and q.startswith(f"max by (node,gpu) ({c.GPU_UP.name})"):
            t0, t1 = float(form["start"]), float(form["end"])
            vals = [[t, "1"] for t in np.arange(t0, t1 + 1, 15.0)]
            result = [{"metric": {"node": "n1", "gpu": "0"}, "values": vals}]
            return json.dumps({"status": "success", "data": {"resultType": "matrix",
                                                              "result": result}}).encode()  # fmt: skip
        kind = "matrix" if path.endswith("query_range") else "vector"
        return json.dumps(
            {"status": "success", "data": {"resultType": kind, "result": []}}
        ).encode()


def _cycles(prom: _Prom, times: list[float]) -> PrometheusSource:
    src = PrometheusSource("http://p", window=600, step=15, http=prom, discover=True, retries=0)

    async def go() -> None:
        for t in times:
            await src.read(t)

    asyncio.run(go())
    return src


def test_dialects_are_looked_up_at_start_and_again_after_an_hour_not_every_cycle():
    prom = _Prom([c.GPU_TEMPERATURE.dcgm[0].name])
    t0 = 1_700_000_000.0
    src = _cycles(prom, [t0 + 15 * k for k in range(5)] + [t0 + 3700])
    assert prom.discoveries == 2
    assert src.found is not None and src.found.dialects == (DCGM,)
    assert any(q.dialect == DCGM for q in src.queries)


def test_a_failed_discovery_keeps_gpuwardens_queries_and_the_cycle_and_tries_again():
    prom = _Prom([c.GPU_TEMPERATURE.dcgm[0].name], fail_first=True)
    t0 = 1_700_000_000.0
    src = PrometheusSource("http://p", window=600, step=15, http=prom, discover=True, retries=0)
    w = asyncio.run(src.read(t0))
    assert w.nodes == ("n1",) and src.queries == QUERIES and "discovery" in src.errors
    _ = asyncio.run(src.read(t0 + 15))
    assert prom.discoveries == 2 and any(q.dialect for q in src.queries)


def test_clock_event_reasons_are_read_from_whichever_of_the_bitmask_names_and_counters_exist():
    legacy, new = c.DCGM_CLOCK_THROTTLE_REASONS.name, c.DCGM_CLOCK_EVENTS.name
    for names in ({legacy}, {new}, {c.dcgm_violation("thermal")}):
        (q,) = [q for q in dcgm.queries(present=frozenset(names)) if q.metric is c.GPU_THROTTLE]
        assert all(n in q.source for n in names) and q.name.endswith(":clock-event reasons")
        assert q.by[-1] == c.DCGM_CLOCK_EVENT_LABEL
        assert discover.parse(names).names == frozenset(names)  # discovery knows them
    assert not [q for q in dcgm.queries(present=frozenset({c.GPU_SM_CLOCK.dcgm[0].name}))
                if q.metric is c.GPU_THROTTLE]  # fmt: skip
    # the bitmask's bits are NVML's: HW thermal is 0x40
    src = dcgm.clock_reasons_source(frozenset({legacy}))
    assert f'({legacy} % 128 >= bool 64) == 1, "clock_event", "hw_thermal"' in src
