"""NVIDIA GPUs on the PCI bus, from sysfs: where a GPU NVML cannot name is on the bus.

Used by the GPU collector only for a GPU that is already lost when the exporter first sees
it (NVML answers ``GPU_IS_LOST`` before it ever gave the GPU's bus id). NVML enumerates GPUs
in PCI bus order, so index *i* of NVML is the *i*-th NVIDIA display/3D controller in
``/sys/bus/pci/devices`` sorted by address. With that address the GPU gets the same
``gpu`` label (its NVML index) on ``gpu_up`` and on its XID counters, lost or healthy
(issue 17: same-GPU inhibition must match).
"""

from __future__ import annotations

from exporter.sources.protocols import SysfsRoot

NVIDIA = "0x10de"
GPU_CLASSES = ("0x0300", "0x0302")  # VGA controller, 3D controller; NVSwitches are bridges


def nvidia_gpu_addresses(sysfs: SysfsRoot) -> list[str]:
    """Bus ids (``0000:5d:00.0``) of NVIDIA GPUs, in PCI order; empty when unreadable."""
    try:
        devices = sysfs.listdir("bus/pci/devices")
    except OSError:
        return []
    out = []
    for dev in devices:
        try:
            vendor = sysfs.read_text(f"bus/pci/devices/{dev}/vendor").strip()
            cls = sysfs.read_text(f"bus/pci/devices/{dev}/class").strip()
        except OSError:
            continue
        if vendor == NVIDIA and cls.startswith(GPU_CLASSES):
            out.append(dev)
    return sorted(out)
