"""Incremental reads equal full-window reads (random gaps, resets, late series, gaps between
cycles); a failed query degrades the cycle instead of aborting it."""

from __future__ import annotations

import asyncio
import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources import SourceError
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.queries import QUERIES
from exporter import catalog as c

from .fakeprom import FakeProm

STEP, WINDOW, T0 = 15.0, 150.0, 99_990.0  # T0 on the 15 s grid
NODES = ("n0", "n1", "n2")


def _fleet(draw: st.DrawFn, points: int) -> FakeProm:
    """Random history: per node random missed scrapes (every series of the node vanishes);
    an XID counter that starts late and resets; NVLink errors that start to move late; an
    NVLink down for a while; the exporter's per-GPU NVLink sums served by some nodes, at some
    scrapes (an older exporter, a link that could not be read)."""
    prom = FakeProm()
    for n in NODES:
        seen = draw(st.lists(st.booleans(), min_size=points, max_size=points))
        xid_from = draw(st.integers(0, points))
        reset_at = draw(st.integers(0, points * 2))
        bumps = draw(st.lists(st.integers(0, 2), min_size=points, max_size=points))
        move_from = draw(st.integers(0, points * 2))
        down = range(draw(st.integers(0, points * 2)), draw(st.integers(0, points * 2)))
        sums = draw(st.sampled_from(["always", "never", "sometimes"]))
        sums_at = draw(st.lists(st.booleans(), min_size=points, max_size=points))
        xid = nvl = 0.0
        for i in range(points):
            if i == reset_at:
                xid = 0.0
            xid += bumps[i]
            if i >= move_from:
                nvl += bumps[i]
            if not seen[i] and i % 7:  # a missed scrape (never two neighbours on 7k)
                continue
            t = T0 + STEP * i
            for g in range(2):
                gl = {"node": n, "gpu": str(g), "uuid": f"U-{n}-{g}"}
                prom.add(c.GPU_UP.name, {**gl, "reason": ""}, t, 1.0)
                prom.add(c.GPU_UTILIZATION.name, gl, t, 0.5 + 0.01 * (i % 5))
                prom.add(
                    c.GPU_ALLOCATION_INFO.name, {**gl, "job_id": "7", "scheduler": "slurm"}, t, 1.0
                )
                prom.add(c.GPU_THROTTLE.name, {**gl, "reason": "hw_slowdown"}, t, float(i % 9 == 0))
                prom.add(c.NVLINK_ERRORS.name, {**gl, "link": "3", "error_type": "replay"}, t, nvl)
                link_up = 0.0 if (g == 1 and i in down) else 1.0
                prom.add(c.NVLINK_UP.name, {**gl, "link": "3"}, t, link_up)
                prom.add(c.NVLINK_UP.name, {**gl, "link": "4"}, t, 1.0)
                if sums == "always" or (sums == "sometimes" and sums_at[i]):
                    prom.add(c.GPU_NVLINK_ERRORS.name, gl, t, nvl)
                    prom.add(c.GPU_NVLINK_DOWN.name, gl, t, 1.0 - link_up)
            for p in range(2):  # IB: port mlx5_1 counts symbol errors once NVLink moves too
                pl = {"node": n, "device": f"mlx5_{p}", "port": "1"}
                prom.add(c.IB_PORT_STATE.name, pl, t, 4.0)
                sym = nvl if p == 1 else 0.0
                prom.add(c.IB_COUNTER.name, {**pl, "counter": "symbol_error"}, t, sym)
                prom.add(c.IB_HW_COUNTER.name, {**pl, "counter": "rnr_nak_retry_err"}, t, 0.0)
                if sums == "always" or (sums == "sometimes" and sums_at[i]):
                    prom.add(c.IB_PORT_ERRORS.name, pl, t, sym)
            if i >= xid_from:
                prom.add(
                    c.GPU_XID_ERRORS.name, {"node": n, "gpu": "1", "uuid": "x", "xid": "79"}, t, xid
                )
    return prom


