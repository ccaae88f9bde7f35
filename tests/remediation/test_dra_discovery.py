"""The DeviceTaintRule API's version is found by discovery (kmock emulator, which serves
``/apis/<group>`` and each version's resource list from what it registers): Kubernetes 1.37
serves ``resource.k8s.io/v1``, 1.36 ``v1beta2`` behind a gate, 1.33-1.35 ``v1alpha3``. The
rule is created, read back, listed and deleted at the version served; a server serving none
takes the node path and says why in the journal (issue 32: ``v1alpha3`` was hard-coded, and
met a 404 on a current cluster)."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation.backends import dra
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from tests.remediation.helpers import alert, live_policy
from tests.remediation.test_dra_isolation import claim, evictions, pod, slice_of
from tests.remediation.test_kubernetes import node, writes

SLICES = "resource.k8s.io/v1/resourceslices"
CLAIMS = "resource.k8s.io/v1/resourceclaims"


def not_served(prefix: str) -> Callable[[Any], bool]:
    """A request under ``prefix`` (a path filter: a resource filter would be served by
    the emulator's discovery as if it existed)."""
    return lambda req: str(req.url.path).startswith(prefix)


@asynccontextmanager
async def server(*rule_versions: str) -> AsyncIterator[kmock.KubernetesEmulator]:
    """An API server with one DRA node whose GPU 3 is held by ml/infer-3, serving
    DeviceTaintRules at ``rule_versions`` (none: the rule API is off)."""
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources[SLICES] = kmock.ResourceInfo(namespaced=False)
        e.resources[CLAIMS] = kmock.ResourceInfo(namespaced=True)
        for v in dra.TAINT_RULE_VERSIONS:
            if v in rule_versions:
                e.resources[f"resource.k8s.io/{v}/devicetaintrules"] = kmock.ResourceInfo(
                    namespaced=False
                )
            else:  # the emulator would answer any version; a real server says 404
                e[not_served(f"/apis/resource.k8s.io/{v}/devicetaintrules")] << 404
        for n in ("gpu-node-001", "gpu-node-002"):  # two: the budget lets one go
            e.objects[kmock.resource("v1/nodes"), None, n] = node(n)
        e.objects[kmock.resource(SLICES), None, "gpu-node-001-gpu.nvidia.com"] = slice_of(
            "gpu-node-001"
        )
        e.objects[kmock.resource("v1/pods"), "ml", "infer-3"] = pod("ml", "infer-3", "gpu-node-001")
        e.objects[kmock.resource(CLAIMS), "ml", "infer-3-gpu"] = claim(
            "ml", "infer-3-gpu", "gpu-node-001", "gpu-3", "infer-3"
        )
        yield e


def api_of(e: kmock.KubernetesEmulator) -> OfficialKubeApi:
    return OfficialKubeApi.from_config(str(e.url).rstrip("/"))


def rule_paths(e: kmock.KubernetesEmulator) -> set[str]:
    return {r.url.path.rpartition("/devicetaintrules")[0] for r in list(e)
            if "/devicetaintrules" in r.url.path}  # fmt: skip


@pytest.mark.parametrize(
    ("served", "used"),
    [
        (("v1",), "v1"),  # Kubernetes 1.37: GA
        (("v1beta2", "v1alpha3"), "v1beta2"),  # 1.36 with DRADeviceTaintRules on
        (("v1alpha3",), "v1alpha3"),  # 1.35 with DRADeviceTaints on
        (("v1alpha3", "v1beta2", "v1"), "v1"),  # the newest served wins, whatever the order
    ],
)
async def test_the_gpu_is_isolated_read_back_and_released_at_the_rule_version_the_server_serves(
    served: tuple[str, ...], used: str
) -> None:
    async with server(*served) as e:
        evicted = evictions(e)
        iso = dra.DraIsolation(api_of(e))
        out = await asyncio.to_thread(iso.isolate, "gpu-node-001", "3", "xid 79 gpu 3")
        assert out == "gpu-3 tainted NoSchedule; evicted 1 pod(s) using it: ml/infer-3"
        assert evicted == ["infer-3"]
        rule = dict(e.objects[kmock.resource(f"resource.k8s.io/{used}/devicetaintrules"), None,
                              "gpuwarden-gpu-node-001-gpu3"].raw)  # fmt: skip
        assert rule["apiVersion"] == f"resource.k8s.io/{used}"
        assert [r["gpu"] for r in await asyncio.to_thread(iso.listing)] == ["3"]
        assert await asyncio.to_thread(iso.release_node, "gpu-node-001") == ["3"]
        assert await asyncio.to_thread(iso.active) == []
        assert rule_paths(e) == {f"/apis/resource.k8s.io/{used}"}  # never another version


async def test_on_a_1_37_server_a_gpu_drain_takes_one_gpu_out_instead_of_meeting_the_alphas_404(
    tmp_path: Path,
) -> None:
    async with server("v1") as e:
        evictions(e)
        b = KubernetesBackend(api_of(e))
        journal, clock = Journal(tmp_path / "s.db"), FakeClock()
        pol = dataclasses.replace(live_policy(), dra_isolation=True)
        engine, executor = Engine(journal, b, pol, clock, Metrics()), Executor(journal, b, pol,
                                                                              clock.now)  # fmt: skip
        fault = alert("gpu-node-001", action="drain", gpu="3")
        journal.accept([fault], 0)
        aid = await asyncio.to_thread(engine.decide, fault)
        [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        state, outcome = await asyncio.to_thread(executor.run, row)
        assert (state, outcome) == ("done", "GPU 3 only: gpu-3 tainted NoSchedule; evicted 1 "
                                    "pod(s) using it: ml/infer-3")  # fmt: skip


async def test_a_server_serving_no_rule_api_takes_the_node_path_and_the_journal_says_why(
    tmp_path: Path,
) -> None:
    async with server() as e:
        evictions(e)
        b = KubernetesBackend(api_of(e))
        journal, clock = Journal(tmp_path / "s.db"), FakeClock()
        pol = dataclasses.replace(live_policy(), dra_isolation=True)
        engine, executor = Engine(journal, b, pol, clock, Metrics()), Executor(journal, b, pol,
                                                                              clock.now)  # fmt: skip
        fault = alert("gpu-node-001", action="drain", gpu="3")
        journal.accept([fault], 0)
        aid = await asyncio.to_thread(engine.decide, fault)
        [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        state, outcome = await asyncio.to_thread(executor.run, row)
        assert state == "done"
        assert outcome.startswith(
            "GPU not taken out alone (DeviceTaintRules are not served by this API server "
            "(resource.k8s.io serves none of v1, v1beta2, v1alpha3"
        )
        assert outcome.endswith("whole node: cordoned and tainted; evicted 1 pods")
        assert journal.step_state(int(aid), "isolate_gpu") == "node_path"  # type: ignore[arg-type]
        assert not [w for w in writes(e) if "devicetaintrules" in w[1]]  # no 404 met
        spec = dict(e.objects[kmock.resource("v1/nodes"), None, "gpu-node-001"].raw)["spec"]
        assert spec["unschedulable"] is True


class Upgraded:
    """A KubeApi whose server was upgraded under gpuwarden: discovery said v1beta2 first,
    v1 after; the old version then answers 404 as a real server does."""

    def __init__(self, api: OfficialKubeApi, answers: list[list[str]]) -> None:
        self.api, self.answers = api, answers

    def served_versions(self, group: str, plural: str) -> list[str]:
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def __getattr__(self, name: str) -> Callable[..., object]:
        return getattr(self.api, name)  # type: ignore[no-any-return]


async def test_a_rule_version_gone_since_discovery_is_looked_up_again_on_its_404() -> None:
    async with server("v1") as e:
        evictions(e)
        api = Upgraded(api_of(e), [["v1beta2"], ["v1"]])
        iso = dra.DraIsolation(api)  # type: ignore[arg-type]
        assert await asyncio.to_thread(iso.version) == "v1beta2"  # cached: an older server
        out = await asyncio.to_thread(iso.isolate, "gpu-node-001", "3", "x")
        assert out.startswith("gpu-3 tainted NoSchedule")
        assert iso.version() == "v1"
