"""Partitioned GPUs end to end: a simulated fleet of MIG-partitioned H100/A100 nodes and CPX
MI300X nodes serving inference (one replica pod per instance) -> the analyzer, in virtual time
-> its Alertmanager alerts -> the remediation engine on a policy with DRA isolation -> the
Kubernetes backend (kmock) whose ResourceSlices publish each node's GPUs and MIG devices as the
NVIDIA DRA driver does, with one ResourceClaim per replica pod.

An XID 95 the driver attributes to GPU instance 9 of GPU 3 is the physical GPU's: the finding
names GPU 3 (and its uuid nowhere but on the GPU), the drain becomes GPU 3 taken out alone,
and exactly the seven replicas on GPU 3's instances are evicted; the node stays schedulable and
the pods on its other GPUs' instances keep serving. A stalled 1g.10gb instance elsewhere is
found against its same-profile peers only and recommends notify: nothing is evicted for it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from analyzer.detectors import default_detectors
from analyzer.engine import Engine as Analyzer
from analyzer.findings import Finding
from analyzer.output import alertmanager_alerts
from analyzer.sources.frames import FrameBuffer
from analyzer.window import InstanceInfo
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Alert
from simulator.fleet import Fleet
from simulator.node_view import NodeView
from simulator.partitions import MIG_PROFILES
from tests.remediation.helpers import live_policy
from tests.remediation.test_dra_isolation import claim, evictions
from tests.remediation.test_kubernetes import node, pod, writes

SKUS = ["h100", "h100", "a100", "mi300x"]
LAYOUTS = {0: "1g.10gb*7", 1: "1g.10gb*7", 2: "1g.10gb*7", 3: "cpx"}
GI_PROFILE_ID = {"1g.10gb": 19, "3g.40gb": 9, "7g.80gb": 0}  # nvidia-smi mig -lgip ids (H100)
FAULTY, GPU, INSTANCE = 0, 3, 9  # node index, GPU, GPU instance of the XID


def _fleet() -> Fleet:
    f = Fleet(4, 5, skus=SKUS, partitions=LAYOUTS)
    f.inject("mig_xid", f.nodes[FAULTY], f"gpu{GPU}", {"xid": 95, "instance": INSTANCE}, onset=600)
    f.inject("instance_stall", f.nodes[1], "gpu6", {"instance": 13, "slowdown": 0.75}, onset=600)
    return f


def _slice(f: Fleet, n: int) -> tuple[dict[str, Any], dict[tuple[int, int], str]]:
    """The node's ResourceSlice as the NVIDIA DRA driver publishes a MIG node, from the same
    NVML fake the exporter reads; and (gpu, slot) -> MIG device name."""
    name = f.nodes[n]
    view = NodeView(name, n, f.sku_of[n], layout=f.layouts[n])
    devices, names = [], {}
    for g, gpu in enumerate(view.nvml.gpus):
        devices.append({"name": f"gpu-{g}", "attributes": {
            "type": {"string": "gpu"}, "index": {"int": g}, "uuid": {"string": gpu.uuid}}})  # fmt: skip
        for slot, mig in enumerate(gpu.mig_devices):
            size = MIG_PROFILES[mig.profile][1]
            dev = f"gpu-{g}-mig-{GI_PROFILE_ID[mig.profile]}-{slot * size}-{size}"
            names[(g, slot)] = dev
            devices.append({"name": dev, "attributes": {
                "type": {"string": "mig"}, "uuid": {"string": mig.uuid},
                "parentUUID": {"string": gpu.uuid}, "profile": {"string": mig.profile}}})  # fmt: skip
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-gpu.nvidia.com"},
            "spec": {"nodeName": name, "driver": "gpu.nvidia.com", "pool": {"name": name,
                     "generation": 1, "resourceSliceCount": 1}, "devices": devices}}  # fmt: skip
    return body, names


@pytest.fixture
def fleet() -> Fleet:
    return _fleet()


@pytest.fixture
async def emu(fleet: Fleet) -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        for r in ("v1/nodes", "v1/pods"):
            e.resources[r] = kmock.ResourceInfo()
        e.resources["resource.k8s.io/v1/resourceslices"] = kmock.ResourceInfo(namespaced=False)
        e.resources["resource.k8s.io/v1/resourceclaims"] = kmock.ResourceInfo(namespaced=True)
        e.resources["resource.k8s.io/v1/devicetaintrules"] = kmock.ResourceInfo(namespaced=False)
        for n, name in enumerate(fleet.nodes):
            e.objects[kmock.resource("v1/nodes"), None, name] = node(name)
            if fleet.sku_of[n] == "mi300x":
                continue  # AMD's DRA driver is another driver: not this backend's
            body, devices = _slice(fleet, n)
            e.objects[kmock.resource("resource.k8s.io/v1/resourceslices"), None,
                      body["metadata"]["name"]] = body  # fmt: skip
            for x in (x for x in fleet.instances if x.node == n):
                e.objects[kmock.resource("v1/pods"), "serve", x.pod] = pod("serve", x.pod, name)
                e.objects[kmock.resource("resource.k8s.io/v1/resourceclaims"), "serve",
                          f"{x.pod}-gpu"] = claim("serve", f"{x.pod}-gpu", name,
                                                  devices[(x.gpu, x.slot)], x.pod)  # fmt: skip
        yield e


def _analyze(f: Fleet, until: float) -> list[Finding]:
    infos = {(x.node, x.gpu, x.slot): InstanceInfo(str(x.instance_id), x.profile, x.job)
             for x in f.instances}  # fmt: skip
    buf = FrameBuffer(f.nodes, 600.0, 15.0, sku=f.models, instances=infos)
    analyzer = Analyzer(default_detectors())
    for frame in f.run(until, 15):
        buf.push(frame)
        if round(frame.t) % 60 == 0:
            found = analyzer.cycle(buf.window())
    return found


def _delivered(f: Fleet, findings: list[Finding]) -> list[Alert]:
    """The analyzer's direct push, as Alertmanager's webhook carries it to remediation."""
    out = []
    for a in alertmanager_alerts(findings, f.t, 300.0):
        fp = "|".join(f"{k}={v}" for k, v in sorted(a["labels"].items()))
        out.append(Alert(fp, a["startsAt"], "firing", a["labels"], a["annotations"]))
    return out


async def test_an_xid_on_a_mig_instance_moves_the_pods_of_every_instance_of_that_gpu_only(
    fleet: Fleet, emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    findings = await asyncio.to_thread(_analyze, fleet, 1080)
    xid = [x for x in findings if x.kind == "xid_fatal"]
    assert [(x.node, x.subject, x.action) for x in xid] == [
        (fleet.nodes[FAULTY], f"gpu={GPU}", "drain")
    ]
    stalled = [x for x in findings if x.kind == "instance_straggler"]
    assert [(x.node, x.subject, x.action) for x in stalled] == [
        (fleet.nodes[1], "instance=gpu6/13", "notify")
    ]

    evicted = evictions(emu)
    b = KubernetesBackend(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    journal, clock = Journal(tmp_path / "s.db"), FakeClock()
    pol = dataclasses.replace(live_policy(), dra_isolation=True)
    engine, executor = (
        Engine(journal, b, pol, clock, Metrics()),
        Executor(journal, b, pol, clock.now),
    )
    alerts = _delivered(fleet, xid + stalled)
    journal.accept(alerts, 0)
    actions = [a for a in [await asyncio.to_thread(engine.decide, x) for x in alerts] if a]
    assert len(actions) == 1, journal.rows("SELECT guard, reason FROM decisions")
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (actions[0],))
    state, outcome = await asyncio.to_thread(executor.run, row)

    on_gpu = sorted(x.pod for x in fleet.instances if (x.node, x.gpu) == (FAULTY, GPU))
    assert state == "done" and outcome.startswith(f"GPU {GPU} only: GPU {GPU}'s 8 devices")
    assert len(on_gpu) == 7 and sorted(evicted) == on_gpu
    assert not [w for w in writes(emu) if "/nodes/" in w[1]]  # no cordon: 7 GPUs serve on
    rules = await asyncio.to_thread(b.dra.active)
    assert len(rules) == 8 and {r["spec"]["deviceSelector"]["pool"] for r in rules} == {
        fleet.nodes[FAULTY]
    }


def test_an_xid_on_an_instance_is_found_on_its_gpu_through_the_exporters_own_collectors() -> None:
    """The served path: a MIG node through the exporter's own collectors (the XID line names
    ``GPU-I:09``), read by the analyzer's embedded scraper: the finding names the physical GPU.
    (The embedded scraper reads gpuwarden's names only; the CPX node as DME serves it is read
    through a real Prometheus in test_partitioned_prometheus.py.)"""
    from analyzer.sources.scrape import ScrapeSource, Target
    from simulator.simulator import Simulator

    f = Fleet(2, 5, skus=["h100", "a100"], partitions={0: "1g.10gb*7", 1: "1g.10gb*7"})
    t = [0.0]
    sim = Simulator(f, clock=lambda: t[0], wall=lambda: t[0], tick_s=15)
    f.inject("mig_xid", f.nodes[0], f"gpu{GPU}", {"xid": 95, "instance": INSTANCE}, onset=100)

    class Fetch:
        async def fetch(self, url: str) -> str:
            return sim.metrics(url.split("/")[-2]).decode()

    src = ScrapeSource([Target(f"http://sim/{n}/metrics", {}) for n in f.nodes], 300.0, 15.0,
                       Fetch())  # fmt: skip
    analyzer = Analyzer(default_detectors())
    for _ in range(16):
        t[0] += 15
        found = analyzer.cycle(asyncio.run(src.read(t[0])))
    body = sim.metrics(f.nodes[0]).decode()
    assert f'gpu_instance="{INSTANCE}",xid="95"' in body  # the instance's count, beside the GPU's
    gpu_found = {(x.node, x.subject, x.kind) for x in found if x.kind == "xid_fatal"}
    assert gpu_found == {(f.nodes[0], f"gpu={GPU}", "xid_fatal")}
    assert not [x for x in found if x.subject.startswith("instance=")]
