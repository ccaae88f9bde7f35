"""The dcgm drop-in on a shared GPU: dcgm-exporter's --kubernetes-virtual-gpus (a copy of the
GPU's series per sharing pod, labelled vgpu) and, with --gpu-processes, each pod's own
GPU_UTIL and FB_USED in its copy, as dcgm-exporter's per-process attribution does.

The kubelet is a real gRPC server on a unix socket, the processes a /proc- and /var/log-shaped
tree, NVML the fake."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.pods import PodsCollector
from exporter.sources.kubelet import KubeletPodResources
from simulator.nvml_fake import FakeNvml, FakeProcess, hgx_node
from tests.exporter.kubelet_server import Container, FakeKubelet, Pod
from tests.exporter.test_gpu_processes import CID, GIB, UID_A, UID_B, Node, _systemd_v2

UTIL = c.GPU_UTILIZATION.dcgm[0].name
FB_USED = c.GPU_MEMORY_USED.dcgm[0].name
POWER = c.GPU_POWER.dcgm[0].name


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(dir="/tmp", prefix="kl-")
    yield f"{d}/kubelet.sock"
    shutil.rmtree(d, ignore_errors=True)


def _shared(tmp_path: Path) -> tuple[FakeNvml, Node, list[Pod]]:
    """GPU 0 time-sliced in 4 replicas: pod a (two processes) on ::0, b on ::1, c (idle) on
    ::2; GPU 1 held by pod d alone."""
    node = Node(tmp_path)
    node.container("ml", "a", UID_A, "trainer", CID["a"])
    node.container("ml", "b", UID_B, "infer", CID["b"])
    for pid, uid, cid in ((101, UID_A, "a"), (102, UID_A, "a"), (201, UID_B, "b")):
        node.process(pid, _systemd_v2(uid, CID[cid]))
    nvml = hgx_node(gpus=2)
    nvml.gpus[0].util_gpu_pct = 90
    nvml.gpus[0].processes = [
        FakeProcess(101, 2 * GIB, sm_util_pct=30),
        FakeProcess(102, 1 * GIB, sm_util_pct=10),
        FakeProcess(201, 4 * GIB, sm_util_pct=45),
    ]
    u0, u1 = nvml.gpus[0].uuid, nvml.gpus[1].uuid
    pods = [
        Pod("a", "ml", [Container("trainer", {"nvidia.com/gpu": [f"{u0}::0"]})]),
        Pod("b", "ml", [Container("infer", {"nvidia.com/gpu": [f"{u0}::1"]})]),
        Pod("c", "ml", [Container("idle", {"nvidia.com/gpu": [f"{u0}::2"]})]),
        Pod("d", "ml", [Container("solo", {"nvidia.com/gpu": [u1]})]),
    ]
    return nvml, node, pods


def _scrape(sock: str, nvml: FakeNvml, node: Node | None, pods: list[Pod], **kw: bool) -> str:
    gpus = GpuCollector(nvml, "n1")
    cols: list = [gpus, PodsCollector(KubeletPodResources(sock), gpus.identities, "n1", wait=5.0)]
    if node is not None:
        owners = node.owners()
        cols.append(GpuProcessesCollector(nvml, gpus.identities, "n1", owners, wall=lambda: 1.7e9))
    with FakeKubelet(sock, pods):
        loop = CollectionLoop(cols, "n1", source="t", interval=5, dcgm=True, pod_labels=True, **kw)
        return loop.run_once().body.decode()


def _series(text: str, name: str) -> dict[tuple[str, str, str], float]:
    """(gpu, pod, vgpu) -> value of a dcgm series."""
    out = {}
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        body = line[len(name) + 1 : line.rindex("}")]
        labels = {k: v.strip('"') for k, v in (kv.split("=", 1) for kv in body.split('",'))}
        key = (labels.get("gpu", ""), labels.get("pod", ""), labels.get("vgpu", ""))
        out[key] = float(line.rsplit(" ", 1)[1])
    return out


def test_with_virtual_gpus_the_pods_util_and_fb_used_copies_are_each_pods_own_use(
    tmp_path: Path, sock: str
) -> None:
    nvml, node, pods = _shared(tmp_path)
    text = _scrape(sock, nvml, node, pods, virtual_gpus=True)
    assert _series(text, UTIL) == {
        ("0", "a", "0"): 40,  # its two processes' SM time
        ("0", "b", "1"): 45,
        ("0", "c", "2"): 0,  # no process of its own on the GPU
        ("1", "d", ""): 0,  # not shared: one series, no vgpu
    }
    fb = _series(text, FB_USED)
    assert (fb[("0", "a", "0")], fb[("0", "b", "1")], fb[("0", "c", "2")]) == (3072, 4096, 0)
    power = _series(text, POWER)  # no per-pod split exists: every copy is the GPU's
    assert {power[("0", p, r)] for p, r in (("a", "0"), ("b", "1"), ("c", "2"))} == {72}


def test_with_virtual_gpus_and_no_process_data_every_copy_carries_the_gpus_value(
    tmp_path: Path, sock: str
) -> None:
    nvml, _, pods = _shared(tmp_path)
    util = _series(_scrape(sock, nvml, None, pods, virtual_gpus=True), UTIL)
    assert util == {
        ("0", "a", "0"): 90,
        ("0", "b", "1"): 90,
        ("0", "c", "2"): 90,
        ("1", "d", ""): 0,
    }
    xid = _series(_scrape(sock, nvml, None, pods, virtual_gpus=True), c.DCGM_LAST_XID.name)
    assert set(xid) == {("0", "a", "0"), ("0", "b", "1"), ("0", "c", "2"), ("1", "d", "")}


def test_without_virtual_gpus_a_shared_gpu_carries_the_first_pods_labels_once(
    tmp_path: Path, sock: str
) -> None:
    nvml, node, pods = _shared(tmp_path)
    util = _series(_scrape(sock, nvml, node, pods), UTIL)
    assert util == {("0", "a", ""): 90, ("1", "d", ""): 0}


def test_the_virtual_gpus_setting_comes_from_its_flag() -> None:
    from exporter.cli import settings_from

    s, _, _ = settings_from(["--kubernetes-pod-labels", "--kubernetes-virtual-gpus"])
    assert s.kubernetes_virtual_gpus and not settings_from([])[0].kubernetes_virtual_gpus
