"""A fake kubelet: the pod-resources v1 gRPC service on a unix socket, answering from a list.

Test infrastructure for :class:`exporter.sources.kubelet.KubeletPodResources`: the real gRPC
client talks to a real gRPC server built from the same generated stubs, so the wire format,
the socket and deadlines are exercised as against a kubelet. ``delay`` makes it slow.
"""

from __future__ import annotations

import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from exporter.sources.podresources import api_pb2, api_pb2_grpc


@dataclass
class Container:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device ids


@dataclass
class Pod:
    name: str
    namespace: str
    containers: list[Container]


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> Any:  # the RPC is named List
        self.kubelet.calls += 1
        time.sleep(self.kubelet.delay)
        return api_pb2.ListPodResourcesResponse(
            pod_resources=[
                api_pb2.PodResources(
                    name=p.name,
                    namespace=p.namespace,
                    containers=[
                        api_pb2.ContainerResources(
                            name=c.name,
                            devices=[
                                api_pb2.ContainerDevices(resource_name=r, device_ids=ids)
                                for r, ids in c.devices.items()
                            ],
                            cpu_ids=[2, 3],
                        )
                        for c in p.containers
                    ],
                )
                for p in self.kubelet.pods
            ]
        )


class FakeKubelet:
    def __init__(self, socket_path: str, pods: list[Pod] | None = None) -> None:
        self.socket_path = socket_path
        self.pods = list(pods or [])
        self.delay = 0.0
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        api_pb2_grpc.add_PodResourcesListerServicer_to_server(_Lister(self), self._server)
        self._server.add_insecure_port(f"unix://{socket_path}")

    def __enter__(self) -> FakeKubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
