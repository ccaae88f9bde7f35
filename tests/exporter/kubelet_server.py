"""A fake kubelet: the pod-resources v1 gRPC service on a unix socket, answering from a list.

Test infrastructure for :class:`exporter.sources.kubelet.KubeletPodResources`: the real gRPC
client talks to a real gRPC server built from the same generated stubs (the kubelet's own
``api.proto``), so the wire format, the socket and deadlines are exercised as against a
kubelet. ``delay`` makes it slow. Containers hold device-plugin devices (``devices``) and, as
a kubelet with ``KubeletPodResourcesDynamicResources`` (beta and on by default since 1.34)
reports them, devices allocated through DRA ResourceClaims (``claims``). ``List`` and ``Get``
are both served; ``Get`` answers NOT_FOUND for a pod it does not know, as the kubelet does.

:class:`GarbageSocket` is the other kind of bad kubelet: a unix socket that accepts and either
never answers (``hang``) or answers bytes that are not HTTP/2.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from typing import Any

import grpc

from exporter.sources.podresources import api_pb2, api_pb2_grpc


@dataclass
class ClaimDevice:
    """One device of a ResourceClaim's allocation result, as the kubelet reports it."""

    device: str  # the DRA driver's device name, e.g. gpu-0
    pool: str  # NVIDIA's DRA driver: the node name
    driver: str = "gpu.nvidia.com"
    cdi: list[str] = field(default_factory=list)  # k8s.gpu.nvidia.com/claim=<uid>-gpu-0


@dataclass
class Claim:
    name: str
    namespace: str
    devices: list[ClaimDevice]


@dataclass
class Container:
    name: str
    devices: dict[str, list[str]] = field(default_factory=dict)  # resource -> device ids
    claims: list[Claim] = field(default_factory=list)


@dataclass
class Pod:
    name: str
    namespace: str
    containers: list[Container]


def _pod(p: Pod) -> Any:
    return api_pb2.PodResources(
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
                dynamic_resources=[
                    api_pb2.DynamicResource(
                        claim_name=cl.name,
                        claim_namespace=cl.namespace,
                        claim_resources=[
                            api_pb2.ClaimResource(
                                cdi_devices=[api_pb2.CDIDevice(name=n) for n in d.cdi],
                                driver_name=d.driver,
                                pool_name=d.pool,
                                device_name=d.device,
                            )
                            for d in cl.devices
                        ],
                    )
                    for cl in c.claims
                ],
            )
            for c in p.containers
        ],
    )


class _Lister(api_pb2_grpc.PodResourcesListerServicer):  # type: ignore[misc]
    def __init__(self, kubelet: FakeKubelet) -> None:
        self.kubelet = kubelet

    def List(self, request: Any, context: Any) -> Any:  # the RPC is named List
        self.kubelet.calls += 1
        time.sleep(self.kubelet.delay)
        return api_pb2.ListPodResourcesResponse(pod_resources=[_pod(p) for p in self.kubelet.pods])

    def Get(self, request: Any, context: Any) -> Any:  # the RPC is named Get
        self.kubelet.calls += 1
        for p in self.kubelet.pods:
            if (p.name, p.namespace) == (request.pod_name, request.pod_namespace):
                return api_pb2.GetPodResourcesResponse(pod_resources=_pod(p))
        context.abort(grpc.StatusCode.NOT_FOUND, f"pod {request.pod_name} not found")


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


class GarbageSocket:
    """A unix socket where the kubelet's should be that does not speak gRPC: it accepts each
    connection and either says nothing (``hang``) or writes ``garbage`` and closes."""

    def __init__(self, socket_path: str, *, hang: bool = False, garbage: bytes = b"") -> None:
        self.hang = hang
        self.garbage = garbage or b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello"
        self.accepted = 0
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.bind(socket_path)
        self._sock.listen(8)
        self._sock.settimeout(0.1)
        self._stop = threading.Event()
        self._held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            if self.hang:
                self._held.append(conn)  # never read, never answered, never closed
                continue
            with contextlib.suppress(OSError):
                conn.sendall(self.garbage)
            conn.close()

    def __enter__(self) -> GarbageSocket:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)
        for c in self._held:
            c.close()
        self._sock.close()


class GarbageKubelet:
    """A real gRPC server on the kubelet's socket whose ``List`` answers ``payload``: bytes
    that are not a ``ListPodResourcesResponse`` (the HTTP/2 and gRPC framing are right, the
    message is not)."""

    def __init__(self, socket_path: str, payload: bytes) -> None:
        self.payload = payload
        handler = grpc.method_handlers_generic_handler(
            "v1.PodResourcesLister",
            {
                "List": grpc.unary_unary_rpc_method_handler(
                    lambda request, context: self.payload,
                    request_deserializer=lambda b: b,
                    response_serializer=lambda b: b,
                )
            },
        )
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        self._server.add_generic_rpc_handlers((handler,))
        self._server.add_insecure_port(f"unix://{socket_path}")

    def __enter__(self) -> GarbageKubelet:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop(grace=None)
