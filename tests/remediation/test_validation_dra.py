"""Validation before release on Kubernetes with one-GPU isolation (DRA), through the
service on the kmock emulator. A node whose only hold is one GPU out through a
DeviceTaintRule serves on with its other GPUs: the node-wide suite is not run there (it
would cordon the whole node for a one-GPU fault, and a suite that cannot start would climb
the node's ladder); the GPU is released after probation, journaled. A node held whole (its
fault not on a DRA device) is still cordoned and validated as before."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.service import Service, build
from remediation.settings import Settings
from remediation.validation.release import ValidationError
from tests.remediation.helpers import TOKEN, alert
from tests.remediation.test_dra_isolation import emu, evictions  # noqa: F401 - emu: fixture
from tests.remediation.test_kubernetes import node, writes
from tests.remediation.test_validation_kubernetes import JOBS
from tests.remediation.test_validation_release import POLICY, process

RULES = kmock.resource("resource.k8s.io/v1alpha3/devicetaintrules")
DRA_NODE, PLAIN_NODE = "gpu-node-001", "gpu-node-002"  # only the first publishes a ResourceSlice


def service(e: kmock.KubernetesEmulator, tmp_path: Path, clock: FakeClock) -> Service:
    evictions(e)
    e.resources["batch/v1/jobs"] = kmock.ResourceInfo(namespaced=True)
    for n in (PLAIN_NODE, "gpu-node-003"):
        e.objects[kmock.resource("v1/nodes"), None, n] = node(n)
    text = "kubernetes: {dra_isolation: true}\n" + (
        POLICY.replace("STUB", "all_reduce_perf")
        .replace("MAX", "3")
        .replace("MORE", "kubernetes: {namespace: gpuwarden, image: registry.local/v:1}")
    )
    (tmp_path / "policy.yaml").write_text(text)
    b = KubernetesBackend(OfficialKubeApi.from_config(str(e.url).rstrip("/")))
    s = Settings(policy=tmp_path / "policy.yaml", state_db=tmp_path / "s.db",
                 webhook_token=TOKEN, backend="kubernetes")  # fmt: skip
    return build(s, clock=clock, backend=b)


def gpu_fault_then_resolve(svc: Service, clock: FakeClock, n: str) -> None:
    svc.journal.accept([alert(n, "nvlink", "drain", gpu="3")], clock.now())
    process(svc)
    svc.journal.accept([alert(n, "nvlink", "drain", status="resolved", gpu="3")], clock.now())
    process(svc)


def node_writes(e: kmock.KubernetesEmulator, n: str) -> list[str]:
    """What was written to the node beyond its state label (a cordon, a taint)."""
    return [m for m, path, body in writes(e) if path == f"/api/v1/nodes/{n}"
            and (body.get("spec") or set(body.get("metadata") or {}) - {"labels"})]  # fmt: skip


async def test_a_one_gpu_isolation_is_released_after_probation_without_cordoning_its_node(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(emu, tmp_path, clock)
    await asyncio.to_thread(gpu_fault_then_resolve, svc, clock, DRA_NODE)
    assert await asyncio.to_thread(svc.backend.dra.active)  # type: ignore[attr-defined]
    clock.advance(61)
    await asyncio.to_thread(svc.engine.tick)
    await asyncio.to_thread(process, svc)
    assert node_writes(emu, DRA_NODE) == []  # never cordoned, never tainted
    assert [k for k in list(emu.objects) if k[0] == JOBS] == []  # no node-wide suite
    assert svc.validator.list(DRA_NODE, 5) == []
    acts = svc.journal.rows("SELECT action FROM actions ORDER BY id")
    assert [a["action"] for a in acts] == ["drain"]  # no escalation up the node's ladder
    [d] = svc.journal.rows("SELECT * FROM decisions WHERE action='validate'")
    assert d["verdict"] == "allow" and "only GPU(s) 3 of gpu-node-001 out" in d["reason"]
    assert svc.journal.node(DRA_NODE)["state"] == "released"  # type: ignore[index]
    assert await asyncio.to_thread(svc.backend.dra.active) == []  # type: ignore[attr-defined]
    with pytest.raises(ValidationError, match="not held"):  # released: nothing to validate
        svc.validator.start(DRA_NODE, "on_demand", "alice")
    svc.journal.close()


async def test_an_on_demand_validation_of_a_one_gpu_isolation_is_refused_not_cordoned(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(emu, tmp_path, clock)
    svc.journal.accept([alert(DRA_NODE, "nvlink", "drain", gpu="3")], clock.now())
    await asyncio.to_thread(process, svc)
    with pytest.raises(ValidationError, match=r"only GPU\(s\) 3 of gpu-node-001 are out"):
        await asyncio.to_thread(svc.validator.start, DRA_NODE, "on_demand", "alice")
    assert node_writes(emu, DRA_NODE) == [] and svc.validator.list(DRA_NODE, 5) == []
    svc.journal.close()


async def test_a_gpu_fault_on_a_node_without_a_dra_device_is_still_cordoned_and_validated(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(emu, tmp_path, clock)
    await asyncio.to_thread(gpu_fault_then_resolve, svc, clock, PLAIN_NODE)
    clock.advance(61)
    await asyncio.to_thread(svc.engine.tick)
    assert svc.journal.node(PLAIN_NODE)["state"] == "validating"  # type: ignore[index]
    [job] = [k for k in list(emu.objects) if k[0] == JOBS]
    assert emu.objects[job]["spec"]["template"]["spec"]["nodeName"] == PLAIN_NODE
    spec = emu.objects[kmock.resource("v1/nodes"), None, PLAIN_NODE].get("spec") or {}
    assert spec.get("unschedulable")  # the node path: cordoned for the fault, suite first
    svc.journal.close()


async def test_unreadable_device_taints_hold_the_gpu_out_and_start_nothing_until_readable(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(emu, tmp_path, clock)
    await asyncio.to_thread(gpu_fault_then_resolve, svc, clock, DRA_NODE)
    clock.advance(61)
    down = [True]

    def rules(req: Any) -> Any:
        if down[0]:
            raise kmock.KubernetesError(status=500)
        return {"items": [dict(o.raw) for k, o in list(emu.objects.items()) if k[0] == RULES]}

    emu["get", RULES] << rules
    await asyncio.to_thread(svc.engine.tick)
    assert svc.journal.node(DRA_NODE)["state"] == "probation"  # type: ignore[index]
    assert node_writes(emu, DRA_NODE) == [] and svc.validator.list(DRA_NODE, 5) == []
    assert [k for k in list(emu.objects) if k[0] == RULES]  # the GPU still out
    down[0] = False
    await asyncio.to_thread(svc.engine.tick)  # readable again: released, still uncordoned
    assert svc.journal.node(DRA_NODE)["state"] == "released"  # type: ignore[index]
    assert node_writes(emu, DRA_NODE) == []
    svc.journal.close()
