"""Kubernetes attribution at the node: which pod and container hold which GPU, from the
kubelet's pod-resources gRPC API (v1 ``List``) on its unix socket.

Sits at the exporter's edge, under :class:`exporter.collectors.pods.PodsCollector`. The NVIDIA
device plugin hands out ``nvidia.com/gpu`` devices by GPU UUID (or by index with
``--device-id-strategy=index``) and MIG devices as ``nvidia.com/mig-<profile>`` by MIG UUID
(``nvidia.com/gpu`` with the ``single`` MIG strategy). Every call has a deadline; the collector
runs it off the collection thread, so an absent or hung kubelet never delays a cycle or a
scrape. API: k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (vendored in podresources/).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"


@dataclass(frozen=True)
class PodDevice:
    """One device id the kubelet says a container holds."""

    resource: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb
    device_id: str  # GPU UUID, GPU index or MIG UUID, as the device plugin named it
    namespace: str
    pod: str
    container: str


class PodResources(Protocol):
    """GPU devices allocated to containers on this node (raises OSError when unreachable)."""

    def list_devices(self) -> list[PodDevice]: ...


def is_gpu_resource(name: str) -> bool:
    return name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)


class KubeletPodResources:
    """The real kubelet, over gRPC on its unix socket; one channel, reused."""

    def __init__(self, socket_path: str = DEFAULT_SOCKET, timeout: float = 2.0) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._channel: Any = None
        self._stub: Any = None

    def list_devices(self) -> list[PodDevice]:
        if not os.path.exists(self.socket_path):  # no kubelet here (a Slurm node): say so fast
            raise FileNotFoundError(f"no kubelet pod-resources socket at {self.socket_path}")
        import grpc  # imported here: nodes without Kubernetes never load gRPC

        from exporter.sources.podresources import api_pb2

        stub = self._stub or self._connect()
        try:
            request = api_pb2.ListPodResourcesRequest()  # type: ignore[attr-defined]
            response = stub.List(request, timeout=self.timeout)
        except grpc.RpcError as e:
            self.close()  # a restarted kubelet has a new socket: reconnect next time
            raise ConnectionError(f"kubelet List failed: {e.code().name}") from e
        return [
            PodDevice(dev.resource_name, device_id, pod.namespace, pod.name, container.name)
            for pod in response.pod_resources
            for container in pod.containers
            for dev in container.devices
            if is_gpu_resource(dev.resource_name)
            for device_id in dev.device_ids
        ]

    def _connect(self) -> Any:
        import grpc

        from exporter.sources.podresources import api_pb2_grpc

        self._channel = grpc.insecure_channel(f"unix://{self.socket_path}")
        self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
        self._channel = self._stub = None


class StaticPodResources:
    """A fake: a list of allocations tests and the simulator set directly."""

    def __init__(self, devices: list[PodDevice] | None = None) -> None:
        self.devices = list(devices or [])
        self.error: OSError | None = None

    def list_devices(self) -> list[PodDevice]:
        if self.error is not None:
            raise self.error
        return list(self.devices)
