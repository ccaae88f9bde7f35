"""Partitioned GPUs in the simulated fleet: MIG layouts and AMD compute partitions, the
inference replicas on their instances, and faults on an instance that belong to the GPU."""

from __future__ import annotations

import numpy as np
import pytest

from exporter import catalog as c
from exporter.sources.xid_lines import parse_xid
from simulator.faults import FaultError
from simulator.fleet import Fleet
from simulator.kernel_log import kmsg_lines
from simulator.partitions import PartitionError, parse_layout
from simulator.simulator import Simulator

MIXED = "1g.10gb*7,1g.10gb*7,1g.10gb*7,1g.10gb*7,3g.40gb*2,3g.40gb*2,7g.80gb,-"


def _fleet() -> Fleet:
    return Fleet(4, 3, skus=["h100", "a100", "mi300x", "h100"],
                 partitions={0: MIXED, 1: "1g.10gb*7", 2: "cpx"})  # fmt: skip


def test_a_layout_names_what_the_gpu_model_cannot_have() -> None:
    with pytest.raises(PartitionError, match="1 to 2 instances"):
        parse_layout("3g.40gb*3", "h100")
    with pytest.raises(PartitionError, match="no MIG"):
        parse_layout("1g.10gb*7", "mi300x")
    with pytest.raises(PartitionError, match="not AMD"):
        parse_layout("cpx", "h100")
    with pytest.raises(PartitionError, match="unknown partition profile"):
        parse_layout("5g.50gb", "h100")
    with pytest.raises(ValueError, match="partitions of node 1"):
        Fleet(2, 0, partitions={1: "2g.20gb*4"})


def test_every_instance_carries_its_own_replica_and_partitioned_nodes_run_no_training() -> None:
    f = _fleet()
    per_node = {n: sum(1 for x in f.instances if x.node == n) for n in range(4)}
    assert per_node == {0: 4 * 7 + 2 * 2 + 1, 1: 8 * 7, 2: 8 * 8, 3: 0}
    assert len({x.pod for x in f.instances}) == len(f.instances)
    assert {x.job for x in f.instances if x.node == 2} == {"infer-cpx"}
    for _ in f.run(600, 15):
        assert (f.jobs.job_of[:3] == -1).all()
    fr = f.last
    assert fr is not None
    act = fr[c.GPU_MIG_GRAPHICS_ACTIVE.name]
    assert np.isfinite(act[0, 0, :7]).all() and np.isnan(act[0, 0, 7])
    assert np.isfinite(act[0, 6, 0]) and np.isnan(act[0, 6, 1:]).all() and np.isnan(act[0, 7]).all()
    assert np.isfinite(act[2]).all() and np.isnan(act[3]).all()
    # the parent GPU's utilization is its instances' work by compute share (7 x 1g = the GPU)
    util = fr[c.GPU_UTILIZATION.name]
    assert util[1, 0] == pytest.approx(act[1, 0, :7].sum() / 7)


def test_a_stalled_instance_serves_less_than_its_peers_and_only_it() -> None:
    f = _fleet()
    f.inject("instance_stall", f.nodes[0], "gpu2", {"instance": 9, "slowdown": 0.7})
    fr = list(f.run(300, 15))[-1]
    act = fr[c.GPU_MIG_GRAPHICS_ACTIVE.name][0, 2, :7]
    assert act[2] < 0.5 * np.median(np.delete(act, 2))
    with pytest.raises(FaultError, match=r"has instances 1, 2 \(3g\.40gb\), not instance 9"):
        f.inject("instance_stall", f.nodes[0], "gpu4", {"instance": 9})
    with pytest.raises(FaultError, match="not partitioned"):
        f.inject("mig_xid", f.nodes[3], "gpu0", {"instance": 7})


def test_an_xid_on_a_gpu_instance_is_logged_with_the_instance_and_counted_on_the_gpu() -> None:
    f = _fleet()
    f.inject("mig_xid", f.nodes[0], "gpu4", {"instance": 2, "xid": 48}, onset=30)
    last = list(f.run(60, 15))[-1]
    (dbe, remap) = f.events
    line = kmsg_lines(dbe, 1)[0]
    assert "NVRM: Xid (PCI:0000:9a:00 GPU-I:02): 48," in line
    parsed = parse_xid(line.split(";", 1)[1])
    assert parsed is not None and (parsed.gpu_instance, parsed.xid) == (2, 48)
    assert parsed.pci_key.lower().endswith("9a:00")
    assert remap.instance == -1  # the row remap is the GPU's, not the instance's
    ecc = last[c.GPU_ECC_ERRORS.name][0, 4]
    assert ecc[1].max() == 1  # the uncorrectable error is the physical GPU's