def _same(a, b) -> None:
    assert a.nodes == b.nodes and np.array_equal(a.t, b.t)
    assert set(a.metrics) == set(b.metrics) and set(a.ib_counters) == set(b.ib_counters)
    for k in a.metrics:
        assert np.array_equal(a.metrics[k], b.metrics[k], equal_nan=True), k
    assert [(e.t, e.node, e.gpu, e.xid, e.count) for e in a.xids] == [
        (e.t, e.node, e.gpu, e.xid, e.count) for e in b.xids
    ]
    assert dict(a.jobs) == dict(b.jobs)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
)
@given(st.data())
def test_incremental_reads_equal_a_full_window_read_over_random_gaps_resets_and_late_series(data):
    points = 50
    prom = _fleet(data.draw, points)
    # random read times, sometimes several steps apart, sometimes more than a window apart
    gaps = data.draw(st.lists(st.sampled_from([1, 1, 1, 2, 3, 12]), min_size=3, max_size=12))
    # every GPU checked for moved counters each cycle (sharded checks keep rows a cycle longer)
    queries = [dataclasses.replace(q, moved_shards=1) for q in QUERIES]
    kw = {
        "window": WINDOW,
        "step": STEP,
        "lookback": STEP * points,
        "parallel": 3,
        "queries": queries,
    }
    inc = PrometheusSource("http://fake", http=prom, **kw)
    at = 11

    async def run() -> None:
        nonlocal at
        for g in gaps:
            at += g
            if at >= points:
                return
            now = T0 + STEP * at + 3.0  # a few seconds after the grid point
            w_inc = await inc.read(now)
            w_full = await PrometheusSource("http://fake", http=prom, **kw).read(now)
            _same(w_inc, w_full)
            assert w_full.nodes  # the reads saw data (the grid is the data's grid)

    asyncio.run(run())


def test_sharded_moved_checks_find_every_moving_nvlink_within_the_shard_count():
    prom = _fleet(_fixed, 40)  # NVLink errors move on every node from step 5
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom)
    full = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom)
    for k in range(20, 24):
        w = asyncio.run(src.read(T0 + STEP * k + 6))
    w_full = asyncio.run(full.read(T0 + STEP * 23 + 6))
    err = c.NVLINK_ERRORS.name
    assert np.array_equal(w.metrics[err], w_full.metrics[err], equal_nan=True)


class _Spy:
    def __init__(self, inner: FakeProm) -> None:
        self.inner, self.forms = inner, []

    async def post(self, path, form):
        self.forms.append((path, dict(form)))
        return await self.inner.post(path, form)


def test_an_incremental_cycle_fetches_only_the_newest_points():
    prom = _Spy(_fleet(_fixed, 40))
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom)
    asyncio.run(src.read(T0 + STEP * 20))
    cold = src.stats.cycle_samples
    prom.forms.clear()
    asyncio.run(src.read(T0 + STEP * 21))
    assert 0 < src.stats.cycle_samples < cold / 4
    ranges = [f for path, f in prom.forms if path.endswith("query_range")]
    # one step later, every range read asks for the one new grid point, none already read
    assert ranges and all(f["start"] == f["end"] == f"{T0 + STEP * 20:.3f}" for f in ranges)


def _fixed(strategy):
    """A deterministic draw: every scrape seen, the smallest values."""
    if isinstance(strategy, st.SearchStrategy) and "booleans" in repr(strategy):
        return [True] * 40
    if "lists" in repr(strategy):
        return [1] * 40
    return 5


def test_a_failed_query_yields_a_degraded_cycle_that_says_what_is_missing():
    prom = _fleet(_fixed, 40)
    prom.fail = {c.GPU_UTILIZATION.name}
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom, retries=0)
    w = asyncio.run(src.read(T0 + STEP * 30))
    assert w.missing == (c.GPU_UTILIZATION.name,)
    assert w.get(c.GPU_UTILIZATION) is None and w.get(c.GPU_UP) is not None
    assert Engine(default_detectors()).cycle(w) is not None
    assert src.stats.failures == {c.GPU_UTILIZATION.name: 1.0}


