"""A GPU already lost when the exporter first sees it gets the same identity labels as a
healthy one (issue 17): its NVML index on gpu_up and on the XIDs logged for its PCI address."""

from __future__ import annotations

from pathlib import Path

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.xid import XidCollector
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.pci import nvidia_gpu_addresses
from exporter.sources.sysfs import DirSysfs
from simulator.nvml_fake import hgx_node


def pci_tree(root: Path, devices: dict[str, tuple[str, str]]) -> DirSysfs:
    for address, (vendor, cls) in devices.items():
        d = root / "bus" / "pci" / "devices" / address
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
    return DirSysfs(root)


def test_nvidia_gpus_are_listed_in_pci_order_without_nvswitches_or_other_vendors(
    tmp_path: Path,
) -> None:
    sysfs = pci_tree(
        tmp_path,
        {
            "0000:5d:00.0": ("0x10de", "0x030200"),
            "0000:18:00.0": ("0x10de", "0x030200"),
            "0000:07:00.0": ("0x10de", "0x068000"),  # NVSwitch: a bridge, not a GPU
            "0000:3b:00.0": ("0x15b3", "0x020700"),  # a Mellanox HCA
        },
    )
    assert nvidia_gpu_addresses(sysfs) == ["0000:18:00.0", "0000:5d:00.0"]
    assert nvidia_gpu_addresses(DirSysfs(tmp_path / "absent")) == []


def test_a_gpu_lost_at_first_sight_gets_its_index_on_gpu_up_and_on_its_xids(
    tmp_path: Path,
) -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[1].lost = True  # lost before the exporter ever named it
    addresses = [g.pci_bus_id for g in nvml.gpus]
    gpu = GpuCollector(nvml, "n1", pci_addresses=lambda: addresses)
    ups = {s.labels["gpu"]: s for s in gpu.collect() if s.metric is c.GPU_UP}
    assert ups["1"].value == 0.0 and ups["1"].labels["reason"] == "gpu_lost"
    bus = addresses[1].split(":")[1].lower()
    log = ListKernelLog([f"[ 9.0] NVRM: Xid (PCI:0000:{bus}:00): 79, pid=1, GPU has fallen off"])
    xids = [s for s in XidCollector(log, gpu.identities, "n1").collect()
            if s.metric is c.GPU_XID_ERRORS]  # fmt: skip
    assert [(s.labels["gpu"], s.labels["uuid"]) for s in xids] == [("1", ups["1"].labels["uuid"])]


def test_without_a_pci_listing_a_lost_gpu_keeps_its_pci_key_on_xids_as_before() -> None:
    nvml = hgx_node(gpus=2)
    nvml.gpus[1].lost = True
    gpu = GpuCollector(nvml, "n1")
    gpu.collect()
    assert len(gpu.identities()) == 1
