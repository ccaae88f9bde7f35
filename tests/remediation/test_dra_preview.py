"""Dry-run with DRA isolation on: a GPU-scoped drain is previewed for real as a
DeviceTaintRule with effect None (visible, no effect, nothing evicted, the node untouched),
not recorded as a node drain; the node's release removes the preview and never a live rule.
``--check`` says where one-GPU isolation happens and where the node path stays."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import kmock

from remediation import policy as policy_mod
from remediation.backends.dryrun import DryRunBackend
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.placement.check import gpu_lines
from tests.remediation.helpers import LIVE_POLICY, alert, live_policy
from tests.remediation.test_dra_isolation import emu, evictions  # noqa: F401 - emu: fixture
from tests.remediation.test_kubernetes import node, writes

SLICES = kmock.resource("resource.k8s.io/v1/resourceslices")


def kube(e: kmock.KubernetesEmulator) -> KubernetesBackend:
    return KubernetesBackend(OfficialKubeApi.from_config(str(e.url).rstrip("/")))


async def test_a_dry_run_gpu_drain_is_previewed_as_an_effect_none_rule_and_evicts_nothing(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    evicted = evictions(emu)
    emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-002"] = node("gpu-node-002")
    real = kube(emu)
    journal, clock = Journal(tmp_path / "s.db"), FakeClock()
    b = DryRunBackend(journal, {}, clock.now, source=real)
    pol = dataclasses.replace(live_policy(), dry_run=True, dra_isolation=True)
    engine = Engine(journal, b, pol, clock, Metrics())
    executor = Executor(journal, b, pol, clock.now)
    fault = alert("gpu-node-001", action="drain", gpu="3")
    journal.accept([fault], 0)
    aid = await asyncio.to_thread(engine.decide, fault)
    assert aid is not None, journal.rows("SELECT guard, reason FROM decisions")
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = await asyncio.to_thread(executor.run, row)
    assert state == "done", outcome
    assert outcome == (
        "GPU 3 only: would taint GPU 3 NoSchedule (preview: gpu-3 tainted with effect None; "
        "would evict 1 pod(s))"
    )
    [rule] = await asyncio.to_thread(real.dra.active)
    assert rule["spec"]["taint"]["effect"] == "None"
    assert evicted == [] and not [w for w in writes(emu) if "/nodes/" in w[1]]
    ops = [r["op"] for r in journal.rows("SELECT op FROM dry_run_effects")]
    assert ops == ["isolate_gpu"]  # not a node drain
    assert not b.is_taken_out("gpu-node-001")
    out = await asyncio.to_thread(b.release, "gpu-node-001")
    assert out == "would resume; preview DeviceTaintRule(s) of GPU(s) 3 deleted"
    assert await asyncio.to_thread(real.dra.active) == []


async def test_a_dry_run_release_never_deletes_a_rule_a_live_run_made(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    evictions(emu)
    real = kube(emu)
    await asyncio.to_thread(real.dra.isolate, "gpu-node-001", "3", "live", "NoSchedule")
    b = DryRunBackend(Journal(tmp_path / "s.db"), {}, FakeClock().now, source=real)
    assert await asyncio.to_thread(b.release, "gpu-node-001") == "would resume"
    [rule] = await asyncio.to_thread(real.dra.active)
    assert rule["spec"]["taint"]["effect"] == "NoSchedule"


async def test_a_dry_run_gpu_drain_without_a_dra_device_takes_the_recorded_node_path(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    real = kube(emu)
    journal = Journal(tmp_path / "s.db")
    b = DryRunBackend(journal, {}, FakeClock().now, source=real)
    assert await asyncio.to_thread(b.isolate_gpu, "gpu-node-002", "0", "x", "NoSchedule") is None
    assert await asyncio.to_thread(real.dra.active) == []
    assert DryRunBackend(journal, {"n": {}}).isolate_gpu("n", "0", "x", "NoSchedule") is None


async def test_check_says_where_one_gpu_isolation_happens_and_where_the_node_path_stays(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    real = kube(emu)
    pol = dataclasses.replace(live_policy(), dra_isolation=True)
    [line] = await asyncio.to_thread(gpu_lines, pol, real)
    assert line.startswith("placement: one GPU out through DRA on 1 node(s) (tainted)")
    dry = DryRunBackend(Journal(tmp_path / "s.db"), {}, FakeClock().now, source=real)
    [line] = await asyncio.to_thread(gpu_lines, dataclasses.replace(pol, dry_run=True), dry)
    assert "previewed as DeviceTaintRules with effect None" in line
    del emu.objects[SLICES, None, "gpu-node-001-gpu.nvidia.com"]
    [line] = await asyncio.to_thread(gpu_lines, pol, real)
    assert line.startswith("warning: kubernetes.dra_isolation: no ResourceSlice")
    assert "node path" in line
    alone = DryRunBackend(Journal(tmp_path / "t.db"), {"n": {}})
    [line] = gpu_lines(pol, alone)
    assert "not on Kubernetes" in line and "node path" in line
    assert gpu_lines(live_policy(), real) == []  # isolation not asked for: nothing to say


def test_check_warns_when_the_reset_rung_has_no_image_to_run_on_kubernetes() -> None:
    allow = "checkpoint_restart, reboot, inspect]"
    text = LIVE_POLICY.replace(allow, allow.replace("reboot,", "reboot, reset_gpu,"), 1)
    real = KubernetesBackend(OfficialKubeApi.from_config("http://127.0.0.1:9"))
    [line] = gpu_lines(policy_mod.loads(text), real)
    assert "reset_gpu" in line and "validation.kubernetes.image" in line
    with_image = text + "validation: {kubernetes: {image: registry.local/gpu-validate:1}}\n"
    assert gpu_lines(policy_mod.loads(with_image), real) == []
