"""A fail-slow node is visible whatever it runs: under load, clocks below its model's peers
with no clock-event reason are evidence without any job to compare with (issue 23: a
straggler injected at run time on a node outside a multi-node job was never reported)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.straggler import StragglerDetector
from analyzer.engine import Engine
from analyzer.sources.frames import FrameBuffer
from analyzer.window import THROTTLE_REASONS
from exporter import catalog as c
from simulator import Fleet
from simulator.topology import port_name

from .synth import healthy, keys, window

INJECT_AT = 300.0


def _served(fleet: Fleet, until: float, inject: list[tuple[str, str]]) -> dict[str, float]:
    """Run the full detector set every 15 s scrape; per (node, subject) straggler finding,
    the seconds from the injection to its first drain recommendation."""
    buf = FrameBuffer(fleet.nodes, ports=[port_name(p) for p in range(8)], sku=fleet.models)
    engine, t, first = Engine(default_detectors()), 0.0, {}
    while t < until:
        t += 15.0
        if t == INJECT_AT:  # POST /inject at run time: onset now
            for node, target in inject:
                fleet.inject("straggler", node, target, {"slowdown": 0.10})
        buf.push(fleet.step(t), fleet.jobs_at(t))
        for f in engine.cycle(buf.window()):
            if f.kind == "straggler" and f.action == "drain":
                first.setdefault(f"{f.node}/{f.subject}", t - INJECT_AT)
    return first


def test_the_issue_fleet_reports_a_slow_node_and_a_slow_gpu_outside_any_multi_node_job():
    fleet = Fleet(24, 91)  # `gpuwarden simulate --nodes 24 --seed 91`
    jobs = fleet.jobs_at(0.0)
    alone = sorted(ms[0] for ms in jobs.values() if len(ms) == 1)
    assert len(alone) >= 2, "cause: nodes running single-node jobs, no job peers"
    node, gpu_node = fleet.nodes[alone[0]], fleet.nodes[alone[1]]
    first = _served(fleet, INJECT_AT + 200, [(node, "node"), (gpu_node, "gpu5")])
    assert set(first) == {f"{node}/node", f"{gpu_node}/gpu=5"}
    assert max(first.values()) <= 200


def test_a_healthy_fleet_of_single_node_jobs_and_idle_nodes_has_no_straggler():
    assert _served(Fleet(24, 91), 900.0, []) == {}


def test_a_slow_node_without_any_job_map_is_found_from_its_models_busy_peers():
    d = healthy(seed=4, job=False)
    d["metrics"][c.GPU_SM_CLOCK.name][-8:, 3, :] *= 0.9
    found = StragglerDetector().detect(window(d))
    assert keys(found) == {("node-03", "node", "straggler")}
    assert found[0].evidence["job_peers"] == 0.0 and "no clock-event reason" in found[0].summary


def test_one_slow_gpu_is_the_subject_not_its_node():
    d = healthy(seed=5, job=False)
    d["metrics"][c.GPU_SM_CLOCK.name][-12:, 2, 6] *= 0.92
    assert keys(StragglerDetector().detect(window(d))) == {("node-02", "gpu=6", "straggler")}


def test_clocks_held_down_by_a_throttle_reason_are_the_throttling_detectors_not_a_straggler():
    d = healthy(seed=6, job=False)
    m = d["metrics"]
    m[c.GPU_SM_CLOCK.name][-12:, 1, :] *= 0.8
    m[c.GPU_THROTTLE.name][-12:, 1, :, THROTTLE_REASONS.index("hw_thermal_slowdown")] = 1.0
    assert StragglerDetector().detect(window(d)) == []


def test_an_idle_node_shows_nothing_its_clock_is_the_idle_clock_whatever_its_health():
    d = healthy(seed=7, job=False)
    m = d["metrics"]
    m[c.GPU_UTILIZATION.name][:, 4, :] = 0.0
    m[c.GPU_SM_CLOCK.name][:, 4, :] = 345e6
    assert StragglerDetector().detect(window(d)) == []


def test_with_too_few_peers_of_its_model_the_specified_clock_is_the_reference_and_it_only_notifies():
    d = healthy(nodes=2, seed=8, job=False)
    d["metrics"][c.GPU_SM_CLOCK.name][:, 0, :] *= 0.9
    w = replace(window(d), sku=("h100-sxm", "h100-sxm"))
    det = StragglerDetector()
    for _ in range(3):  # persistent: still no drain on a specification alone
        found = det.detect(w)
    assert keys(found) == {("node-00", "node", "straggler")}
    assert found[0].action == "notify" and found[0].evidence["from_spec"] == 1.0


def test_a_node_judged_within_its_job_is_not_judged_twice():
    d = healthy(seed=9)  # one job on every node
    d["metrics"][c.GPU_SM_CLOCK.name][-12:, 5, :] *= 0.9
    found = StragglerDetector().detect(window(d))
    assert [(f.node, f.summary.startswith("job 42")) for f in found] == [("node-05", True)]


def test_a_persistent_fail_slow_node_earns_a_drain_on_the_second_cycle():
    d = healthy(seed=10, job=False)
    d["metrics"][c.GPU_SM_CLOCK.name][-12:, 0, :] *= 0.9
    det, w = StragglerDetector(), window(d)
    assert [f.action for f in det.detect(w)] == ["notify"]
    assert [f.action for f in det.detect(w)] == ["drain"]
    assert np.isclose(det.detect(w)[0].evidence["clock_below"], 0.1)


def test_a_lightly_loaded_gpu_at_a_lower_clock_is_not_judged_light_work_may_not_boost():
    d = healthy(seed=12, job=False)
    m = d["metrics"]
    m[c.GPU_UTILIZATION.name][:, 6, :] = 0.12
    m[c.GPU_SM_CLOCK.name][:, 6, :] *= 0.8
    assert StragglerDetector().detect(window(d)) == []
