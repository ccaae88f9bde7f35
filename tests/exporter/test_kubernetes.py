"""Kubernetes attribution: the kubelet pod-resources v1 API (a fake kubelet serving real gRPC on a
unix socket) maps GPUs and MIG devices to pods; an absent or slow kubelet never holds a cycle."""

from __future__ import annotations

import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.pods import PodsCollector
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.kubelet import KubeletPodResources, PodDevice, StaticPodResources
from exporter.sources.sysfs import DictSysfs
from simulator.nvml_fake import hgx_node
from tests.exporter.kubelet_server import Container, FakeKubelet, Pod


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(dir="/tmp", prefix="kl-")  # unix socket paths max out at 108 bytes
    yield f"{d}/kubelet.sock"
    shutil.rmtree(d, ignore_errors=True)


def _node_with_mig() -> tuple[GpuCollector, list[str]]:
    nvml = hgx_node(gpus=3)
    nvml.gpus[2].partition("1g.10gb", 2)
    gpus = GpuCollector(nvml, "n1")
    gpus.collect()
    migs = [m.uuid for m in nvml.gpus[2].mig_devices]
    return gpus, [g.uuid for g in nvml.gpus] + migs


def _pods(ids: list[str]) -> list[Pod]:
    return [
        Pod("train-0", "ml", [Container("trainer", {"nvidia.com/gpu": [ids[0]], "cpu": ["2"]})]),
        Pod("nb", "lab", [Container("jupyter", {"nvidia.com/gpu": ["1"]})]),  # index strategy
        Pod("inf", "serve", [Container("srv", {"nvidia.com/mig-1g.10gb": [ids[4]]})]),
        Pod("web", "default", [Container("nginx", {"example.com/fpga": ["f0"]})]),
    ]


def _info(samples: list[c.Sample]) -> dict[tuple[str, str], dict[str, str]]:
    return {
        (s.labels["gpu"], s.labels["gpu_instance"]): s.labels
        for s in samples
        if s.metric is c.GPU_POD_INFO
    }


def test_the_grpc_client_lists_gpu_devices_from_a_kubelet_on_its_unix_socket(sock: str) -> None:
    _, ids = _node_with_mig()
    with FakeKubelet(sock, _pods(ids)):
        devices = KubeletPodResources(sock).list_devices()
    assert devices == [
        PodDevice("nvidia.com/gpu", ids[0], "ml", "train-0", "trainer"),
        PodDevice("nvidia.com/gpu", "1", "lab", "nb", "jupyter"),
        PodDevice("nvidia.com/mig-1g.10gb", ids[4], "serve", "inf", "srv"),
    ]


def test_pods_are_attributed_to_gpus_by_uuid_by_index_and_to_mig_instances(sock: str) -> None:
    gpus, ids = _node_with_mig()
    with FakeKubelet(sock, _pods(ids)):
        col = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1", mig=gpus.mig_devices)
        s = col.collect()
    info = _info(s)
    assert set(info) == {("0", ""), ("1", ""), ("2", "8")}
    assert info[("0", "")]["pod"] == "train-0" and info[("0", "")]["uuid"] == ids[0]
    assert (info[("1", "")]["namespace"], info[("1", "")]["container"]) == ("lab", "jupyter")
    assert info[("2", "8")]["resource"] == "nvidia.com/mig-1g.10gb"
    assert [x.value for x in s if x.metric is c.KUBELET_UP] == [1]


def test_an_absent_kubelet_costs_only_kubelet_up_zero(sock: str) -> None:
    gpus, _ = _node_with_mig()
    col = PodsCollector(KubeletPodResources(sock), gpus.identities, "n1")
    s = col.collect()
    assert [x.value for x in s if x.metric is c.KUBELET_UP] == [0]
    assert not _info(s) and col.read_errors.counts == {"kubelet_list": 1}


