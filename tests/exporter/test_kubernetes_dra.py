"""Kubernetes attribution beyond one device plugin GPU per pod: GPUs allocated through DRA
ResourceClaims (the kubelet's pod-resources ``dynamic_resources``), shared (time-sliced) GPUs
whose device ids carry a replica suffix, and kubelets that hang or answer garbage.

The kubelet is a real gRPC server speaking the kubelet's own pod-resources v1 proto on a unix
socket (tests/exporter/kubelet_server.py); NVML is the hand-written fake.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Iterator

import pytest

from exporter import catalog as c
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.pods import PodsCollector
from exporter.sources.kubelet import KubeletPodResources, PodDevice
from simulator.nvml_fake import FakeNvml, hgx_node
from tests.exporter.kubelet_server import (
    Claim,
    ClaimDevice,
    Container,
    FakeKubelet,
    GarbageKubelet,
    GarbageSocket,
    Pod,
)


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(dir="/tmp", prefix="kl-")  # unix socket paths max out at 108 bytes
    yield f"{d}/kubelet.sock"
    shutil.rmtree(d, ignore_errors=True)


def _node() -> tuple[FakeNvml, GpuCollector]:
    """Three GPUs whose device minor numbers are not their NVML indices (NVML orders by PCI
    bus, the driver numbers /dev/nvidiaN in probe order): index 0 is /dev/nvidia2, and so on."""
    nvml = hgx_node(gpus=3)
    for gpu, minor in zip(nvml.gpus, (2, 0, 1), strict=True):
        gpu.minor = minor
    gpus = GpuCollector(nvml, "n1")
    gpus.collect()
    return nvml, gpus


def _cdi(claim_uid: str, device: str) -> list[str]:
    return [f"k8s.gpu.nvidia.com/claim={claim_uid}-{device}"]


def _dra_pods() -> list[Pod]:
    single = Claim("single-gpu", "gpu-test", [ClaimDevice("gpu-0", "n1", cdi=_cdi("a1", "gpu-0"))])
    pair = Claim("two-gpus", "ml", [ClaimDevice("gpu-1", "n1"), ClaimDevice("gpu-2", "n1")])
    imex = Claim("imex", "ml", [ClaimDevice("channel-0", "n1", driver="compute-domain.nvidia.com")])
    return [
        Pod("pod1", "gpu-test", [Container("ctr", claims=[single])]),
        Pod("train", "ml", [Container("trainer", claims=[pair, imex]), Container("sidecar")]),
    ]


def _info(samples: list[c.Sample]) -> list[dict[str, str]]:
    return sorted(
        (s.labels for s in samples if s.metric is c.GPU_POD_INFO),
        key=lambda x: (x["gpu"], x["pod"]),
    )


def test_the_grpc_client_lists_gpus_a_container_holds_through_a_dra_resource_claim(
    sock: str,
) -> None:
    with FakeKubelet(sock, _dra_pods()):
        devices = KubeletPodResources(sock).list_devices()
    assert devices == [
        PodDevice("gpu.nvidia.com", "gpu-0", "gpu-test", "pod1", "ctr", "single-gpu", "n1"),
        PodDevice("gpu.nvidia.com", "gpu-1", "ml", "train", "trainer", "two-gpus", "n1"),
        PodDevice("gpu.nvidia.com", "gpu-2", "ml", "train", "trainer", "two-gpus", "n1"),
    ]  # the IMEX channel of the compute-domain driver is no GPU: not listed


def test_a_dra_device_name_maps_to_its_gpu_by_device_minor_not_by_nvml_index(sock: str) -> None:
    nvml, gpus = _node()
    with FakeKubelet(sock, _dra_pods()):
        col = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1")
        info = _info(col.collect())
    by_gpu = {i["gpu"]: i for i in info}
    assert set(by_gpu) == {"0", "1", "2"}
    # gpu-0 is /dev/nvidia0, which NVML calls index 1
    assert (by_gpu["1"]["pod"], by_gpu["1"]["namespace"], by_gpu["1"]["container"]) == (
        "pod1",
        "gpu-test",
        "ctr",
    )
    assert by_gpu["1"]["uuid"] == nvml.gpus[1].uuid
    assert (by_gpu["1"]["claim"], by_gpu["1"]["dra_device"], by_gpu["1"]["dra_pool"]) == (
        "single-gpu",
        "gpu-0",
        "n1",
    )
    assert by_gpu["1"]["resource"] == "gpu.nvidia.com"
    assert {by_gpu["2"]["pod"], by_gpu["0"]["pod"]} == {"train"}  # gpu-1, gpu-2
    assert by_gpu["0"]["dra_device"] == "gpu-2" and by_gpu["2"]["dra_device"] == "gpu-1"
    assert not col.read_errors.counts


def test_a_claim_device_the_exporter_cannot_map_is_counted_and_still_served(sock: str) -> None:
    _, gpus = _node()
    pods = _dra_pods()
    pods.append(
        Pod(
            "ghost",
            "ml",
            [Container("c", claims=[Claim("gone", "ml", [ClaimDevice("gpu-7", "n1")])])],
        )
    )
    pods.append(
        Pod("odd", "ml", [Container("c", claims=[Claim("odd", "ml", [ClaimDevice("vf-x", "n1")])])])
    )
    with FakeKubelet(sock, pods):
        col = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1")
        info = _info(col.collect())
    unmapped = [i for i in info if not i["gpu"]]
    assert {(i["pod"], i["dra_device"], i["uuid"]) for i in unmapped} == {
        ("ghost", "gpu-7", ""),
        ("odd", "vf-x", ""),
    }
    assert len(info) == 5  # the three mapped allocations are all still there
    assert col.read_errors.counts == {"dra_device_unmapped": 2}


def test_dcgm_series_of_a_dra_allocated_gpu_carry_pod_and_dra_claim_labels(sock: str) -> None:
    _, gpus = _node()
    with FakeKubelet(sock, _dra_pods()):
        pods = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1", wait=5.0)
        loop = CollectionLoop([gpus, pods], "n1", source="t", interval=5, dcgm=True,
                              pod_labels=True)  # fmt: skip
        text = loop.run_once().body.decode()
    temp = c.GPU_TEMPERATURE.dcgm[0].name
    line = next(ln for ln in text.splitlines() if ln.startswith(temp + '{gpu="1"'))
    for label in (
        'pod="pod1"',
        'namespace="gpu-test"',
        'container="ctr"',
        'dra_claim_name="single-gpu"',
        'dra_claim_namespace="gpu-test"',
        'dra_device_name="gpu-0"',
        'dra_driver_name="gpu.nvidia.com"',
        'dra_pool_name="n1"',
    ):
        assert label in line, (label, line)
    native = next(ln for ln in text.splitlines() if ln.startswith(c.GPU_POD_INFO.name + "{"))
    assert 'claim="' in native


def test_device_plugin_gpus_carry_no_dra_labels_in_the_dcgm_series(sock: str) -> None:
    nvml, gpus = _node()
    pods = [Pod("nb", "lab", [Container("j", {"nvidia.com/gpu": [nvml.gpus[0].uuid]})])]
    with FakeKubelet(sock, pods):
        col = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1", wait=5.0)
        loop = CollectionLoop([gpus, col], "n1", source="t", interval=5, dcgm=True,
                              pod_labels=True)  # fmt: skip
        text = loop.run_once().body.decode()
    temp = c.GPU_TEMPERATURE.dcgm[0].name
    line = next(ln for ln in text.splitlines() if ln.startswith(temp + '{gpu="0"'))
    assert 'pod="nb"' in line and "dra_" not in line


def test_time_sliced_replicas_of_one_gpu_attribute_every_sharing_pod_to_that_gpu(
    sock: str,
) -> None:
    nvml, gpus = _node()
    u0, u1 = nvml.gpus[0].uuid, nvml.gpus[1].uuid
    pods = [  # NVIDIA's device plugin with time-slicing/MPS names replicas <id>::<n>
        Pod("a", "t", [Container("c", {"nvidia.com/gpu": [f"{u0}::0"]})]),
        Pod("b", "t", [Container("c", {"nvidia.com/gpu": [f"{u0}::3"]})]),
        Pod("c", "t", [Container("c", {"nvidia.com/gpu.shared": [f"{u1}::1"]})]),
        Pod("d", "t", [Container("c", {"nvidia.com/gpu": ["nvidia2/vgpu1"]})]),  # GKE sharing
    ]
    with FakeKubelet(sock, pods):
        col = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1")
        info = _info(col.collect())
    assert [(i["gpu"], i["pod"]) for i in info] == [("0", "a"), ("0", "b"), ("0", "d"), ("1", "c")]
    assert {i["uuid"] for i in info if i["gpu"] == "0"} == {u0}
    assert not col.read_errors.counts


@pytest.mark.parametrize("hang", [True, False], ids=["hangs", "answers-garbage"])
def test_a_kubelet_socket_that_hangs_or_answers_garbage_keeps_the_last_allocations(
    sock: str, hang: bool
) -> None:
    _, gpus = _node()
    source = KubeletPodResources(sock, timeout=0.5)
    col = PodsCollector(source, gpus.identities, "n1", wait=3.0)
    with FakeKubelet(sock, _dra_pods()):
        assert len(_info(col.collect())) == 3
    source.close()
    with GarbageSocket(sock, hang=hang) as bad:
        t0 = time.monotonic()
        with pytest.raises(ConnectionError, match="kubelet List failed"):
            source.list_devices()
        assert time.monotonic() - t0 < 2.5  # the deadline holds, whatever the socket does
        s = col.collect()
        assert bad.accepted >= 1
    assert [x.value for x in s if x.metric is c.KUBELET_UP] == [0]
    assert len(_info(s)) == 3
    assert col.read_errors.counts == {"kubelet_list": 1}


@pytest.mark.parametrize(
    "payload",
    [b"\xff\xfe\x00 not protobuf", b"\x0a\x05\x0a\x03\xc3\x28\x61"],  # junk; invalid UTF-8 name
    ids=["junk", "invalid-utf8"],
)
def test_a_kubelet_answering_a_message_that_is_no_pod_list_keeps_the_last_allocations(
    sock: str, payload: bytes
) -> None:
    _, gpus = _node()
    source = KubeletPodResources(sock, timeout=1.0)
    col = PodsCollector(source, gpus.identities, "n1", wait=3.0)
    with FakeKubelet(sock, _dra_pods()):
        assert len(_info(col.collect())) == 3
    source.close()
    with GarbageKubelet(sock, payload):
        with pytest.raises(ConnectionError, match="kubelet List failed"):
            source.list_devices()
        s = col.collect()
    assert [x.value for x in s if x.metric is c.KUBELET_UP] == [0]
    assert len(_info(s)) == 3 and col.read_errors.counts == {"kubelet_list": 1}