def test_the_served_node_shows_each_instance_as_the_exporter_reads_mig_devices() -> None:
    t = [0.0]
    f = _fleet()
    sim = Simulator(f, clock=lambda: t[0], wall=lambda: t[0], tick_s=15)
    f.inject("instance_stall", f.nodes[0], "gpu0", {"instance": 8, "slowdown": 0.9})
    f.inject("mig_xid", f.nodes[0], "gpu5", {"instance": 1}, onset=20)
    for _ in range(4):
        t[0] += 15
        body = sim.metrics(f.nodes[0]).decode()
    act = {(s.split('gpu="')[1].split('"')[0], s.split('gpu_instance="')[1].split('"')[0]): float(s.split()[-1])
           for s in body.splitlines() if s.startswith(c.GPU_MIG_GRAPHICS_ACTIVE.name + "{")}  # fmt: skip
    assert len(act) == 4 * 7 + 2 * 2 + 1
    assert act[("0", "8")] < 0.2 < act[("0", "7")]
    assert 'gpu_xid_errors_total{node="gpu-node-001",gpu="5"' in body
    assert (
        'gpu_mig_xid_errors_total{node="gpu-node-001",gpu="5"' in body
        and 'gpu_instance="1",xid="95"' in body
    )


def test_simulate_serves_the_partitioned_scenario_with_its_instances_and_partitions() -> None:
    from pathlib import Path

    from simulator.cli import SimulateSettings, make_simulator

    path = Path(__file__).resolve().parents[2] / "fixtures" / "scenarios" / "partitioned.yaml"
    sim = make_simulator(SimulateSettings(scenario=str(path)))
    assert sorted(sim.fleet.layouts) == [0, 1, 2, 3, 4]
    mig = sim.metrics(sim.fleet.nodes[0]).decode()
    assert mig.count(c.GPU_MIG_INFO.name + "{") == 8 * 7
    cpx = sim.metrics(sim.fleet.nodes[3]).decode()
    assert cpx.count('gpu_compute_partition_type="cpx"') > 64  # 8 x 8 partitions, many fields


def test_as_dcgm_exporter_each_instance_carries_gpu_i_profile_and_gpu_i_id_on_its_gpus_uuid() -> (
    None
):
    """dcgm-exporter's MIG labels (GPU_I_PROFILE, GPU_I_ID beside the parent GPU's UUID and
    index: dcgm-exporter's renderer reserves them on GPU entities)."""
    t = [0.0]
    f = Fleet(1, 3, partitions={0: "3g.40gb*2,3g.40gb*2,7g.80gb,-,-,-,-,-"})
    sim = Simulator(f, clock=lambda: t[0], wall=lambda: t[0], tick_s=15,
                    telemetry="dcgm-exporter")  # fmt: skip
    t[0] += 30
    body = sim.metrics(f.nodes[0]).decode()
    fb_free = c.GPU_MEMORY_FREE.dcgm[0].name
    mig = [s for s in body.splitlines() if s.startswith(f"{fb_free}{{") and "GPU_I_ID" in s]
    got = sorted((s.split('gpu="')[1].split('"')[0], s.split('GPU_I_PROFILE="')[1].split('"')[0],
                  s.split('GPU_I_ID="')[1].split('"')[0]) for s in mig)  # fmt: skip
    assert got == [("0", "3g.40gb", "1"), ("0", "3g.40gb", "2"), ("1", "3g.40gb", "1"),
                   ("1", "3g.40gb", "2"), ("2", "7g.80gb", "0")]  # fmt: skip
    uuid0 = {s.split('UUID="')[1].split('"')[0] for s in mig if 'gpu="0"' in s}
    assert len(uuid0) == 1 and uuid0.pop().startswith("GPU-")  # the parent's UUID