def test_every_query_failing_is_a_source_error_not_an_empty_window():
    prom = _fleet(_fixed, 40)
    prom.fail = {q.name for q in PrometheusSource("http://x").queries}
    with pytest.raises(SourceError, match="every query failed"):
        asyncio.run(PrometheusSource("http://fake", http=prom, retries=0).read(T0 + 450))


def test_an_answer_with_warnings_is_read_as_it_is_and_counted_per_query():
    """Thanos Query answers ``success`` with ``warnings`` when a store is unreachable (its
    partial response, tests/e2e/test_thanos_query.py): the data is kept and the query counted."""
    from analyzer.output import render_metrics

    whole = asyncio.run(
        PrometheusSource("http://fake", window=WINDOW, step=STEP, http=_fleet(_fixed, 40),
                         retries=0).read(T0 + STEP * 30)
    )  # fmt: skip
    prom = _fleet(_fixed, 40)
    prom.warn = {c.GPU_UTILIZATION.name}
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom, retries=0)
    w = asyncio.run(src.read(T0 + STEP * 30))
    assert not w.missing and w.get(c.GPU_UTILIZATION) is not None
    assert np.array_equal(w.get(c.GPU_UTILIZATION), whole.get(c.GPU_UTILIZATION), equal_nan=True)
    assert src.stats.warnings == {c.GPU_UTILIZATION.name: 1.0}
    text = render_metrics([], Engine(default_detectors()).stats, {}, src.stats)
    assert f'{c.ANALYZER_QUERY_WARNINGS.name}{{query="{c.GPU_UTILIZATION.name}"}} 1.0' in text


def test_a_degraded_cycle_is_reported_in_findings_json_and_the_read_metrics():
    from analyzer.output import findings_json, render_metrics
    from analyzer.service import AnalyzerService

    prom = _fleet(_fixed, 40)
    prom.fail = {c.NVLINK_ERRORS.name}
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom, retries=1)
    service = AnalyzerService(src, Engine(default_detectors()), STEP)
    asyncio.run(service.run_cycle(T0 + STEP * 30))
    assert service.last_ok is not None
    assert findings_json([], 0.0, service.missing)["missing_data"] == [c.NVLINK_ERRORS.name]
    text = render_metrics([], service.engine.stats, service.source_errors, src.stats)
    assert f'{c.ANALYZER_QUERY_FAILURES.name}{{query="{c.NVLINK_ERRORS.name}"}} 1.0' in text
    assert f"{c.ANALYZER_READ_BYTES.name} " in text


def test_the_prometheus_queries_cover_exactly_the_metrics_the_other_sources_read():
    from analyzer.sources.build import QUERIED

    assert {q.metric for q in QUERIES} == set(QUERIED)


def test_rows_of_many_nodes_on_one_port_counter_are_one_exact_selector_not_one_per_node():
    from analyzer.sources.queries import rows_matchers

    labels = ("node", "device", "port", "counter")
    rows = [(n, "mlx5_1", "1", "symbol_error") for n in ("a.1", "b", "c")]
    assert rows_matchers(labels, rows) == [
        'node=~"a\\\\.1|b|c",device="mlx5_1",port="1",counter="symbol_error"'
    ]
    few = [("a", "mlx5_1", "1", "symbol_error"), ("a", "mlx5_2", "1", "link_downed")]
    assert rows_matchers(labels, few) == [
        'node="a",device=~"mlx5_1|mlx5_2",port="1",counter=~"link_downed|symbol_error"'
    ]


