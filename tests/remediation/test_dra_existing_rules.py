"""A DeviceTaintRule of the GPU's name already exists when gpuwarden isolates it (kmock
emulator): typically the effect-None preview the observe-first default left. The GPU is
reported isolated only once gpuwarden's rule with the wanted effect, selecting exactly that
device, is read back: ours with another effect or selector is patched (conditional on the
resourceVersion read), another owner's is never changed, and anything else fails the step
(retried by the executor) with nothing evicted. Release deletes only gpuwarden's rules."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation.backends import dra
from remediation.backends.base import BackendError, EvacuationBlocked
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from tests.remediation.helpers import alert, live_policy
from tests.remediation.test_dra_isolation import emu, evictions  # noqa: F401 - emu: fixture
from tests.remediation.test_kubernetes import node, writes

RULES = kmock.resource("resource.k8s.io/v1alpha3/devicetaintrules")
NAME = "gpuwarden-gpu-node-001-gpu3"
GPU3 = {"driver": "gpu.nvidia.com", "pool": "gpu-node-001", "device": "gpu-3"}


def iso_of(e: kmock.KubernetesEmulator) -> dra.DraIsolation:
    return dra.DraIsolation(OfficialKubeApi.from_config(str(e.url).rstrip("/")))


def existing(e: kmock.KubernetesEmulator, effect: str, owner: str | None = "gpuwarden",
             selector: dict[str, Any] | None = None, rv: str = "41") -> None:  # fmt: skip
    """A rule named as gpuwarden names GPU 3's, put there before gpuwarden isolates it."""
    rule = dra.taint_rule("gpu-node-001", "3", "gpu-node-001", "gpu-3", effect, "earlier",
                          version="v1alpha3")  # fmt: skip
    rule["metadata"]["resourceVersion"] = rv
    if owner is None:
        del rule["metadata"]["labels"]
    else:
        rule["metadata"]["labels"][dra.MANAGED_BY] = owner
    if selector is not None:
        rule["spec"]["deviceSelector"] = selector
    e.objects[RULES, None, NAME] = rule


def rule_now(e: kmock.KubernetesEmulator) -> dict[str, Any]:
    return dict(e.objects[RULES, None, NAME].raw)


def patches(e: kmock.KubernetesEmulator) -> list[Any]:
    return [body for m, path, body in writes(e) if m == "PATCH" and path.endswith(NAME)]


async def test_a_live_isolation_over_the_dry_run_preview_patches_it_to_noschedule(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    evicted = evictions(emu)
    existing(emu, "None")  # the observe-first default's preview, never released
    out = await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "xid 79 gpu 3")
    assert out == "gpu-3 tainted NoSchedule; evicted 1 pod(s) using it: ml/infer-3"
    assert rule_now(emu)["spec"]["taint"]["effect"] == "NoSchedule"
    assert evicted == ["infer-3"]
    [body] = patches(emu)
    assert body["metadata"]["resourceVersion"] == "41"  # conditional on what was read


