"""gpuwarden's decisions as Node conditions and Events (kmock emulator, exact requests):
node-problem-detector's condition convention on the status subresource, strategic merge by
type as field manager gpuwarden; Events on the Node aggregated like the kubelet's; written
only where gpuwarden acted (observe-first: an Event, no condition), and never failing the
action they report. The real API server's merge and ``kubectl describe node`` are in
test_kube_real_node_health.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import kmock
import pytest

from remediation.backends import nodehealth
from remediation.backends.base import EvacuationBlocked
from remediation.backends.dryrun import DryRunBackend
from remediation.backends.kubeapi import OfficialKubeApi
from remediation.backends.kubernetes import KubernetesBackend
from remediation.clock import FakeClock
from remediation.journal import Journal
from tests.remediation.logcapture import captured
from tests.remediation.test_kubernetes import node, pod, writes

NODE = "gpu-node-001"
STATUS = f"/api/v1/nodes/{NODE}/status"
EVENTS = "/api/v1/namespaces/default/events"


@pytest.fixture
async def emu() -> AsyncIterator[kmock.KubernetesEmulator]:
    async with kmock.KubernetesEmulator() as e, kmock.Server(e):
        e.resources["v1/nodes"] = kmock.ResourceInfo()
        e.resources["v1/pods"] = kmock.ResourceInfo()
        e.resources["v1/events"] = kmock.ResourceInfo(namespaced=True)
        e.objects[kmock.resource("v1/nodes"), None, NODE] = node(NODE)
        e.objects[kmock.resource("v1/pods"), "ml", "train-0"] = pod("ml", "train-0", NODE)
        yield e


def backend(e: kmock.KubernetesEmulator, clock: FakeClock) -> KubernetesBackend:
    b = KubernetesBackend(OfficialKubeApi.from_config(str(e.url).rstrip("/")))
    b.health.clock, b.health.instance = clock.now, "gpuwarden-remediation-0"
    return b


def conditions(e: kmock.KubernetesEmulator) -> list[tuple[str, list[dict[str, Any]]]]:
    return [(r.headers.get("Content-Type", ""), r.data["status"]["conditions"]) for r in list(e)
            if r.url.path == STATUS]  # fmt: skip


def events(e: kmock.KubernetesEmulator) -> list[tuple[str, str, Any]]:
    return [w for w in writes(e, health=True) if "/events" in w[1]]


def evicting(e: kmock.KubernetesEmulator, refuse: int) -> None:
    def evict(req: Any) -> Any:
        if refuse:
            raise kmock.KubernetesError(status=429, reason="TooManyRequests", message="Cannot "
                                        "evict pod as it would violate the pod's disruption budget.")  # fmt: skip
        return {"kind": "Status", "status": "Success"}

    e["post", kmock.subresource("eviction")] << evict


async def test_a_quarantine_sets_both_conditions_by_strategic_merge_and_records_an_event(
    emu: kmock.KubernetesEmulator,
) -> None:
    clock = FakeClock()
    evicting(emu, refuse=0)
    b = backend(emu, clock)
    await asyncio.to_thread(b.take_out, NODE, "gpuwarden: xid 79 on GPU 3", True)
    [(ctype, conds)] = conditions(emu)
    assert ctype == "application/strategic-merge-patch+json"
    at = nodehealth.stamp(clock.now())
    assert conds == [
        {
            "type": "GpuHealthy",
            "status": "False",
            "reason": "GpuFault",
            "message": "gpuwarden: xid 79 on GPU 3",
            "lastHeartbeatTime": at,
            "lastTransitionTime": at,
        },
        {
            "type": "GpuwardenQuarantined",
            "status": "True",
            "reason": "Cordoned",
            "message": "gpuwarden: xid 79 on GPU 3",
            "lastHeartbeatTime": at,
            "lastTransitionTime": at,
        },
    ]  # fmt: skip: only ours: the kubelet's Ready is merged by type, never sent
    [req] = [r for r in list(emu) if r.url.path == STATUS]
    assert req.params.get("fieldManager") == "gpuwarden"
    [(method, path, ev)] = events(emu)
    assert (method, path) == ("POST", EVENTS)
    assert ev["involvedObject"] == {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": NODE}
    assert (ev["type"], ev["reason"], ev["count"]) == ("Warning", "Quarantined", 1)
    assert ev["message"] == "cordoned and tainted NoSchedule: gpuwarden: xid 79 on GPU 3"
    assert ev["reportingComponent"] == "gpuwarden.io/remediation"
    assert ev["source"] == {"component": "gpuwarden-remediation", "host": "gpuwarden-remediation-0"}


async def test_a_repeated_blocked_evacuation_bumps_one_event_instead_of_one_per_attempt(
    emu: kmock.KubernetesEmulator,
) -> None:
    clock = FakeClock()
    evicting(emu, refuse=1)
    b = backend(emu, clock)
    for _ in range(3):
        with pytest.raises(EvacuationBlocked):
            await asyncio.to_thread(b.take_out, NODE, "xid", True)
        clock.advance(30)
    [first] = [b for m, _, b in events(emu) if m == "POST" and b["reason"] == "EvacuationBlocked"]
    name = first["metadata"]["name"]
    assert first["message"] == (
        "node gpu-node-001: ml/train-0: HTTP 429 TooManyRequests: Cannot evict pod as it "
        "would violate the pod's disruption budget."
    )
    bumps = [body for m, path, body in events(emu) if m == "PATCH" and path.endswith(name)]
    assert [b["count"] for b in bumps] == [2, 3]
    assert bumps[-1]["lastTimestamp"] == nodehealth.stamp(clock.now() - 30)
    # the quarantine is one Event, never bumped by the retries of its evictions
    assert [b["reason"] for m, _, b in events(emu) if m == "POST"] == [
        "Quarantined",
        "EvacuationBlocked",
    ]
    assert len(events(emu)) == 4  # those two, and the two bumps of EvacuationBlocked


async def test_the_transition_time_stays_while_the_status_does_and_release_clears_both(
    emu: kmock.KubernetesEmulator,
) -> None:
    clock = FakeClock()
    b = backend(emu, clock)
    await asyncio.to_thread(b.take_out, NODE, "xid", False)
    taken = nodehealth.stamp(clock.now())
    clock.advance(600)
    await asyncio.to_thread(b.mark, NODE, "quarantined")
    marked = conditions(emu)[-1][1]
    [q] = [c for c in marked if c["type"] == "GpuwardenQuarantined"]
    assert (q["reason"], q["lastTransitionTime"], q["lastHeartbeatTime"]) == (
        "Quarantined", taken, nodehealth.stamp(clock.now()))  # fmt: skip
    clock.advance(600)
    assert await asyncio.to_thread(b.release, NODE) == "uncordoned"
    after = {c["type"]: c for c in conditions(emu)[-1][1]}
    now = nodehealth.stamp(clock.now())
    assert (
        after["GpuwardenQuarantined"]["status"],
        after["GpuwardenQuarantined"]["reason"],
        after["GpuwardenQuarantined"]["lastTransitionTime"],
    ) == ("False", "Released", now)
    assert (after["GpuHealthy"]["status"], after["GpuHealthy"]["reason"]) == ("True", "NoGpuFault")
    assert [body["reason"] for m, _, body in events(emu)] == ["Quarantined", "Released"]  # fmt: skip


async def test_a_node_gpuwarden_never_took_out_gets_no_condition_on_release(
    emu: kmock.KubernetesEmulator,
) -> None:
    b = backend(emu, FakeClock())
    assert await asyncio.to_thread(b.release, NODE) == "already in service"
    assert conditions(emu) == [] and events(emu) == []


async def test_a_refused_status_write_is_logged_and_the_quarantine_still_stands(
    emu: kmock.KubernetesEmulator,
) -> None:
    emu["patch", kmock.subresource("status")] << 403
    emu["post", kmock.resource("v1/events")] << 403
    b = backend(emu, FakeClock())
    with captured("gpuwarden.remediation") as records:
        assert await asyncio.to_thread(b.take_out, NODE, "xid", False) == "cordoned and tainted"
    assert await asyncio.to_thread(b.is_taken_out, NODE)
    text = "\n".join(r.getMessage() for r in records)
    assert f"node {NODE}: conditions ['GpuHealthy', 'GpuwardenQuarantined'] not written" in text
    assert f"node {NODE}: event Quarantined not recorded" in text


async def test_observe_first_says_would_quarantine_in_an_event_and_sets_no_condition(
    emu: kmock.KubernetesEmulator, tmp_path: Path
) -> None:
    real = backend(emu, FakeClock())
    dry = DryRunBackend(Journal(tmp_path / "s.db"), {NODE: {}}, source=real)
    assert await asyncio.to_thread(dry.take_out, NODE, "xid 79", True) == "would drain"
    assert conditions(emu) == []
    [(_, _, ev)] = events(emu)
    assert (ev["type"], ev["reason"]) == ("Normal", "WouldQuarantine")
    assert ev["message"] == (
        "observe-first (dry-run): gpuwarden would cordon, taint and drain the node: xid 79"
    )
    assert [w for w in writes(emu, health=True) if "/events" not in w[1]] == []
