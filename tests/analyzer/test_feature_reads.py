"""The Prometheus source reads the rule engine's moved-counter features where they exist and
scans raw counters only elsewhere (issue 33): the findings are the same as a raw-only read,
cycle by cycle, on a small sharded fleet where one shard's rules stop halfway."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.sources.featureread import moved_exprs
from analyzer.sources.features import FEATURES, SHARD_LABEL, Feature, shard_of
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.queries import QUERIES
from exporter import catalog as c

from .fakeprom import FakeProm

STEP, WINDOW, T0 = 15.0, 600.0, 99_990.0
POINTS, SHARDS = 80, 2
NODES = ("n0", "n1", "n2", "n3", "n4", "n5")
STOPS_AT = 60  # the step from which shard 1's rule group no longer runs


def _fleet() -> FakeProm:
    """Six nodes of two GPUs on two shards: ECC single-bit errors climbing on one GPU, NVLink
    errors on one link and IB symbol errors on one port (no per-GPU or per-port sums served,
    so the analyzer's own moved checks find them), one counter that moves once and stops."""
    prom = FakeProm()
    for i in range(POINTS):
        t = T0 + STEP * i
        for n in NODES:
            shard = {SHARD_LABEL: str(shard_of(n, SHARDS))}
            for g in range(2):
                gl = {"node": n, "gpu": str(g), "uuid": f"U-{n}-{g}", **shard}
                prom.add(c.GPU_UP.name, {**gl, "reason": ""}, t, 1.0)
                prom.add(c.GPU_UTILIZATION.name, gl, t, 0.9)
                prom.add(c.GPU_ALLOCATION_INFO.name,
                         {**gl, "job_id": "7", "scheduler": "slurm"}, t, 1.0)  # fmt: skip
                sbe = 40.0 * max(i - 30, 0) if (n, g) == ("n1", 0) else (3.0 if i > 20 else 0.0)
                prom.add(c.GPU_ECC_ERRORS.name,
                         {**gl, "error_type": "corrected", "counter_type": "volatile"},
                         t, sbe)  # fmt: skip
                nvl = 5.0 * max(i - 35, 0) if (n, g) == ("n2", 1) else 0.0
                prom.add(c.NVLINK_ERRORS.name, {**gl, "link": "3", "error_type": "replay"}, t, nvl)
                prom.add(c.NVLINK_UP.name, {**gl, "link": "3"}, t, 1.0)
            pl = {"node": n, "device": "mlx5_0", "port": "1", **shard}
            prom.add(c.IB_PORT_STATE.name, pl, t, 4.0)
            sym = 50.0 * max(i - 40, 0) if n == "n5" else 0.0
            prom.add(c.IB_COUNTER.name, {**pl, "counter": "symbol_error"}, t, sym)
    return prom


def _record(prom: FakeProm) -> None:
    """What the rule engine records from the generated groups, shard by shard (the same
    expressions as alerts/features/node-shard-*.rules.yml, at this window)."""
    features = [f for f in FEATURES if f.kind in ("moved", "present")]
    assert all(f.span in (0.0, WINDOW) for f in features)
    for i in range(POINTS):
        t = T0 + STEP * i
        for shard in range(SHARDS):
            if shard == 1 and i >= STOPS_AT:
                continue
            for f in features:
                for labels, v in prom._vector(f.expr(shard), t).items():
                    prom.add(f.record, dict(labels), t, v)


def _findings(engine: Engine, w: Any) -> list[tuple[str, str, str, str]]:
    return sorted((f.node, f.subject, f.kind, f.action) for f in engine.cycle(w))


def test_findings_are_the_same_read_through_features_or_raw_while_a_shard_stops() -> None:
    prom = _fleet()
    _record(prom)
    kw: dict[str, Any] = {"window": WINDOW, "step": STEP, "http": prom, "lookback": STEP * POINTS}
    featured = PrometheusSource("http://fake", **kw)
    raw = PrometheusSource("http://fake", features=(), **kw)
    e_feat, e_raw = Engine(default_detectors()), Engine(default_detectors())
    seen: set[str] = set()
    ecc_scans: list[str] = []

    async def run() -> None:
        for at in range(41, POINTS):
            now = T0 + STEP * at + 6.0
            before = len(prom.calls)
            w_raw = await raw.read(now)
            mark = len(prom.calls)
            w_feat = await featured.read(now)
            assert _findings(e_feat, w_feat) == _findings(e_raw, w_raw), at
            seen.update(f.kind for f in e_raw.cycle(w_raw))
            assert before <= mark
            if at > 41:  # the featured source's raw scans of ECC counters after its cold cycle
                ecc_scans.extend(q for q in prom.calls[mark:]
                                 if f"changes({c.GPU_ECC_ERRORS.name}" in q)  # fmt: skip
            if at == STOPS_AT + 2:
                stopped = {n for n in NODES if shard_of(n, SHARDS) == 1}
                assert featured.covered == set(NODES) - stopped

    asyncio.run(run())
    assert {"nvlink_errors", "ib_errors", "sbe_rate_high"} <= seen, seen
    for f in FEATURES:  # every moved check was read from its feature
        if f.kind == "moved" and f.metric != c.IB_HW_COUNTER:
            assert any(f.record in q for q in prom.calls), f.record
    # while every shard's rules ran, no raw scan; after shard 1 stopped, only its nodes
    stopped = sorted(n for n in NODES if shard_of(n, SHARDS) == 1)
    assert ecc_scans, "shard 1's nodes were never scanned raw after its rules stopped"
    for q in ecc_scans:
        only = re.search(r'node=~"([^"]+)"', q)
        assert only is not None and only.group(1).split("|") == stopped, q


def test_without_feature_series_the_moved_checks_are_the_raw_scan_unchanged() -> None:
    (ecc,) = [q for q in QUERIES if q.name == c.GPU_ECC_ERRORS.name]
    feature = next(f for f in FEATURES if f.kind == "moved" and f.metric == c.GPU_ECC_ERRORS)
    assert moved_exprs(ecc, feature, [""], WINDOW, set(), {"a"}) == [ecc.moved_expr(WINDOW)]
    assert moved_exprs(ecc, None, [""], WINDOW, {"a"}, {"a"}) == [ecc.moved_expr(WINDOW)]
    # most nodes not covered: the plain scan, not an alternation of their names
    most = moved_exprs(ecc, feature, [""], WINDOW, {"a"}, {"a", "b", "c", "d"})
    assert most == [ecc.moved_expr(WINDOW)]


def test_covered_nodes_read_the_recorded_check_and_only_the_others_are_scanned() -> None:
    (ecc,) = [q for q in QUERIES if q.name == c.GPU_ECC_ERRORS.name]
    feature = Feature(c.GPU_ECC_ERRORS, "moved", ecc.labels, WINDOW)
    got = moved_exprs(ecc, feature, ['gpu=~".*[05]"'], WINDOW, {"a", "b"}, {"a", "b", "c.d"})
    assert got == [
        f'max by ({",".join(ecc.labels)}) ({feature.record}{{gpu=~".*[05]"}})',
        ecc.moved_expr(WINDOW, 'gpu=~".*[05]",node=~"c\\\\.d"'),
    ]
    assert moved_exprs(ecc, feature, [""], WINDOW, {"a"}, {"a"}) == [
        f"max by ({','.join(ecc.labels)}) ({feature.record})"
    ]
