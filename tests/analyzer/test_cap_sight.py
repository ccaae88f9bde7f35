"""An administrator's cap is not a fault (issue 23): on a dcgm-exporter fleet with its default
counters there is neither the power limit nor clock-event reasons, so a GPU capped below its
peers looks like a slow part; the detectors that read clocks or power below the peers' then
only notify, and say why (analyzer.detectors.capsight)."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detectors import capsight, default_detectors
from analyzer.detectors.peer import PeerDetector
from analyzer.detectors.straggler import StragglerDetector
from analyzer.engine import Engine
from analyzer.sources.dialects import DCGM, dcgm
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog as c

T, N, G, CAPPED = 41, 8, 8, 3
# the fields dcgm-exporter's default-counters.csv enables that these detectors read
READ = (c.GPU_UTILIZATION, c.GPU_SM_CLOCK, c.GPU_POWER, c.GPU_TEMPERATURE)


def _dcgm_series(seed: int) -> dict[str, np.ndarray]:
    """dcgm-exporter's series (its names and units: %, MHz, W, C) of a busy H100 fleet whose
    node CAPPED an administrator capped at 450 W: lower power, lower SM clock, same work."""
    rng = np.random.default_rng(seed)
    shape = (T, N, G)
    util = np.clip(95 + rng.normal(0, 1, shape), 0, 100)
    power = 600 + rng.normal(0, 4, shape)
    clock = np.full(shape, 1980.0)
    power[:, CAPPED], clock[:, CAPPED] = 450 + rng.normal(0, 4, (T, G)), 1710.0
    name = {m: m.dcgm[0].name for m in READ}
    return {
        name[c.GPU_UTILIZATION]: util,
        name[c.GPU_SM_CLOCK]: clock,
        name[c.GPU_POWER]: power,
        name[c.GPU_TEMPERATURE]: np.round(30 + 0.07 * power),
    }


def _read(series: dict[str, np.ndarray], reasons: bool = False, job: bool = False) -> Window:
    """The window the dcgm reader makes of them: the catalogue's names and units (its queries'
    ``divide``); ``reasons``: the clock-event reasons exported too (none active); ``job``: every
    node in one job (dcgm-exporter's ``hpc_job`` label)."""
    metrics = {}
    for q in dcgm.queries():
        if q.source in series and q.metric.name not in metrics:
            metrics[q.metric.name] = series[q.source] / q.divide
    assert set(metrics) == {m.name for m in READ}
    metrics[c.GPU_UP.name] = np.ones((T, N, G))
    if reasons:
        metrics[c.GPU_THROTTLE.name] = np.zeros((T, N, G, len(THROTTLE_REASONS)))
    return Window(t=10_000.0 + 15.0 * np.arange(T), nodes=tuple(f"gpu-{i:02d}" for i in range(N)),
                  metrics=metrics, sku=("h100-sxm",) * N, jobs={"7": tuple(range(N))} if job else {},
                  dialect_of=dict.fromkeys(range(N), DCGM))  # fmt: skip


def test_default_dcgm_counters_give_no_sight_of_a_cap_and_reasons_or_a_limit_give_it():
    series = _dcgm_series(seed=1)
    assert capsight.blind(_read(series)).all()
    assert not capsight.blind(_read(series, reasons=True)).any()
    w = _read(series)
    limit = dict(w.metrics, **{c.GPU_POWER_LIMIT.name: np.full((T, N, G), np.nan)})
    limit[c.GPU_POWER_LIMIT.name][:, 0] = 700.0
    got = capsight.blind(Window(t=w.t, nodes=w.nodes, metrics=limit))
    assert got.tolist() == [False] + [True] * (N - 1)  # all-NaN on a node: no sight there


def test_dcgm_nodes_without_clock_event_series_had_none_when_the_fleet_exports_them():
    w = _read(_dcgm_series(seed=1))  # DCGM_EXP_CLOCK_EVENTS_COUNT: a series per reason reported
    reasons = np.full((T, N, G, len(THROTTLE_REASONS)), np.nan)
    reasons[:, 0, 0, THROTTLE_REASONS.index("sw_power_cap")] = 1.0
    ev = dict(w.metrics, **{c.GPU_THROTTLE.name: reasons})
    got = capsight.blind(Window(t=w.t, nodes=w.nodes, metrics=ev, dialect_of=w.dialect_of))
    assert not got.any()
    native = capsight.blind(Window(t=w.t, nodes=w.nodes, metrics=ev))  # gpuwarden: every reason
    assert native.tolist() == [False] + [True] * (N - 1)


@pytest.mark.parametrize("job", [False, True], ids=["alone", "in-a-job"])
def test_a_capped_gpu_under_load_without_power_limit_or_reasons_is_never_drained(job):
    w, engine = _read(_dcgm_series(seed=2), job=job), Engine(default_detectors())
    found = [f for _ in range(4) for f in engine.cycle(w)]
    capped = [f for f in found if f.node == f"gpu-{CAPPED:02d}"]
    assert {f.kind for f in capped} >= {"straggler"}
    assert not [f for f in found if f.action in ("drain", "cordon")]
    for f in capped:
        assert f.evidence[capsight.EVIDENCE] == 1.0 and capsight.NOTE in f.summary


def test_the_peer_detector_only_notifies_low_clocks_and_power_it_cannot_tell_from_a_cap():
    det, w = PeerDetector(), _read(_dcgm_series(seed=3), job=True)
    found = det.detect(w)
    assert {(f.node, f.kind) for f in found} == {(f"gpu-{CAPPED:02d}", "faulty_machine")}
    assert {f.action for f in found} == {"notify"} and capsight.NOTE in found[0].summary
    with_reasons = det.detect(_read(_dcgm_series(seed=3), reasons=True, job=True))
    assert {f.action for f in with_reasons} == {"drain"}  # as before: no cap in the reasons


def test_the_same_gpu_with_reasons_exported_and_none_active_is_a_fail_slow_drain_as_before():
    det, w = StragglerDetector(), _read(_dcgm_series(seed=4), reasons=True)
    assert [f.action for f in det.detect(w)] == ["notify"]
    found = det.detect(w)
    assert [(f.node, f.action) for f in found] == [(f"gpu-{CAPPED:02d}", "drain")]
    assert capsight.EVIDENCE not in found[0].evidence
    assert "no clock-event reason" in found[0].summary


def test_a_straggler_held_down_by_a_thermal_reason_says_so():
    # dcgm's reasons bitmask read (analyzer.sources.dialects.dcgm): the slow node's GPUs hold
    # HW thermal slowdown; its straggler finding names what holds its clocks down
    w = _read(_dcgm_series(seed=5), reasons=True, job=True)
    reasons = w.metrics[c.GPU_THROTTLE.name]
    reasons[:, CAPPED, :, THROTTLE_REASONS.index("hw_thermal_slowdown")] = 1.0
    reasons[:, :, :, THROTTLE_REASONS.index("gpu_idle")] = 1.0  # not a reason: never named
    det = StragglerDetector()
    found = [f for _ in range(2) for f in det.detect(w) if f.kind == "straggler"]
    assert found and {f.node for f in found} == {f"gpu-{CAPPED:02d}"}
    assert "held down by hw_thermal_slowdown" in found[-1].summary
    assert "gpu_idle" not in found[-1].summary