def test_a_slow_kubelet_does_not_hold_the_cycle_and_its_answer_arrives_later(sock: str) -> None:
    gpus, ids = _node_with_mig()
    with FakeKubelet(sock, _pods(ids)) as kubelet:
        source = KubeletPodResources(sock)
        col = PodsCollector(source, gpus.identities, "n1", wait=2.0)
        assert len(_info(col.collect())) == 3
        kubelet.delay, kubelet.pods = 1.0, kubelet.pods[:1]
        quick = PodsCollector(source, gpus.identities, "n1", wait=0.01)
        quick._devices = col._devices  # the allocations known before the kubelet slowed down
        s = quick.collect()
        assert [x.value for x in s if x.metric is c.KUBELET_UP] == [0]
        assert len(_info(s)) == 3  # the last known allocations stay
        quick._wait = 5.0
        s = quick.collect()  # the same call, answered now
    assert [x.value for x in s if x.metric is c.KUBELET_UP] == [1]
    assert set(_info(s)) == {("0", "")}
    assert quick.read_errors.counts == {"kubelet_slow": 1}


def test_dcgm_series_can_carry_the_pod_labels_of_their_gpu() -> None:
    nvml = hgx_node(gpus=2)
    pods = StaticPodResources([PodDevice("nvidia.com/gpu", "0", "ml", "train-0", "trainer")])
    cols = collectors_for("n1", nvml, DictSysfs(), ListKernelLog(), pod_resources=pods)
    body = CollectionLoop(cols, "n1", source="t", interval=5, dcgm=True, pod_labels=True)
    text = body.run_once().body.decode()
    temp = c.GPU_TEMPERATURE.dcgm[0].name
    lines = [ln for ln in text.splitlines() if ln.startswith(temp + "{")]
    assert 'pod="train-0",namespace="ml",container="trainer"} ' in lines[0]
    assert "pod=" not in lines[1]
    xid = [ln for ln in text.splitlines() if ln.startswith(c.DCGM_LAST_XID.name + "{")]
    assert 'pod="train-0"' in xid[0]
    native = CollectionLoop(cols, "n1", source="t", interval=5, dcgm=True).run_once()
    assert "pod=" not in "\n".join(
        ln for ln in native.body.decode().splitlines() if ln.startswith("DCGM_")
    )


def test_the_committed_grpc_stubs_are_what_grpcio_tools_generates_from_the_proto() -> None:
    from exporter.sources.podresources import generate

    for name, text in generate.generated().items():
        committed = generate.unstamped((generate.HERE / name).read_text())
        assert committed == generate.unstamped(text), f"{name} is stale: regenerate"
    assert "k8s.io/kubelet/pkg/apis/podresources/v1" in Path(generate.PROTO).read_text()


def test_the_stale_stub_check_ignores_only_the_tools_release_stamps() -> None:
    from exporter.sources.podresources import generate

    committed = {name: (generate.HERE / name).read_text() for name in generate.STUBS}
    grpc_stub, pb_stub = committed["api_pb2_grpc.py"], committed["api_pb2.py"]
    newer_grpc = re.sub(
        r"GRPC_GENERATED_VERSION = '[^']*'", "GRPC_GENERATED_VERSION = '9.9.9'", grpc_stub
    )
    newer_pb = re.sub(r"# Protobuf Python Version: .*", "# Protobuf Python Version: 9.9.9", pb_stub)
    newer_pb = re.sub(
        r"PUBLIC,\n(\s*)\d+,\n\s*\d+,\n\s*\d+,", r"PUBLIC,\n\g<1>9,\n\g<1>9,\n\g<1>9,", newer_pb
    )
    assert newer_grpc != grpc_stub and newer_pb != pb_stub
    assert generate.unstamped(newer_grpc) == generate.unstamped(grpc_stub)
    assert generate.unstamped(newer_pb) == generate.unstamped(pb_stub)
    changed = grpc_stub.replace("/v1.PodResourcesLister/List", "/v1.PodResourcesLister/Lisp")
    assert changed != grpc_stub
    assert generate.unstamped(changed) != generate.unstamped(grpc_stub)


def test_kubernetes_settings_come_from_flags() -> None:
    from exporter.cli import settings_from

    s, _, _ = settings_from(["--kubelet-socket", "/k.sock", "--kubernetes-pod-labels"])
    assert (s.kubelet_socket, s.kubernetes_pod_labels) == ("/k.sock", True)
