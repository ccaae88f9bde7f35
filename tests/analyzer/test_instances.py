"""Partitioned GPUs judged by the analyzer: an instance only against the instances of its own
profile and workload, and a fault on an instance named on its physical GPU."""

from __future__ import annotations

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.instances import InstanceStragglerDetector
from analyzer.engine import Engine
from analyzer.findings import Finding, subject_labels
from analyzer.sources.frames import FrameBuffer
from analyzer.window import InstanceInfo, Window
from exporter import catalog as c
from simulator.fleet import Fleet

LAYOUT = "1g.10gb*7,1g.10gb*7,1g.10gb*7,1g.10gb*7,7g.80gb,7g.80gb,3g.40gb*2,-"


def _fleet() -> Fleet:
    return Fleet(5, 11, skus=["h100", "h100", "a100", "mi300x", "h100"],
                 partitions={0: LAYOUT, 1: "1g.10gb*7", 2: "1g.10gb*7", 3: "cpx"})  # fmt: skip


def _run(f: Fleet, until: float) -> list[list[Finding]]:
    infos = {(x.node, x.gpu, x.slot): InstanceInfo(str(x.instance_id), x.profile, x.job)
             for x in f.instances}  # fmt: skip
    buf = FrameBuffer(f.nodes, 600.0, 15.0, sku=f.models, instances=infos)
    engine, cycles = Engine(default_detectors()), []
    for frame in f.run(until, 15):
        buf.push(frame)
        if round(frame.t) % 60 == 0:
            cycles.append(engine.cycle(buf.window()))
    return cycles


def test_a_stalled_instance_is_found_against_its_same_profile_peers_and_nothing_else_is() -> None:
    f = _fleet()
    f.inject("instance_stall", f.nodes[1], "gpu6", {"instance": 12, "slowdown": 0.7}, onset=600)
    cycles = _run(f, 1500)
    assert not [x for cyc in cycles[:9] for x in cyc if x.kind == "instance_straggler"]
    last = [x for x in cycles[-1] if x.kind == "instance_straggler"]
    assert [(x.node, x.subject, x.action) for x in last] == [
        (f.nodes[1], "instance=gpu6/12", "notify")
    ]
    assert subject_labels(last[0].subject) == {"gpu": "6", "gpu_instance": "12"}
    assert (
        last[0].evidence["peers"] == 4 * 7 + 8 * 7 - 1
    )  # the H100 1g.10gb instances, not the A100s


def test_a_stalled_amd_compute_partition_is_judged_against_the_other_cpx_partitions() -> None:
    f = _fleet()
    f.inject("instance_stall", f.nodes[3], "gpu2", {"instance": 5, "slowdown": 0.8}, onset=300)
    last = [x for x in _run(f, 1200)[-1] if x.kind == "instance_straggler"]
    assert [(x.node, x.subject) for x in last] == [(f.nodes[3], "instance=gpu2/5")]
    assert last[0].evidence["peers"] == 63


def _window(act: np.ndarray, infos: dict[tuple[int, int, int], InstanceInfo]) -> Window:
    t = np.arange(act.shape[0]) * 15.0
    return Window(t=t, nodes=("a", "b"), metrics={c.GPU_MIG_GRAPHICS_ACTIVE.name: act},
                  sku=("h100", "h100"), instances=infos)  # fmt: skip


def test_an_idle_big_instance_is_never_compared_with_busy_small_ones() -> None:
    act = np.full((21, 2, 8, 8), np.nan)
    infos: dict[tuple[int, int, int], InstanceInfo] = {}
    for n in (0, 1):
        for g in range(4):  # 1g.10gb x7 busy on GPUs 0-3 of both nodes
            act[:, n, g, :7] = 0.8
            infos |= {(n, g, s): InstanceInfo(str(7 + s), "1g.10gb", "chat") for s in range(7)}
        for g in range(4, 8):  # one 7g.80gb per GPU, serving a quiet deployment
            act[:, n, g, 0] = 0.15
            infos[(n, g, 0)] = InstanceInfo("0", "7g.80gb", "batch")
    assert InstanceStragglerDetector().detect(_window(act, infos)) == []
    # the same quiet instance among busy peers of its own profile and workload is found
    act[:, 0, 4, 0] = 0.05
    act[:, 1, 4:, 0] = act[:, 0, 5:, 0] = 0.6
    found = InstanceStragglerDetector().detect(_window(act, infos))
    assert [(x.node, x.subject) for x in found] == [("a", "instance=gpu4/0")]


def test_too_few_peers_of_a_profile_give_no_judgement() -> None:
    act = np.full((21, 2, 8, 8), np.nan)
    act[:, 0, 0, :2] = [[0.9, 0.05]] * 21
    act[:, 1, 0, :2] = 0.9
    infos = {(n, 0, s): InstanceInfo(str(1 + s), "3g.40gb", "llm") for n in (0, 1) for s in (0, 1)}
    assert InstanceStragglerDetector().detect(_window(act, infos)) == []


def test_an_xid_on_a_gpu_instance_is_found_on_the_physical_gpu_of_its_node() -> None:
    f = _fleet()
    f.inject("mig_xid", f.nodes[0], "gpu3", {"xid": 95, "instance": 11}, onset=300)
    f.inject("mig_xid", f.nodes[2], "gpu1", {"xid": 48, "instance": 8}, onset=300)
    last = _run(f, 600)[-1]
    xid = sorted(
        (x.node, x.subject, x.kind) for x in last if x.kind in ("xid_fatal", "ecc_uncorrectable")
    )
    assert (f.nodes[0], "gpu=3", "xid_fatal") in xid
    assert {(n, s) for n, s, _ in xid} == {(f.nodes[0], "gpu=3"), (f.nodes[2], "gpu=1")}
    assert not [x for x in last if x.kind == "instance_straggler"]
