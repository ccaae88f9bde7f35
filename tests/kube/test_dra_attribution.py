"""DRA attribution end to end on the real control plane: a ResourceSlice published as NVIDIA's
DRA driver publishes it, ResourceClaims (one named, one from a template) allocated by the real
kube-scheduler, and the exporter naming the GPU each pod's container got.

What the lab has not is a kubelet. The kubelet's part here is the one the pod-resources API
does: for each container's claims it reports the claim's name and the allocation results the
scheduler wrote (driver, pool, device) over real gRPC on a unix socket
(tests/exporter/kubelet_server.py). Every other name in the chain comes from the real server.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from exporter import catalog as c
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.pods import PodsCollector
from exporter.sources.kubelet import KubeletPodResources
from gpuwarden.processes import wait_until
from simulator.nvml_fake import FakeNvml, hgx_node
from tests.exporter.kubelet_server import Claim, ClaimDevice, Container, FakeKubelet, Pod
from tests.kubelab import ApiError, KubeLab

pytestmark = pytest.mark.real

DRIVER = "gpu.nvidia.com"
RESOURCE = "/apis/resource.k8s.io/v1"


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(dir="/tmp", prefix="kl-")
    yield f"{d}/kubelet.sock"
    shutil.rmtree(d, ignore_errors=True)


def _gpus() -> tuple[FakeNvml, GpuCollector]:
    """Four GPUs whose /dev/nvidia minors are not their NVML indices."""
    nvml = hgx_node(gpus=4)
    for gpu, minor in zip(nvml.gpus, (3, 1, 0, 2), strict=True):
        gpu.minor = minor
    col = GpuCollector(nvml, "n1")
    col.collect()
    return nvml, col


def _publish_slice(lab: KubeLab, node: str, nvml: FakeNvml) -> None:
    """The ResourceSlice NVIDIA's DRA driver publishes for a node: one pool named after the
    node, one device per GPU named gpu-<minor>, with the GPU's uuid, index and minor."""
    devices = [
        {
            "name": f"gpu-{g.minor}",
            "attributes": {
                "type": {"string": "gpu"},
                "uuid": {"string": g.uuid},
                "index": {"int": g.index},
                "minor": {"int": g.minor},
                "productName": {"string": g.name},
            },
            "capacity": {"memory": {"value": "80Gi"}},
        }
        for g in nvml.gpus
    ]
    lab.http.post(
        f"{RESOURCE}/resourceslices",
        {
            "metadata": {"name": f"{node}-{DRIVER}"},
            "spec": {
                "driver": DRIVER,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": devices,
            },
        },
    )


def _device_class(lab: KubeLab) -> None:
    body = {
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DRIVER}' && "
                        f"device.attributes['{DRIVER}'].type == 'gpu'"
                    }
                }
            ]
        },
    }
    try:
        lab.http.post(f"{RESOURCE}/deviceclasses", body)
    except ApiError as e:  # the lab is shared: another test made it first
        if e.status != 409:
            raise


def _claim_spec(count: int) -> dict[str, Any]:
    return {
        "devices": {
            "requests": [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": DRIVER,
                        "allocationMode": "ExactCount",
                        "count": count,
                    },
                }
            ]
        }
    }


def _pod(lab: KubeLab, ns: str, node: str, name: str, claim: dict[str, str]) -> None:
    lab.http.post(
        f"/api/v1/namespaces/{ns}/pods",
        {
            "metadata": {"name": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "resourceClaims": [{"name": "gpu", **claim}],
                "containers": [
                    {
                        "name": "ctr",
                        "image": "lab/none:0",
                        "resources": {"claims": [{"name": "gpu"}]},
                    }
                ],
            },
        },
    )


