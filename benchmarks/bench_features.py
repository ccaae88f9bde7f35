"""The feature rule groups' cost on a real Prometheus, per shard size (issue 33).

One shard's groups (alerts/features/, rendered for one shard: every loaded node is the
shard's) are evaluated as instant queries at the end of a simulated fleet's history (the TSDB
of :mod:`benchmarks.bench_analyzer_prometheus`, same cache) on the promtool/Prometheus first on
PATH: per shard size, the node-local group's and the domain group's evaluation time (the sum
of their rules' query times, best of 3), what a rule engine must finish within one 15 s
interval, the series they record against the raw series they read, and the analyzer's raw
moved-counter scans that the recorded ``moved`` features replace. Then the job statistics
stage over the loaded fleet (evaluated once for a fleet, whatever its shard count) and, for
comparison, the z-scores with the statistics computed in place, as every shard's domain group
did before that stage. ``BENCH_FEATURE_NODES``
picks shard sizes (default 64 and 256; quick: 64).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
from typing import Any

from analyzer.sources.features import FEATURES, Feature
from analyzer.sources.queries import QUERIES
from benchmarks.bench_analyzer_prometheus import STEP, WINDOW, _cached, _tsdb
from tests.realcomp import http_get, run_prometheus

REPEATS = 3


def _query(url: str, expr: str, at: float) -> tuple[float, int]:
    """Best-of wall time of an instant query, and its result's series count."""
    best, n = float("inf"), 0
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    for _ in range(REPEATS):
        t0 = time.perf_counter()
        body = json.loads(http_get(f"{url}/api/v1/query?{q}", timeout=300))
        best = min(best, time.perf_counter() - t0)
        if body.get("status") != "success":
            raise RuntimeError(f"{expr[:80]}: {body}")
        n = len(body["data"]["result"])
    return best, n


def _group(url: str, features: list[Feature], at: float) -> tuple[float, int]:
    seconds, series = 0.0, 0
    for f in features:
        s, n = _query(url, f.expr(None), at)
        seconds, series = seconds + s, series + n
    return seconds, series


def _stats(url: str, features: list[Feature], at: float) -> tuple[float, int]:
    """The job statistics stage (``Feature.job_stats``), once for the fleet."""
    seconds, series = 0.0, 0
    for f in features:
        for _, expr in f.job_stats:
            s, n = _query(url, expr, at)
            seconds, series = seconds + s, series + n
    return seconds, series


def _inline(f: Feature) -> str:
    """A z-score rule with the job statistics computed in place: the single-stage rule every
    shard evaluated before the statistics stage (each reading the whole fleet)."""
    expr = f.expr(None)
    for record, stat in f.job_stats:
        expr = expr.replace(record, f"({stat})")
    return expr


def run(quick: bool) -> list[dict[str, Any]]:
    sizes = os.environ.get("BENCH_FEATURE_NODES", "64" if quick else "64,256")
    steps = round(WINDOW / STEP) + 1 + 8  # the analyzer benchmark's history: a shared cache
    base = (time.time() // 7200) * 7200 - 6 * 3600
    node = [f for f in FEATURES if f.node_local]
    domain = [f for f in FEATURES if not f.node_local]
    moved = [q for q in QUERIES if q.moved_only and not q.dialect]
    rows: list[dict[str, Any]] = []
    per_node: dict[int, float] = {}
    for nodes in [int(x) for x in sizes.split(",")]:
        hit = _cached(nodes)
        data, t0 = hit if hit else (_tsdb(nodes, base, steps), base)
        at = t0 + STEP * (steps - 1)
        with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n",
                            data_dir=data) as p:  # fmt: skip
            _query(p.url, "up", at)  # warm the index
            node_s, node_n = _group(p.url, node, at)
            # the recorded statistics are absent from this TSDB: the domain rules read the
            # shard's GPUs and allocations as they would, less the last join (a series a job)
            dom_s, _ = _group(p.url, domain, at)
            stats_s, stats_n = _stats(p.url, domain, at)
            inline_s = sum(_query(p.url, _inline(f), at)[0] for f in domain)
            raw_s = sum(_query(p.url, q.moved_expr(WINDOW), at)[0] for q in moved)
            raw_series = sum(
                float(r["value"][1])
                for r in json.loads(http_get(f"{p.url}/api/v1/query?" + urllib.parse.urlencode(
                    {"query": 'count({__name__=~"gpuwarden_.+"})', "time": f"{at:.3f}"}),
                    timeout=300,
                ))["data"]["result"]
            )  # fmt: skip
        per_node[nodes] = node_s / nodes
        rows += [
            {"name": f"features_{nodes}_node_group", "value": round(node_s, 3), "unit": "s",
             "note": f"{len(node)} node-local rules, one shard of {nodes} nodes; "
                     f"{node_n} series recorded from {raw_series:.0f} raw"},
            {"name": f"features_{nodes}_domain_group", "value": round(dom_s, 3), "unit": "s",
             "note": f"{len(domain)} job z-score rules of a {nodes}-node shard against the "
                     "recorded job statistics"},
            {"name": f"features_{nodes}_job_statistics", "value": round(stats_s, 3), "unit": "s",
             "note": f"{2 * len(domain)} median and MAD rules over a {nodes}-node fleet, once; "
                     f"{stats_n} series (one a job and signal)"},
            {"name": f"features_{nodes}_domain_single_stage", "value": round(inline_s, 3),
             "unit": "s", "note": f"the z-scores with the statistics in place (every shard read "
                                  f"the fleet); {inline_s / max(stats_s, 1e-9):.2f}x the stage"},
            {"name": f"features_{nodes}_raw_moved_scans", "value": round(raw_s, 3), "unit": "s",
             "note": f"the analyzer's {len(moved)} raw changes() scans the moved features replace"},
            {"name": f"features_{nodes}_interval_share", "value": round((node_s + dom_s) / STEP, 3),
             "unit": "x", "note": "a shard's two groups' time / the 15 s evaluation interval"},
        ]  # fmt: skip
    if len(per_node) > 1:
        lo, hi = min(per_node), max(per_node)
        rows.append({"name": "features_node_group_per_node_growth",
                     "value": round(per_node[hi] / max(per_node[lo], 1e-12), 2), "unit": "x",
                     "note": f"{lo} -> {hi} nodes per shard: "
                             f"{per_node[lo] * 1e3:.3f} -> {per_node[hi] * 1e3:.3f} ms per node"})  # fmt: skip
    return rows
