"""Kubernetes attribution at the node: which pod and container hold which GPU, from the
kubelet's pod-resources gRPC API (v1 ``List``) on its unix socket.

Sits at the exporter's edge, under :class:`exporter.collectors.pods.PodsCollector`. Two ways a
container gets a GPU, both in one ``List`` answer:

- **Device plugin** (``ContainerResources.devices``): the NVIDIA device plugin hands out
  ``nvidia.com/gpu`` devices by GPU UUID (or by index with ``--device-id-strategy=index``) and
  MIG devices as ``nvidia.com/mig-<profile>`` by MIG UUID (``nvidia.com/gpu`` with the
  ``single`` MIG strategy). With time-slicing or MPS sharing it names each replica
  ``<id>::<n>`` (and, with ``renameByDefault``, the resource ``nvidia.com/gpu.shared``);
  GKE's plugin names shared GPUs ``nvidia<minor>/vgpu<n>``.
- **DRA** (``ContainerResources.dynamic_resources``, kubelet gate
  ``KubeletPodResourcesDynamicResources``, beta and on by default since 1.34): per
  ResourceClaim its name and namespace and per allocated device the driver, pool and device
  name (the triplet that names a device in a ResourceSlice) plus its CDI device ids. NVIDIA's
  DRA driver (``gpu.nvidia.com``) names a whole GPU ``gpu-<minor>`` and a MIG device
  ``gpu-<minor>-mig-<profile id>-<placement start>-<size>`` (minor: the ``/dev/nvidiaN``
  number), in a pool named after the node; other drivers' devices (``compute-domain.nvidia.com``
  IMEX channels) are no GPUs and are skipped.

Every call has a deadline; the collector runs it off the collection thread, so an absent or
hung kubelet never delays a cycle or a scrape. API:
k8s.io/kubelet/pkg/apis/podresources/v1/api.proto (vendored in podresources/).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Protocol

DEFAULT_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
GPU_RESOURCES = ("nvidia.com/gpu", "nvidia.com/gpu.shared")  # .shared: renamed sharing
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
DRA_GPU_DRIVERS = ("gpu.nvidia.com",)  # NVIDIA's DRA driver for GPUs and MIG devices


@dataclass(frozen=True)
class PodDevice:
    """One device the kubelet says a container holds (device plugin, or a DRA claim)."""

    resource: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb; DRA: the driver, gpu.nvidia.com
    device_id: str  # GPU UUID, index or MIG UUID (device plugin); DRA: the device name, gpu-0
    namespace: str
    pod: str
    container: str
    claim: str = ""  # DRA: the ResourceClaim's name (in the pod's namespace); "" device plugin
    pool: str = ""  # DRA: the ResourceSlice pool (NVIDIA's driver: the node name)

    @property
    def dra(self) -> bool:
        return bool(self.claim)


class PodResources(Protocol):
    """GPU devices allocated to containers on this node (raises OSError when unreachable)."""

    def list_devices(self) -> list[PodDevice]: ...


def is_gpu_resource(name: str) -> bool:
    return name in GPU_RESOURCES or name.startswith(MIG_RESOURCE_PREFIX)


def devices_of(response: Any) -> list[PodDevice]:
    """The GPU devices of a ``ListPodResourcesResponse``: device plugin ids first, then DRA
    claim devices, in the kubelet's pod and container order."""
    out: list[PodDevice] = []
    for pod in response.pod_resources:
        for container in pod.containers:
            ids = (pod.namespace, pod.name, container.name)
            out += [
                PodDevice(dev.resource_name, device_id, *ids)
                for dev in container.devices
                if is_gpu_resource(dev.resource_name)
                for device_id in dev.device_ids
            ]
            out += [
                PodDevice(res.driver_name, res.device_name, *ids, claim.claim_name, res.pool_name)
                for claim in container.dynamic_resources
                for res in claim.claim_resources
                if res.driver_name in DRA_GPU_DRIVERS and res.device_name
            ]
    return out


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
        return devices_of(response)

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
