"""Peer anomaly and stragglers: hardware signatures found, workload left alone."""

import numpy as np

from analyzer.detectors.peer import PeerDetector
from analyzer.detectors.straggler import StragglerDetector
from exporter import catalog as c

from .synth import healthy, keys, window


def test_gpu_with_low_clocks_and_heat_is_a_faulty_machine_finding():
    d = healthy(nodes=8)
    d["metrics"][c.GPU_SM_CLOCK.name][-10:, 3, 6] = 1500e6
    d["metrics"][c.GPU_TEMPERATURE.name][-10:, 3, 6] += 20
    out = PeerDetector().detect(window(d))
    assert keys(out) == {("node-03", "gpu=6", "faulty_machine")}
    assert out[0].action == "drain"


def test_busier_gpus_with_normal_clocks_are_workload_not_a_fault():
    d = healthy(nodes=8)
    d["metrics"][c.GPU_UTILIZATION.name][:, 2:4] = 0.97
    d["metrics"][c.GPU_POWER.name][:, 2:4] += 100
    d["metrics"][c.GPU_TEMPERATURE.name][:, 2:4] += 8
    assert PeerDetector().detect(window(d)) == []


def test_a_node_that_just_left_its_job_is_not_compared_while_it_cools():
    d = healthy(nodes=8)
    d["metrics"][c.GPU_UTILIZATION.name][-4:, 5] = 0.0
    d["metrics"][c.GPU_SM_CLOCK.name][-4:, 5] = 345e6
    assert PeerDetector().detect(window(d)) == []


def test_without_the_continuity_gate_a_single_sample_spike_is_enough():
    d = healthy(nodes=8)
    d["metrics"][c.GPU_SM_CLOCK.name][-1, 1, 1] = 1000e6
    assert PeerDetector().detect(window(d)) == []
    assert keys(PeerDetector(continuity=False).detect(window(d))) == {
        ("node-01", "gpu=1", "faulty_machine")
    }


def test_isolation_forest_keeps_only_the_most_anomalous_nodes_when_many_deviate():
    d = healthy(nodes=16)
    for n, drop in ((1, 300e6), (4, 500e6), (9, 900e6)):
        d["metrics"][c.GPU_SM_CLOCK.name][-8:, n, 0] = 1980e6 - drop
    out = PeerDetector(max_candidates=2).detect(window(d))
    assert {f.node for f in out} == {"node-04", "node-09"}


def _slow(d, node, gpus, slow):
    u = d["metrics"][c.GPU_UTILIZATION.name]
    u[:, node, gpus] += 0.8 * slow
    d["metrics"][c.GPU_SM_CLOCK.name][:, node, gpus] *= 1 - slow


def test_one_slow_node_is_the_straggler_and_is_drained_once_persistent():
    d = healthy(nodes=16, seed=2)
    _slow(d, 7, slice(None), 0.05)
    det = StragglerDetector()
    first = det.detect(window(d))
    assert keys(first) == {("node-07", "node", "straggler")} and first[0].action == "notify"
    second = det.detect(window(d))
    assert second[0].action == "drain" and second[0].evidence["clock_deficit"] == 1.0


def test_one_slow_gpu_is_localised_to_that_gpu():
    d = healthy(nodes=16, seed=3)
    _slow(d, 11, 4, 0.08)
    out = StragglerDetector().detect(window(d))
    assert keys(out) == {("node-11", "gpu=4", "straggler")}


def test_a_slow_pipeline_stage_is_workload_imbalance_that_never_drains():
    d = healthy(nodes=16, seed=4)
    d["metrics"][c.GPU_UTILIZATION.name][:, 4:8] += 0.1
    det = StragglerDetector()
    for _ in range(3):
        out = det.detect(window(d))
    assert [(f.kind, f.action, f.subject) for f in out] == [
        ("workload_imbalance", "notify", "job=42")
    ]


def test_a_busy_node_at_normal_clocks_is_reported_but_not_drained():
    d = healthy(nodes=16, seed=5)
    d["metrics"][c.GPU_UTILIZATION.name][:, 3] += 0.05
    det = StragglerDetector()
    for _ in range(4):
        out = det.detect(window(d))
    assert keys(out) == {("node-03", "node", "straggler")} and out[0].action == "notify"


def test_idle_fleet_and_nan_utilisation_give_no_straggler():
    d = healthy(nodes=8, busy=False)
    assert StragglerDetector().detect(window(d)) == []
    d = healthy(nodes=8)
    d["metrics"][c.GPU_UTILIZATION.name][:] = np.nan
    assert StragglerDetector().detect(window(d)) == []


