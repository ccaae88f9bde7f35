"""Heterogeneous fleets: every baseline compares like with like. One regression test per
false-drain cause found on a mixed A100/H100 fleet (issue 12), each shown both ways: the
same data without the models (what the Prometheus path delivered before it read gpu_info)
makes the false finding, with the models it does not, and a real fault is still found."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.groups import peer_groups
from analyzer.detectors.infiniband import InfinibandDetector
from analyzer.detectors.peer import PeerDetector
from analyzer.detectors.straggler import StragglerDetector
from analyzer.detectors.throttling import ThrottlingDetector
from analyzer.engine import Engine
from analyzer.inventory import Inventory, NodeInventory
from exporter import catalog as c

from .synth import keys, mixed, window

LEAVES = {i: ("leaf-01" if i < 4 else "leaf-02" if i < 8 else "leaf-03") for i in range(12)}


def _w(d, sku, **kw):
    return replace(window(d, leaf_of=LEAVES, **kw), sku=sku)


def test_a100_power_limit_is_not_compared_with_the_h100_median():
    d, sku = mixed(h100=8, a100=4)
    no_models = window(d)  # and no rack map: nothing says the A100s' 400 W is normal
    assert any(f.kind == "throttling" for f in ThrottlingDetector().detect(no_models)), "cause"
    assert ThrottlingDetector().detect(_w(d, sku)) == []
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 9, 2] = 250.0  # one A100 really capped
    got = ThrottlingDetector().detect(_w(d, sku))
    assert keys(got) == {("node-09", "gpu=2", "throttling")}
    assert got[0].evidence["model_limit_w"] == 400.0


def test_a_model_group_too_small_falls_back_to_the_specification_never_the_fleet():
    d, sku = mixed(h100=8, a100=2)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 9, :] = 250.0  # both A100 nodes differ from each other
    got = ThrottlingDetector().detect(replace(window(d), sku=sku))
    assert {f.node for f in got} == {"node-09"}
    assert {f.evidence["model_limit_w"] for f in got} == {400.0}  # A100 SXM spec, not 700 W


def test_a_rack_capped_by_the_administrator_is_configuration_not_a_fault():
    d, sku = mixed(h100=8, a100=4)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 4:8] = 500.0  # leaf-02's rack at 500 W
    assert ThrottlingDetector().detect(_w(d, sku)) == []
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 1, 5] = 500.0  # the same cap on one GPU elsewhere
    assert keys(ThrottlingDetector().detect(_w(d, sku))) == {("node-01", "gpu=5", "throttling")}


def test_a_node_capped_below_its_capped_racks_limit_is_found_though_one_node_spoils_the_share():
    # leaf-02 (nodes 4-7) is capped at 500 W and node 7 further, at 400 W: 3 of the rack's 4
    # nodes still say what the rack is set to (one faulted node of an 8-node rack once hid
    # its rack's cap: then its 400 W was compared with the 500 W GPUs as the model's limit)
    d, sku = mixed(h100=8, a100=4)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 4:8] = 500.0
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 7] = 400.0
    got = ThrottlingDetector().detect(_w(d, sku))
    assert {(f.node, f.kind) for f in got} == {("node-07", "throttling")}
    # a rack at 650 W with a node at 570 W: not "far below" the 700 W model (0.81x), but
    # below what its rack is configured to
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 4:8] = 650.0
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 7] = 570.0
    got = ThrottlingDetector().detect(_w(d, sku))
    assert {(f.node, f.kind) for f in got} == {("node-07", "throttling")}
    assert all(f.evidence["rack_limit_w"] == 650.0 for f in got)
    assert "below its rack's configured cap" in got[0].summary
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 7] = 600.0  # within 10 % of its rack: not a fault
    assert ThrottlingDetector().detect(_w(d, sku)) == []


def test_an_inventory_power_cap_is_configuration_on_a_single_node():
    d, sku = mixed(h100=8, a100=4)
    d["metrics"][c.GPU_POWER_LIMIT.name][:, 2] = 450.0
    inv = Inventory(nodes={"node-02": NodeInventory(power_limit_w=450)})
    assert ThrottlingDetector().detect(replace(window(d), sku=sku)) != []
    assert ThrottlingDetector().detect(inv.apply(replace(window(d), sku=sku))) == []


def test_idle_a100s_are_not_peers_of_busy_h100s():
    d, sku = mixed(h100=8, a100=4, a100_busy=False)
    d["jobs"] = {}  # nothing in the job map: everything is one idle group without models
    d["metrics"][c.GPU_UTILIZATION.name][:, :8] = 0.0
    d["metrics"][c.GPU_POWER.name][:, :8] = 70.0 + np.random.default_rng(3).normal(0, 1, (41, 8, 8))
    d["metrics"][c.GPU_SM_CLOCK.name][:, :8] = 1980e6  # H100 idle clocks stay high (persistence)
    del d["metrics"][c.GPU_POWER_LIMIT.name]  # the model alone must keep the groups apart
    assert any(f.kind == "faulty_machine" for f in PeerDetector().detect(_w(d, ()))), "cause"
    assert PeerDetector().detect(_w(d, sku)) == []


def test_a_job_spanning_two_generations_compares_each_rank_with_its_own_model():
    d, sku = mixed(h100=8, a100=4)
    d["jobs"] = {"mix": tuple(range(12))}
    assert PeerDetector().detect(_w(d, sku)) == []
    d["metrics"][c.GPU_SM_CLOCK.name][:, 3, :] = 1500e6  # one H100 node really slow
    got = PeerDetector().detect(_w(d, sku))
    assert {f.node for f in got} == {"node-03"}


def test_an_hdr_leaf_beside_ndr_leaves_is_not_a_failed_switch():
    d, sku = mixed(h100=8, a100=4)
    assert any(f.kind == "switch_degraded" for f in InfinibandDetector().detect(_w(d, ()))), "cause"
    assert InfinibandDetector().detect(_w(d, sku)) == []
    d["metrics"][c.IB_PORT_RATE.name][:, 10, 3] = 12.5e9  # one HDR port trained down to EDR
    got = InfinibandDetector().detect(_w(d, sku))
    assert keys(got) == {("node-10", "port=mlx5_3/1", "ib_rate_low")}
    assert got[0].evidence["expected"] == 25e9


def test_the_inventory_fabric_wins_over_the_peer_group():
    d, sku = mixed(h100=8, a100=4)
    inv = Inventory(nodes={f"node-{i:02d}": NodeInventory(hca="NDR") for i in range(8, 12)})
    got = InfinibandDetector().detect(inv.apply(replace(window(d), sku=sku)))
    assert {f.node for f in got} == {f"node-{i:02d}" for i in range(8, 12)}  # A100s promised NDR


def test_workload_imbalance_between_generations_in_one_job_is_not_a_straggler():
    d, sku = mixed(h100=8, a100=4)
    del d["metrics"][c.GPU_POWER_LIMIT.name]  # the model alone must keep the groups apart
    d["jobs"] = {"mix": tuple(range(12))}
    m = d["metrics"]
    m[c.GPU_UTILIZATION.name][:, 8:] = 0.97  # the A100s work longer per step ...
    m[c.GPU_UTILIZATION.name][:, :8] -= 0.15  # ... while the H100s wait for them
    assert any(f.kind == "straggler" for f in StragglerDetector().detect(_w(d, ()))), "cause"
    assert StragglerDetector().detect(_w(d, sku)) == []


def test_a_healthy_mixed_fleet_gets_no_findings_from_the_full_detector_set():
    d, sku = mixed(h100=8, a100=4)
    assert Engine(default_detectors()).cycle(_w(d, sku)) == []


def _simulated(models: bool, caps: dict[str, float] | None = None, faults=()):
    from analyzer.sources.frames import FrameBuffer
    from simulator import Fleet
    from simulator.topology import port_name

    skus = ("h100",) * 8 + ("a100",) * 8
    fleet = Fleet(16, seed=7, nodes_per_leaf=4, idle_fraction=0.2, skus=skus, power_caps=caps)
    for kind, node, onset in faults:
        fleet.inject(kind, node, "", onset=onset)
    ports = [port_name(p) for p in range(8)]
    buf = FrameBuffer(fleet.nodes, leaf_of=dict(enumerate(fleet.leaf_of)), ports=ports,
                      sku=fleet.models if models else ())  # fmt: skip
    engine = Engine(default_detectors())
    found = set()
    for frame in fleet.run(1800, 15.0):
        buf.push(frame, fleet.jobs_at(frame.t))
        if frame.t >= 600 and frame.t % 60 == 0:
            found |= {(f.node, f.kind, f.action) for f in engine.cycle(buf.window())}
    return found


def test_a_simulated_healthy_a100_h100_fleet_with_a_capped_rack_gets_no_finding_at_all():
    caps = {"leaf-02": 550.0}  # an H100 rack capped by facilities
    without_models = {(node, kind) for node, kind, _ in _simulated(False, caps)}
    assert ("leaf-03", "switch_degraded") in without_models, "cause: the HDR leaves look failed"
    assert _simulated(True, caps) == set()


def test_peers_at_an_administrators_lower_power_limit_are_a_configuration_of_their_own():
    d, sku = mixed(h100=8, a100=4)
    d["jobs"] = {"h": tuple(range(8))}
    m = d["metrics"]
    m[c.GPU_POWER_LIMIT.name][:, 6:8] = 500.0  # two nodes of the job on a capped rack
    m[c.GPU_POWER.name][:, 6:8] = 70 + 430 * m[c.GPU_UTILIZATION.name][:, 6:8]
    without = replace(window(d), sku=sku, metrics={k: v for k, v in m.items()
                                                   if k != c.GPU_POWER_LIMIT.name})  # fmt: skip
    # the cause: without the limit the capped nodes are peers of the uncapped ones (their lower
    # power at the same utilisation alone is no longer a finding in a job: that is workload,
    # test_phase_independence.py), with it they are a configuration of their own
    assert {6, 7} <= set(dict(peer_groups(without))["job/h"].tolist()), "cause"
    assert all(not {6, 7} & set(idx.tolist()) or len(set(idx.tolist()) - {6, 7}) == 0
               for _, idx in peer_groups(_w(d, sku)))  # fmt: skip
    assert PeerDetector().detect(_w(d, sku)) == []


def test_driver_reloads_and_checkpoint_pauses_on_a_mixed_fleet_drain_nothing():
    faults = [("driver_reload", "gpu-node-011", 900.0), ("driver_reload", "gpu-node-002", 1200.0),
              ("checkpoint_pause", "gpu-node-013", 1000.0)]  # fmt: skip
    found = _simulated(True, {"leaf-02": 550.0}, faults)
    assert not [f for f in found if f[2] in ("drain", "cordon")], found