async def test_a_rule_of_ours_selecting_more_than_the_device_is_narrowed_to_it(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    evictions(emu)
    wide = {"driver": "gpu.nvidia.com", "pool": "gpu-node-001", "deviceClassName": "gpu"}
    existing(emu, "NoSchedule", selector=wide)
    await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    assert rule_now(emu)["spec"]["deviceSelector"] == GPU3


@pytest.mark.parametrize("owner", [None, "someone-else"])
async def test_a_rule_of_another_owner_under_our_name_is_never_changed_nor_taken_for_ours(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    owner: str | None,
) -> None:
    evicted = evictions(emu)
    existing(emu, "None", owner=owner)
    before = rule_now(emu)
    with pytest.raises(BackendError, match="not gpuwarden's"):
        await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    assert rule_now(emu) == before and evicted == [] and patches(emu) == []
    out = await asyncio.to_thread(iso_of(emu).release, "gpu-node-001", "3")
    assert "not gpuwarden's" in out and rule_now(emu) == before  # release leaves it too


async def test_a_preview_changed_meanwhile_fails_the_step_with_nothing_evicted(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    evicted = evictions(emu)
    existing(emu, "None")
    emu["patch", RULES][:1] << 409  # another writer got there between our read and patch
    with pytest.raises(BackendError, match="changed while being patched"):
        await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    assert evicted == []


async def test_a_rule_the_read_back_does_not_show_in_force_is_never_reported_isolated(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    evicted = evictions(emu)
    existing(emu, "None")
    stale = copy.deepcopy(rule_now(emu))  # e.g. a mutating webhook puts the effect back
    emu["get", RULES, kmock.name(NAME)][1:] << stale
    with pytest.raises(BackendError, match=r"not in force on read-back: taint \S+ effect None"):
        await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    assert evicted == []


async def test_a_failed_create_or_patch_is_an_error_never_an_isolation(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    evicted = evictions(emu)
    emu["post", RULES][:1] << 403
    with pytest.raises(BackendError, match="create answered HTTP 403"):
        await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    existing(emu, "None")
    emu["patch", RULES][:1] << 422
    with pytest.raises(BackendError, match="patch answered HTTP 422"):
        await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    assert evicted == []


async def test_a_dry_run_preview_never_weakens_a_live_rule_nor_touches_anothers(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    evicted = evictions(emu)
    existing(emu, "NoSchedule")
    out = await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x", "NoSchedule",
                                  True)  # fmt: skip
    assert out.startswith(f"preview: DeviceTaintRule {NAME} exists (taint")
    assert out.endswith("effect NoSchedule); left as it is")
    existing(emu, "None", owner="someone-else")
    out = await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x", "NoSchedule",
                                  True)  # fmt: skip
    assert "managed-by 'someone-else'" in out and "left as it is" in out
    assert patches(emu) == [] and evicted == []


@pytest.mark.parametrize(
    ("status", "reason", "message"),
    [
        (500, "InternalError", "Internal error occurred: etcdserver: request timed out"),
        (429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption "
         "budget. The disruption budget infer is still being processed by the server."),
        (400, "BadRequest", "the server could not find the requested resource"),
    ],
)  # fmt: skip
async def test_an_eviction_refused_for_another_reason_names_it_not_a_disruption_budget(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    status: int,
    reason: str,
    message: str,
) -> None:
    first, _, cause = message.partition(". The")
    causes = [{"type": "DisruptionBudget", "message": "The" + cause}] if cause else []

    def refuse(req: Any) -> Any:
        raise kmock.KubernetesError(status=status, reason=reason, message=first + ("." if cause else ""),
                                    details={"causes": causes})  # fmt: skip

    emu["post", kmock.subresource("eviction")] << refuse
    with pytest.raises(EvacuationBlocked) as err:
        await asyncio.to_thread(iso_of(emu).isolate, "gpu-node-001", "3", "x")
    [blocked] = err.value.pods
    assert (blocked.pod, blocked.status, blocked.reason, blocked.message) == (
        "ml/infer-3", status, reason, message)  # fmt: skip
    assert "PodDisruptionBudget" not in str(err.value)


async def test_release_deletes_only_the_version_of_our_rule_it_read(
    emu: kmock.KubernetesEmulator,  # noqa: F811
) -> None:
    existing(emu, "None", rv="7")
    assert await asyncio.to_thread(iso_of(emu).release_node, "gpu-node-001", True) == ["3"]
    [(_, _, body)] = [w for w in writes(emu) if w[0] == "DELETE"]
    assert body["preconditions"] == {"resourceVersion": "7"}
    assert await asyncio.to_thread(iso_of(emu).active) == []


async def test_a_gpu_drain_over_a_left_preview_is_retried_until_the_rule_is_in_force(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    evicted = evictions(emu)
    existing(emu, "None")  # observed first under dry-run, then the policy went live
    emu["patch", RULES][:1] << 409
    emu.objects[kmock.resource("v1/nodes"), None, "gpu-node-002"] = node("gpu-node-002")
    b = KubernetesBackend(OfficialKubeApi.from_config(str(emu.url).rstrip("/")))
    journal, clock = Journal(tmp_path / "s.db"), FakeClock()
    pol = dataclasses.replace(live_policy(), dra_isolation=True)
    engine, executor = Engine(journal, b, pol, clock, Metrics()), Executor(journal, b, pol,
                                                                          clock.now)  # fmt: skip
    fault = alert("gpu-node-001", action="drain", gpu="3")
    journal.accept([fault], 0)
    aid = await asyncio.to_thread(engine.decide, fault)
    assert aid is not None, journal.rows("SELECT guard, reason FROM decisions")
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = await asyncio.to_thread(executor.run, row)
    assert state == "retry" and "changed while being patched" in outcome and evicted == []
    assert journal.step_state(aid, "isolate_gpu") is None  # never recorded as isolated
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = await asyncio.to_thread(executor.run, row)
    assert state == "done" and outcome.startswith("GPU 3 only: gpu-3 tainted NoSchedule")
    assert rule_now(emu)["spec"]["taint"]["effect"] == "NoSchedule" and evicted == ["infer-3"]
    assert not [w for w in writes(emu) if "/nodes/" in w[1]]  # the node itself untouched
