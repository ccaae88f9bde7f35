"""A gang through the engine and the executor, over real HTTP against the kmock emulator.

A 4-pod Volcano vcjob with one member on a faulted node: the alert is decided (guards, per-job
budget), every member is asked to checkpoint, rank 0 acks, and the gang is restarted whole by
Volcano's RestartJob command; no member is ever evicted or deleted alone. The per-job budget
counts the gang as one job spanning all its members' nodes.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import kmock

from remediation import checkpoint
from remediation.checkpoint import ANNOTATION
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.policy import Checkpoint
from tests.remediation.helpers import alert, live_policy
from tests.remediation.test_kubernetes import writes
from tests.remediation.test_kubernetes_gangs import (  # noqa: F401 - emu is a fixture
    NODES,
    PODS,
    backend,
    emu,
    evictions_and_deletes,
    vc_member,
)

COMMANDS = kmock.resource("bus.volcano.sh/v1alpha1/commands")
GANG = "train/volcano-job/llm"


async def test_a_faulted_member_gets_the_whole_gang_checkpointed_and_restarted_never_one_pod(
    emu: kmock.KubernetesEmulator,  # noqa: F811
    tmp_path: Path,
) -> None:
    commands: list[dict[str, Any]] = []

    def volcano(req: Any) -> Any:  # Volcano's job controller acting on RestartJob
        commands.append(req.data)
        for i in range(4):
            del emu.objects[PODS, "train", f"llm-worker-{i}"]
            emu.objects[PODS, "train", f"llm-worker-{i}"] = vc_member(i, NODES[i + 2], gen="b")
        return {**req.data, "metadata": {**req.data["metadata"], "name": "llm-restartjob-1"}}

    emu["post", COMMANDS] << volcano
    b = backend(emu)
    journal = Journal(tmp_path / "s.db")
    ck = Checkpoint(str(tmp_path), deadline_s=30, on_timeout="requeue", restart_deadline_s=30)
    pol = live_policy(checkpoint=ck)  # per_job_max_nodes: 1
    engine = Engine(journal, b, pol, FakeClock(), Metrics())
    executor = Executor(journal, b, pol, time.time)

    fault = alert("gpu-node-001", action="checkpoint_restart")
    journal.accept([fault], 0)
    aid = await asyncio.to_thread(engine.decide, fault)
    assert aid is not None
    [decision] = journal.rows("SELECT * FROM decisions")
    assert json.loads(decision["evidence"])["jobs"] == [GANG]  # four pods, one job
    [row] = journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    state, outcome = await asyncio.to_thread(executor.run, row)
    assert state == "waiting", outcome  # for rank 0's checkpoint ack
    patched = sorted(p for m, p, d in writes(emu) if m == "PATCH" and ANNOTATION in str(d))
    assert patched == [f"/api/v1/namespaces/train/pods/llm-worker-{i}" for i in range(4)]
    assert evictions_and_deletes(emu) == [] and commands == []

    # The per-job budget counts the gang once: another member's node would be a second node
    # taken from the same job.
    other = alert("gpu-node-002", action="checkpoint_restart")
    journal.accept([other], 0)
    assert await asyncio.to_thread(engine.decide, other) is None
    last = journal.rows("SELECT verdict, guard, reason FROM decisions ORDER BY id DESC LIMIT 1")
    assert last[0]["guard"] == "budget_job" and GANG in last[0]["reason"]
    assert "would lose 2 nodes" in last[0]["reason"]

    checkpoint.acknowledge(str(tmp_path), GANG, step=4200)  # rank 0 saved its checkpoint
    while state == "waiting":  # what the worker's tick does
        state, outcome = await asyncio.to_thread(executor.run, row)
        await asyncio.sleep(0.02)
    assert state == "done", outcome
    assert "ack received" in outcome and "running elsewhere" in outcome
    [cmd] = commands
    assert cmd["action"] == "RestartJob" and cmd["target"]["name"] == "llm"
    assert evictions_and_deletes(emu) == []  # never one member evicted or deleted alone
    again = await asyncio.to_thread(b.job, GANG)
    assert again is not None and "gpu-node-001" not in again.nodes and again.restarts == 1
    journal.close()
