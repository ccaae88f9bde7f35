"""Validation before release on Kubernetes, through the service: the suite runs as a Job
bound to the cordoned node (kmock emulator); its pass uncordons the node."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import kmock
import pytest

from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.service import Service, build
from remediation.settings import Settings
from remediation.validation.release import KubernetesSuiteRunner
from tests.remediation.helpers import TOKEN
from tests.remediation.kgc import CollectingEmulator
from tests.remediation.test_kubernetes import node, writes
from tests.remediation.test_validation_kubernetes import JOBS, complete, log_of
from tests.remediation.test_validation_release import POLICY, fault_then_resolve, process, state

NODE = "gpu-node-002"


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with CollectingEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["batch/v1/jobs"] = kmock.ResourceInfo(namespaced=True)
        for i in range(1, 5):
            e.objects[kmock.resource("v1/nodes"), None, f"gpu-node-00{i}"] = node(f"gpu-node-00{i}")
        yield e


@pytest.mark.parametrize(("nccl", "passes"), [("all_reduce_perf-8gpu.txt", True),
                                              ("all_reduce_perf-slow.txt", False)])  # fmt: skip
async def test_the_suite_runs_as_a_job_on_the_cordoned_node_and_its_pass_uncordons_it(
    emu: kmock.KubernetesEmulator, tmp_path: Path, nccl: str, passes: bool
) -> None:
    text = (
        POLICY.replace("STUB", "all_reduce_perf")
        .replace("MAX", "3")
        .replace("MORE", "kubernetes: {namespace: gpuwarden, image: registry.local/v:1}")
    )
    (tmp_path / "policy.yaml").write_text(text)
    api = OfficialKubeApi.from_config(str(emu.url).rstrip("/"))
    b = KubernetesBackend(api)
    clock = FakeClock()
    s = Settings(policy=tmp_path / "policy.yaml", state_db=tmp_path / "s.db",
                 webhook_token=TOKEN, backend="kubernetes")  # fmt: skip
    svc = build(s, clock=clock, backend=b)
    assert isinstance(svc.validator.runner, KubernetesSuiteRunner)
    await asyncio.to_thread(fault_then_resolve, svc, clock)
    clock.advance(61)
    await asyncio.to_thread(svc.engine.tick)
    assert state(svc) == "validating"
    [name] = [k[2] for k in list(emu.objects) if k[0] == JOBS]
    job = emu.objects[JOBS, "gpuwarden", name]
    assert job["spec"]["template"]["spec"]["nodeName"] == NODE
    assert (await asyncio.to_thread(svc.validator.list, NODE, 1))[0]["state"] == "running"
    # a one-step suite: the pod log frames one step
    log = log_of("dcgmi-diag-r3-pass.json", nccl).split("===gpuwarden-step 0 rc=0===\n")[1]
    complete(emu, name, log.replace("step 1", "step 0"), ok=passes)
    await asyncio.to_thread(svc.engine.tick)
    await asyncio.to_thread(process, svc)
    [last] = await asyncio.to_thread(svc.validator.list, NODE, 1)
    assert last["state"] == ("passed" if passes else "failed")
    deletes = [p for m, p, _ in writes(emu) if m == "DELETE"]
    # the Job only: its pod is the garbage collector's (gpuwarden may not delete pods there)
    assert deletes == [f"/apis/batch/v1/namespaces/gpuwarden/jobs/{name}"]
    assert emu.objects[kmock.resource("v1/pods"), "gpuwarden", f"{name}-x7k2p"].deleted
    spec = emu.objects[kmock.resource("v1/nodes"), None, NODE].get("spec") or {}
    if passes:
        assert state(svc) == "released" and not spec.get("unschedulable")
    else:
        assert state(svc) in ("quarantined", "probation") and spec.get("unschedulable")
        acts = svc.journal.rows("SELECT action FROM actions ORDER BY id")
        assert [a["action"] for a in acts] == ["drain", "checkpoint_restart"]  # one rung up
    svc.journal.close()


def built(emu: kmock.KubernetesEmulator, tmp_path: Path, clock: FakeClock) -> Service:
    text = (
        POLICY.replace("STUB", "all_reduce_perf")
        .replace("MAX", "3")
        .replace("MORE", "kubernetes: {namespace: gpuwarden, image: registry.local/v:1}")
    )
    (tmp_path / "policy.yaml").write_text(text)
    b = KubernetesBackend(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    s = Settings(policy=tmp_path / "policy.yaml", state_db=tmp_path / "s.db",
                 webhook_token=TOKEN, backend="kubernetes")  # fmt: skip
    return build(s, clock=clock, backend=b)


def cordoned(emu: kmock.KubernetesEmulator) -> bool:
    n = emu.objects[kmock.resource("v1/nodes"), None, NODE]
    ann = (n.get("metadata") or {}).get("annotations") or {}
    return bool((n.get("spec") or {}).get("unschedulable")) and "gpuwarden" in ann.values()


async def test_a_job_deleted_by_an_admin_is_journaled_cancelled_and_the_node_stays_out(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    clock = FakeClock()
    svc = built(emu, tmp_path, clock)
    await asyncio.to_thread(fault_then_resolve, svc, clock)
    clock.advance(61)
    await asyncio.to_thread(svc.engine.tick)
    [name] = [k[2] for k in list(emu.objects) if k[0] == JOBS]
    del emu.objects[JOBS, "gpuwarden", name]  # kubectl delete job, not gpuwarden
    await asyncio.to_thread(svc.engine.tick)
    [last] = await asyncio.to_thread(svc.validator.list, NODE, 1)
    assert last["state"] == "cancelled" and "deleted outside gpuwarden" in last["reason"]
    assert "timed out" not in last["reason"]
    assert state(svc) in ("quarantined", "probation") and cordoned(emu)
    svc.journal.close()


async def test_a_stop_the_api_server_refuses_is_retried_each_tick_until_confirmed(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    clock = FakeClock()
    svc = built(emu, tmp_path, clock)
    await asyncio.to_thread(fault_then_resolve, svc, clock)
    clock.advance(61)
    await asyncio.to_thread(svc.engine.tick)
    [name] = [k[2] for k in list(emu.objects) if k[0] == JOBS]
    log = log_of("dcgmi-diag-r3-pass.json", "all_reduce_perf-slow.txt")
    complete(emu, name, log.split("===gpuwarden-step 0 rc=0===\n")[1].replace("step 1", "step 0"),
             ok=False)  # fmt: skip
    emu["delete", JOBS][:1] << 500  # the Job's delete refused once
    await asyncio.to_thread(svc.engine.tick)
    [last] = await asyncio.to_thread(svc.validator.list, NODE, 1)
    assert last["state"] == "stopping" and "HTTP 500" in (last["stop_error"] or "")
    assert state(svc) == "validating" and cordoned(emu)  # no verdict acted on yet
    await asyncio.to_thread(
        svc.engine.tick
    )  # deleted again, read back: the Job and its pod are gone
    [last] = await asyncio.to_thread(svc.validator.list, NODE, 1)
    assert last["state"] == "failed" and last["stop_tries"] == 1
    api = svc.validator.runner.v.api  # type: ignore[union-attr]
    assert await asyncio.to_thread(api.read_job, "gpuwarden", name) is None
    assert cordoned(emu)
    svc.journal.close()


async def test_the_stop_taints_again_a_node_whose_quarantine_taint_was_removed_meanwhile(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    clock = FakeClock()
    svc = built(emu, tmp_path, clock)
    await asyncio.to_thread(fault_then_resolve, svc, clock)
    clock.advance(61)
    await asyncio.to_thread(svc.engine.tick)
    api = svc.validator.runner.v.api  # type: ignore[union-attr]
    untaint = {"spec": {"taints": []}}  # kubectl taint node ... gpuwarden.io/quarantine-
    await asyncio.to_thread(api.patch_node, NODE, untaint)
    assert (
        cordoned(emu) and not emu.objects[kmock.resource("v1/nodes"), None, NODE]["spec"]["taints"]
    )
    clock.advance(10_000)  # past the run's deadline: concluded, then stopped
    await asyncio.to_thread(svc.engine.tick)
    [last] = await asyncio.to_thread(svc.validator.list, NODE, 1)
    assert last["state"] == "failed", (last["stop_error"], last["reason"])
    spec = emu.objects[kmock.resource("v1/nodes"), None, NODE]["spec"]
    assert [t["key"] for t in spec["taints"]] == ["gpuwarden.io/quarantine"] and cordoned(emu)
    svc.journal.close()


def test_a_kubernetes_policy_with_suites_needs_an_image(tmp_path: Path) -> None:
    from common.settings import SettingsError
    from remediation import policy as policy_mod
    from remediation.service import make_suite_runner
    from tests.remediation.helpers import live_policy

    pol = policy_mod.loads(POLICY.replace("STUB", "x").replace("MAX", "3").replace("MORE", ""))
    fake = KubernetesBackend(OfficialKubeApi.from_config("http://127.0.0.1:9"))
    with pytest.raises(SettingsError, match=r"validation\.kubernetes\.image"):
        make_suite_runner(pol, fake)
    assert make_suite_runner(live_policy(), fake) is None  # no suites: nothing needed