def test_scrape_gaps_do_not_hide_a_straggler_or_a_faulty_gpu():
    d = healthy(nodes=16, seed=6)
    _slow(d, 9, slice(None), 0.08)
    d["metrics"][c.GPU_TEMPERATURE.name][-10:, 2, 1] += 25
    rng = np.random.default_rng(6)
    for a in d["metrics"].values():
        a[rng.random(a.shape) < 0.3] = np.nan
    assert ("node-09", "node", "straggler") in keys(StragglerDetector().detect(window(d)))
    assert ("node-02", "gpu=1", "faulty_machine") in keys(PeerDetector().detect(window(d)))


def test_a_node_that_straggled_in_an_earlier_job_is_cordoned_not_drained_without_slow_clocks():
    d = healthy(nodes=16, seed=7)
    d["metrics"][c.GPU_UTILIZATION.name][:, 5] += 0.06
    det = StragglerDetector()
    det.detect(window(d, jobs={"1": tuple(range(16))}))
    out = []
    for _ in range(2):
        out = det.detect(window(d, jobs={"2": tuple(range(16))}))
    assert keys(out) == {("node-05", "node", "straggler")} and out[0].action == "cordon"


def test_a_slow_node_sharing_a_job_with_a_busier_stage_is_still_the_hardware_straggler():
    d = healthy(nodes=16, seed=8)
    d["metrics"][c.GPU_UTILIZATION.name][:, 4:8] += 0.1  # a heavy pipeline stage
    _slow(d, 12, slice(None), 0.08)  # and one node with slow clocks elsewhere in the job
    det = StragglerDetector()
    for _ in range(2):
        out = det.detect(window(d))
    assert {(f.node, f.kind, f.action) for f in out} == {
        ("node-12", "straggler", "drain"),
        ("node-04", "workload_imbalance", "notify"),
    }


def test_two_nodes_with_slow_clocks_in_one_job_are_two_stragglers_not_imbalance():
    d = healthy(nodes=16, seed=9)
    _slow(d, 2, slice(None), 0.08)
    _slow(d, 9, slice(None), 0.1)
    out = StragglerDetector().detect(window(d))
    assert keys(out) == {("node-02", "node", "straggler"), ("node-09", "node", "straggler")}
    assert all(f.evidence["clock_deficit"] == 1.0 for f in out)


def test_a_busy_node_beside_a_throttled_one_is_workload_not_a_second_straggler():
    d = healthy(nodes=8, seed=10)
    d["metrics"][c.GPU_UTILIZATION.name][:, 1] += 0.1  # a heavier stage on one node
    _slow(d, 2, slice(None), 0.2)  # a throttled node in the same job
    out = StragglerDetector().detect(window(d))
    assert {(f.node, f.kind) for f in out} == {
        ("node-02", "straggler"),
        ("node-01", "workload_imbalance"),
    }


def test_a_gpu_seen_in_half_the_samples_needs_more_excess_to_count_as_a_straggler():
    d = healthy(nodes=16, seed=11)
    d["metrics"][c.GPU_UTILIZATION.name][-12:, 5, 3] += 0.032  # z 6 with every sample
    assert keys(StragglerDetector().detect(window(d))) == {("node-05", "gpu=3", "straggler")}
    d["metrics"][c.GPU_UTILIZATION.name][-12::2, 5, 3] = np.nan  # every other scrape lost
    assert StragglerDetector().detect(window(d)) == []


def test_groups_of_very_different_sizes_are_judged_as_if_side_by_side_in_one_pass(monkeypatch):
    """A fleet with one wide idle group and many small jobs: judging groups in buckets of
    similar size (which keeps the pass linear in the fleet) finds exactly what one padded
    pass over every group finds."""
    import analyzer.detectors.peer as peer

    d = healthy(nodes=48, seed=3)
    u = d["metrics"][c.GPU_UTILIZATION.name]
    u[:, 24:] = 0.0  # half the fleet idle: one wide group
    d["metrics"][c.GPU_SM_CLOCK.name][:, 24:] = 345e6
    d["metrics"][c.GPU_POWER.name][:, 24:] = 70.0
    d["metrics"][c.GPU_TEMPERATURE.name][:, 24:] = 35.0
    for n in (2, 9, 17):  # faults in three of the small jobs
        d["metrics"][c.GPU_SM_CLOCK.name][-8:, n, 1] = 1200e6
    d["metrics"][c.GPU_TEMPERATURE.name][-8:, 30, 4] = 60.0  # a hot idle GPU
    jobs = {str(j): (3 * j, 3 * j + 1, 3 * j + 2) for j in range(8)}  # eight 3-node jobs
    w = window(d, jobs=jobs)
    bucketed = PeerDetector().detect(w)
    assert peer._buckets([16, 384, 16, 0, 700]) == [[3, 0, 2], [1, 4]]
    monkeypatch.setattr(peer, "_buckets", lambda sizes: [list(range(len(sizes)))])
    assert bucketed == PeerDetector().detect(w)
    assert {f.node for f in bucketed} >= {"node-02", "node-09", "node-17"}