def _kubelet_view(lab: KubeLab, ns: str, names: list[str]) -> list[Pod]:
    """What the kubelet's pod-resources List reports for these pods: per container, each claim
    it uses with the devices the scheduler allocated to it."""
    out = []
    for name in names:
        pod = lab.http.get(f"/api/v1/namespaces/{ns}/pods/{name}")
        generated = {
            s["name"]: s["resourceClaimName"]
            for s in pod["status"].get("resourceClaimStatuses", [])
        }
        containers = []
        for ctr in pod["spec"]["containers"]:
            claims = []
            for ref in ctr["resources"]["claims"]:
                spec = next(r for r in pod["spec"]["resourceClaims"] if r["name"] == ref["name"])
                claim_name = spec.get("resourceClaimName") or generated[ref["name"]]
                claim = lab.http.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{claim_name}")
                uid = claim["metadata"]["uid"]
                devices = [
                    ClaimDevice(
                        r["device"],
                        r["pool"],
                        r["driver"],
                        [f"k8s.gpu.nvidia.com/claim={uid}-{r['device']}"],
                    )
                    for r in claim["status"]["allocation"]["devices"]["results"]
                ]
                claims.append(Claim(claim_name, ns, devices))
            containers.append(Container(ctr["name"], claims=claims))
        out.append(Pod(name, ns, containers))
    return out


def test_gpus_the_real_scheduler_allocates_through_claims_are_attributed_to_their_pods(
    any_kube_lab: KubeLab, sock: str
) -> None:
    kube_lab = any_kube_lab
    nvml, gpus = _gpus()
    node = kube_lab.add_node(name=f"dra-{uuid.uuid4().hex[:8]}", gpus=0)
    ns = kube_lab.namespace("dra")
    _device_class(kube_lab)
    _publish_slice(kube_lab, node, nvml)
    kube_lab.http.post(
        f"{RESOURCE}/namespaces/{ns}/resourceclaims",
        {"metadata": {"name": "single-gpu"}, "spec": _claim_spec(1)},
    )
    kube_lab.http.post(
        f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates",
        {"metadata": {"name": "pair"}, "spec": {"spec": _claim_spec(2)}},
    )
    kube_lab.start_scheduler()
    _pod(kube_lab, ns, node, "named", {"resourceClaimName": "single-gpu"})
    _pod(kube_lab, ns, node, "templated", {"resourceClaimTemplateName": "pair"})
    for name in ("named", "templated"):
        kube_lab.wait_phase(ns, name, "Running", timeout=60)
    templated = f"/api/v1/namespaces/{ns}/pods/templated"
    wait_until(  # the resourceclaim controller names the claim it made from the template
        lambda: kube_lab.http.get(templated)["status"].get("resourceClaimStatuses"),
        30,
        0.2,
        "the generated claim's name in the pod's status",
    )
    view = _kubelet_view(kube_lab, ns, ["named", "templated"])
    with FakeKubelet(sock, view):
        col = PodsCollector(KubeletPodResources(sock), gpus.identities, node, wait=5.0)
        info = [s.labels for s in col.collect() if s.metric is c.GPU_POD_INFO]
    assert not col.read_errors.counts
    by_device = {i["dra_device"]: i for i in info}
    allocated = [d for p in view for ctr in p.containers for cl in ctr.claims for d in cl.devices]
    assert sorted(by_device) == sorted(d.device for d in allocated) and len(allocated) == 3
    slice_ = kube_lab.http.get(f"{RESOURCE}/resourceslices/{node}-{DRIVER}")
    published = {d["name"]: d["attributes"] for d in slice_["spec"]["devices"]}
    for device, labels in by_device.items():
        # the GPU the exporter names is the one the driver published under that device name
        assert labels["gpu"] == str(published[device]["index"]["int"])
        assert labels["uuid"] == published[device]["uuid"]["string"]
        assert (labels["namespace"], labels["container"], labels["dra_pool"]) == (ns, "ctr", node)
        assert labels["resource"] == DRIVER
    named = [i for i in info if i["pod"] == "named"]
    assert [i["claim"] for i in named] == ["single-gpu"]
    templated = {i["claim"] for i in info if i["pod"] == "templated"}
    assert len(templated) == 1 and next(iter(templated)).startswith("templated-gpu-")
