"""MIG: instances discovered through NVML, labelled as dcgm-exporter labels them, and XIDs the
driver attributes to an instance counted for the instance and for its parent GPU."""

from __future__ import annotations

import pynvml

from exporter import catalog as c
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.xid import XidCollector
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.sysfs import DictSysfs
from simulator.nvml_fake import FakeGpuState, FakeNvml, hgx_node, nvml_error


def _mig_node() -> FakeNvml:
    nvml = hgx_node(gpus=2)
    nvml.gpus[0].partition("1g.10gb")
    nvml.gpus[0].memory_used = 8 * 1024**3
    return nvml


def test_a_partitioned_gpu_reports_each_instance_with_its_ids_and_profile() -> None:
    s = GpuCollector(_mig_node(), "n1").collect()
    info = [x.labels for x in s if x.metric is c.GPU_MIG_INFO]
    assert [(i["gpu"], i["gpu_instance"], i["compute_instance"], i["profile"]) for i in info] == [
        ("0", gi, "0", "1g.10gb") for gi in ("7", "8", "9", "11", "12", "13", "14")
    ]
    assert all(i["mig_uuid"].startswith("MIG-") for i in info)
    used = [x for x in s if x.metric is c.GPU_MIG_MEMORY_USED]
    assert len(used) == 7 and used[0].value == 1024**3  # an eighth of the parent's use
    assert not [x for x in s if x.metric is c.GPU_MIG_INFO and x.labels["gpu"] == "1"]


def test_dcgm_mode_labels_instance_series_with_gpu_i_id_and_gpu_i_profile() -> None:
    nvml = _mig_node()
    cols = collectors_for("n1", nvml, DictSysfs(), ListKernelLog())
    body = CollectionLoop(cols, "n1", source="t", interval=5, dcgm=True).run_once().body.decode()
    fb = c.GPU_MIG_MEMORY_USED.dcgm[0].name
    lines = [ln for ln in body.splitlines() if ln.startswith(fb + "{")]
    mig = [ln for ln in lines if "GPU_I_ID=" in ln]
    assert len(mig) == 7 and len(lines) == 9  # 7 instances + 2 whole GPUs, one header
    assert 'modelName="NVIDIA H100 80GB HBM3",GPU_I_PROFILE="1g.10gb",GPU_I_ID="7",' in mig[0]
    assert mig[0].endswith(" 1024")  # MiB
    assert body.count(f"# TYPE {fb} gauge") == 1


def test_an_empty_mig_slot_is_not_an_error_and_mig_off_asks_nothing_more() -> None:
    nvml = _mig_node()
    nvml.gpus[0].mig_devices = nvml.gpus[0].mig_devices[:3]
    col = GpuCollector(nvml, "n1")
    s = col.collect()
    assert len([x for x in s if x.metric is c.GPU_MIG_INFO]) == 3
    assert not {k for k in col.read_errors.counts if k.startswith("mig")}


def test_a_gpu_without_mig_support_is_asked_once() -> None:
    gpu = FakeGpuState.h100(0)
    gpu.unsupported.add("mig")
    col = GpuCollector(FakeNvml([gpu]), "n1")
    col.collect()
    gpu.failing["mig"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)  # would count if asked again
    col.collect()
    assert "mig" not in col.read_errors.counts


def test_a_mig_xid_counts_for_the_instance_and_for_the_parent_gpu() -> None:
    nvml = _mig_node()
    gpus = GpuCollector(nvml, "n1")
    gpus.collect()
    pci = nvml.gpus[0].pci_bus_id.split(":", 1)[1].split(".")[0].lower()
    log = ListKernelLog(
        [
            f"[ 1.0] NVRM: Xid (PCI:0000:{pci} GPU-I:07 GPU-CI:00): 43, pid=1, name=a, Ch 08",
            f"[ 2.0] NVRM: Xid (PCI:0000:{pci} GPU-I:08): 94, pid=2, name=b, Contained: SM",
            f"[ 3.0] NVRM: Xid (PCI:0000:{pci}): 79, pid='<unknown>', name=<unknown>, off bus",
        ]
    )
    s = XidCollector(log, gpus.identities, "n1").collect()
    parent = {x.labels["xid"]: x.value for x in s if x.metric is c.GPU_XID_ERRORS}
    assert parent == {"43": 1, "94": 1, "79": 1}
    mig = {
        (x.labels["gpu_instance"], x.labels["compute_instance"], x.labels["xid"]): x.value
        for x in s
        if x.metric is c.GPU_MIG_XID_ERRORS
    }
    assert mig == {("7", "0", "43"): 1, ("8", "", "94"): 1}
    assert all(x.labels["gpu"] == "0" for x in s if x.metric is c.GPU_MIG_XID_ERRORS)


def test_the_simulator_serves_mig_nodes_through_the_real_collectors() -> None:
    from simulator import single_node

    sim = single_node("mig-node", mig_profile="1g.10gb")
    cols = collectors_for("mig-node", sim.nvml, sim.sysfs, sim.kmsg)
    loop = CollectionLoop(cols, "mig-node", source="t", interval=5, before_cycle=sim.advance)
    body = loop.run_once().body.decode()
    assert body.count(c.GPU_MIG_INFO.name + "{") == 8 * 7
    assert body.count(c.GPU_MIG_MEMORY_USED.name + "{") == 8 * 7


def test_each_instance_gets_its_own_profiling_from_gpm_mig_samples() -> None:
    nvml = _mig_node()
    nvml.gpus[0].tensor_active_pct = 40.0
    cols = collectors_for("n1", nvml, DictSysfs(), ListKernelLog())
    loop = CollectionLoop(cols, "n1", source="t", interval=5, dcgm=True)
    first = loop.run_once().body.decode()
    assert c.GPU_MIG_TENSOR_ACTIVE.name + "{" not in first  # a pair of samples is needed
    body = loop.run_once().body.decode()
    native = [ln for ln in body.splitlines() if ln.startswith(c.GPU_MIG_TENSOR_ACTIVE.name + "{")]
    assert len(native) == 7 and all(ln.endswith(" 0.4") for ln in native)
    field = c.GPU_MIG_TENSOR_ACTIVE.dcgm[0].name
    dcgm = [ln for ln in body.splitlines() if ln.startswith(field + "{")]
    assert len([ln for ln in dcgm if "GPU_I_ID=" in ln]) == 7
    assert len(dcgm) == 9  # and the two whole GPUs, under one header
    gpus = cols[0]
    assert isinstance(gpus, GpuCollector)
    live = [s for s in nvml.gpm_samples if not s.freed]
    nvml.gpus[0].mig_devices = nvml.gpus[0].mig_devices[:2]  # five instances destroyed
    loop.run_once()
    assert sum(not s.freed for s in nvml.gpm_samples) == len(live) - 5
    gpus.close()
    assert all(s.freed for s in nvml.gpm_samples)
