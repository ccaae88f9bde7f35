"""The PromQL docs/attribution.md gives, run on a real Prometheus scraping the exporter: a
time-sliced GPU shared by two pods and a GPU of a DRA claim (the kubelet a real gRPC server on
a unix socket, the processes a /proc- and /var/log-shaped tree, NVML the fake)."""

from __future__ import annotations

import shutil
import tempfile
import time
import urllib.error
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.gpu_processes import GpuProcessesCollector
from exporter.collectors.pods import PodsCollector
from exporter.sources.kubelet import KubeletPodResources
from simulator.nvml_fake import FakeProcess, hgx_node
from tests.accounting.helpers import prometheus_scraping
from tests.exporter.kubelet_server import Claim, ClaimDevice, Container, FakeKubelet, Pod
from tests.exporter.test_gpu_processes import CID, GIB, UID_A, UID_B, Node, _systemd_v2

pytestmark = pytest.mark.real

DOC = Path(__file__).resolve().parents[2] / "docs" / "attribution.md"
INFO, UTIL, POD_SM = c.GPU_POD_INFO.name, c.GPU_UTILIZATION.name, c.GPU_POD_SM_UTILIZATION.name
JOIN = f"""max by (node, gpu, namespace, pod, container, claim) ({INFO})
  * on (node, gpu) group_left
    {UTIL}"""
WRONG_WAY = f"""{UTIL} * on (node, gpu) group_left (pod)
  {INFO}"""
PER_POD = f'sum by (namespace, pod) ({POD_SM}{{pod!=""}})'


@pytest.fixture
def sock() -> Iterator[str]:
    d = tempfile.mkdtemp(dir="/tmp", prefix="kl-")
    yield f"{d}/kubelet.sock"
    shutil.rmtree(d, ignore_errors=True)


def test_the_documented_joins_attribute_a_shared_and_a_dra_gpu_to_their_pods(
    tmp_path: Path, sock: str
) -> None:
    text = DOC.read_text()
    assert JOIN in text and PER_POD in text  # the queries tested are the ones documented
    node = Node(tmp_path)
    node.container("ml", "a", UID_A, "trainer", CID["a"])
    node.container("ml", "b", UID_B, "infer", CID["b"])
    node.process(101, _systemd_v2(UID_A, CID["a"]))
    node.process(201, _systemd_v2(UID_B, CID["b"]))
    nvml = hgx_node(gpus=2)
    nvml.gpus[0].util_gpu_pct = 80
    nvml.gpus[1].util_gpu_pct = 50
    nvml.gpus[0].process_sample_us = int(time.time() * 1e6) - 1_000_000  # sampled 1 s ago
    nvml.gpus[0].processes = [
        FakeProcess(101, 2 * GIB, sm_util_pct=30),
        FakeProcess(201, 4 * GIB, sm_util_pct=45),
    ]
    u0 = nvml.gpus[0].uuid
    pods = [
        Pod("a", "ml", [Container("trainer", {"nvidia.com/gpu": [f"{u0}::0"]})]),
        Pod("b", "ml", [Container("infer", {"nvidia.com/gpu": [f"{u0}::1"]})]),
        Pod(
            "c", "ml", [Container("ctr", claims=[Claim("one", "ml", [ClaimDevice("gpu-1", "n1")])])]
        ),
    ]
    gpus = GpuCollector(nvml, "n1")
    with FakeKubelet(sock, pods):
        cols = [
            gpus,
            PodsCollector(KubeletPodResources(sock), gpus.identities, "n1", wait=5.0),
            GpuProcessesCollector(nvml, gpus.identities, "n1", node.owners()),
        ]
        body = CollectionLoop(cols, "n1", source="t", interval=5).run_once().body
    with prometheus_scraping(body, POD_SM) as prom:
        joined = {
            (r["metric"]["gpu"], r["metric"]["pod"], r["metric"].get("claim", "")): float(
                r["value"][1]
            )
            for r in prom.query(JOIN)
        }
        per_pod = {r["metric"]["pod"]: float(r["value"][1]) for r in prom.query(PER_POD)}
        with pytest.raises(urllib.error.HTTPError) as e:  # the join the other way round
            prom.query(WRONG_WAY)
        assert "many-to-many matching not allowed" in e.value.read().decode()
    # both pods on the time-sliced GPU see its utilization; the DRA pod its own GPU's
    assert joined == {("0", "a", ""): 0.8, ("0", "b", ""): 0.8, ("1", "c", "one"): 0.5}
    assert per_pod == pytest.approx({"a": 0.30, "b": 0.45})  # what each pod itself used
