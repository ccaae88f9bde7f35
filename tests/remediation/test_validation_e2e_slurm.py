"""End to end on the real slurmctld: an NVLink fault drains a node; the validation suite fails
once (the node stays drained, escalates one rung, the evidence is journaled) and passes the
second time (the node is resumed). The suite is a stub that prints recorded nccl-tests
outputs; it runs as a real batch job in gpuwarden's reservation. Probation runs on a fake
clock; Slurm and the worker's tick loop are real.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from remediation.app import build_app
from remediation.backends.runner import SubprocessRunner
from remediation.clock import FakeClock
from remediation.service import Service
from remediation.validation.slurm import reservation_name
from tests.remediation.helpers import AUTH, alert, payload, service
from tests.remediation.test_validation_release import POLICY, stub
from tests.slurmcluster import SlurmCluster

pytestmark = pytest.mark.real


async def concluded(svc: Service, node: str, n: int, timeout: float = 30.0) -> dict[str, Any]:
    """The n-th validation of ``node`` once it is no longer running (the worker ticks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        runs = await asyncio.to_thread(svc.validator.list, node, 10)
        rec = await asyncio.to_thread(svc.journal.node, node)
        done = len(runs) >= n and runs[0]["state"] != "running"
        if done and rec is not None and rec["state"] != "validating":  # and acted on
            await svc.worker.idle(20)  # the escalated action, if any, has run
            return runs[0]
        svc.worker.wake.set()
        await asyncio.sleep(0.1)
    raise AssertionError(f"validation {n} of {node} did not conclude")


async def test_an_nvlink_fault_is_validated_fails_once_escalates_then_passes_and_resumes(
    clean_slurm: SlurmCluster, readable_dir: Path, tmp_path: Path
) -> None:
    sc, node, clock = clean_slurm, clean_slurm.live[0], FakeClock()
    tool = stub(readable_dir, ["all_reduce_perf-slow.txt", "all_reduce_perf-8gpu.txt"])
    text = (
        POLICY.replace("STUB", str(tool))
        .replace("MAX", "3")
        .replace("MORE", f"out_dir: {readable_dir / 'runs'}")
    )
    svc = service(tmp_path, text, clock=clock, runner=SubprocessRunner(sc.env), backend="slurm")
    firing = alert(node, "nvlink", "drain", alertname="GpuNvlinkDown")
    resolved = alert(node, "nvlink", "drain", status="resolved", alertname="GpuNvlinkDown")
    async with TestClient(TestServer(build_app(svc))) as client:
        assert (await client.post("/alertmanager", data=payload(firing), headers=AUTH)).ok
        await svc.worker.idle(20)
        assert sc.node_state(node)["reason"].startswith("gpuwarden: drain nvlink")
        assert (await client.post("/alertmanager", data=payload(resolved), headers=AUTH)).ok
        await svc.worker.idle(20)
        assert svc.journal.node(node)["state"] == "probation"  # type: ignore[index]

        clock.advance(61)  # probation over: the suite runs first (a real job, our reservation)
        first = await concluded(svc, node, 1)
        assert first["state"] == "failed"
        st = sc.node_state(node)
        assert "DRAIN" in st["flags"]  # stays out
        assert reservation_name(node) not in sc.run("scontrol", "show", "reservation")
        [step] = first["evidence"]["steps"]
        assert step["measurements"]["busbw_at_max_size_gbps"] == pytest.approx(292.79)
        acts = svc.journal.rows("SELECT action, state FROM actions ORDER BY id")
        assert acts == [
            {"action": "drain", "state": "done"},
            {"action": "checkpoint_restart", "state": "done"},  # one rung up, on a drained node
        ]
        body = await (await client.get("/api/v1/nodes", headers=AUTH)).json()
        [row] = [n for n in body["nodes"] if n["node"] == node]
        assert row["validation"]["state"] == "failed" and "292.79" in row["validation"]["reason"]
        denied = svc.journal.rows(
            "SELECT evidence FROM decisions WHERE action='validate' AND verdict='deny'"
        )
        assert json.loads(denied[0]["evidence"])["steps"][0]["reasons"]

        await asyncio.sleep(0.5)  # a tick: probation starts over
        assert svc.journal.node(node)["state"] == "probation"  # type: ignore[index]
        clock.advance(61)
        second = await concluded(svc, node, 2)
        assert second["state"] == "passed"
        assert svc.journal.node(node)["state"] == "released"  # type: ignore[index]
    st = sc.node_state(node)
    assert "DRAIN" not in st["flags"] and "MAINT" not in st["flags"]
    assert reservation_name(node) not in sc.run("scontrol", "show", "reservation")