def _links(sums: dict[str, bool], points: int = 30) -> FakeProm:
    """Two nodes x 2 GPUs x 2 links; link 1 of n0 GPU 1 and of n1 GPU 0 count replays from
    step 10; ``sums``: which nodes serve the exporter's per-GPU NVLink sums."""
    prom = FakeProm()
    for i in range(points):
        t = T0 + STEP * i
        for n in ("n0", "n1"):
            for g in range(2):
                gl = {"node": n, "gpu": str(g), "uuid": f"U-{n}-{g}"}
                prom.add(c.GPU_UP.name, {**gl, "reason": ""}, t, 1.0)
                moving = (n, g) in (("n0", 1), ("n1", 0))
                for link in range(2):
                    v = float(max(i - 10, 0)) if moving and link == 1 else 0.0
                    prom.add(
                        c.NVLINK_ERRORS.name,
                        {**gl, "link": str(link), "error_type": "replay"},
                        t,
                        v,
                    )
                    prom.add(c.NVLINK_UP.name, {**gl, "link": str(link)}, t, 1.0)
                if sums[n]:
                    prom.add(
                        c.GPU_NVLINK_ERRORS.name, gl, t, float(max(i - 10, 0)) if moving else 0.0
                    )
                    prom.add(c.GPU_NVLINK_DOWN.name, gl, t, 0.0)
    return prom


def test_with_the_per_gpu_sums_served_only_the_moving_gpus_links_are_read():
    prom = _links({"n0": True, "n1": True})
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom)
    for k in (20, 21):
        prom.calls.clear()
        w = asyncio.run(src.read(T0 + STEP * k + 6))
    per_link = [
        q for q in prom.calls if c.NVLINK_ERRORS.name + "{" in q or c.NVLINK_ERRORS.name + "[" in q
    ]
    # every per-link read (moved check, points) names the two moving GPUs, never a whole shard
    assert per_link and any("changes(" + c.NVLINK_ERRORS.name in q for q in per_link)
    assert all('node="n0",gpu="1"' in q or 'node="n1",gpu="0"' in q for q in per_link), per_link
    assert not any('gpu=~".*[' in q for q in prom.calls)
    assert not any(c.NVLINK_UP.name + "{" in q for q in prom.calls)  # no link is down anywhere
    err = w.metrics[c.NVLINK_ERRORS.name]  # (T, node, gpu, link, type)
    assert err[-1, 0, 1, 1, 2] == 11 and err[-1, 1, 0, 1, 2] == 11
    full = asyncio.run(
        PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom).read(
            T0 + STEP * 21 + 6
        )
    )
    assert np.array_equal(err, full.metrics[c.NVLINK_ERRORS.name], equal_nan=True)


def test_a_node_without_the_per_gpu_sums_is_still_read_link_by_link():
    prom = _links({"n0": True, "n1": False})
    src = PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom)
    w = asyncio.run(src.read(T0 + STEP * 20 + 6))
    assert any(
        f'changes({c.NVLINK_ERRORS.name}{{gpu=~".*[05]",node="n1",gpu=~"0|1"}}' in q
        for q in prom.calls
    )
    err = w.metrics[c.NVLINK_ERRORS.name]
    assert err[-1, 0, 1, 1, 2] == 10 and err[-1, 1, 0, 1, 2] == 10  # both moving links found


def test_a_link_down_only_while_the_exporter_withheld_its_gpu_sum_is_still_read():
    """The exporter withholds a GPU's links-down sum at a scrape where a link state could not be
    read; a link that was down exactly then is read link by link, never hidden by the gate."""
    prom = FakeProm()
    for i in range(30):
        t = T0 + STEP * i
        for g in range(2):
            gl = {"node": "n0", "gpu": str(g), "uuid": f"U-{g}"}
            prom.add(c.GPU_UP.name, {**gl, "reason": ""}, t, 1.0)
            down = g == 0 and 10 <= i <= 12
            prom.add(c.NVLINK_UP.name, {**gl, "link": "1"}, t, 0.0 if down else 1.0)
            if not down:  # the sum is withheld at those scrapes: link 2 could not be read
                prom.add(c.NVLINK_UP.name, {**gl, "link": "2"}, t, 1.0)
                prom.add(c.GPU_NVLINK_DOWN.name, gl, t, 0.0)
    w = asyncio.run(
        PrometheusSource("http://fake", window=WINDOW, step=STEP, http=prom).read(
            T0 + STEP * 14 + 6
        )
    )
    up = w.metrics[c.NVLINK_UP.name]  # (T, node, gpu, link)
    t10 = list(w.t).index(T0 + STEP * 10)
    assert up[t10, 0, 0, 1] == 0.0 and up[t10 - 1, 0, 0, 1] == 1.0
