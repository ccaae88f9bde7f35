"""Waits are persisted deadlines driven by the tick loop, never sleeping threads: with many
actions waiting for checkpoint acks the API answers, a pause reaches every queued step, and
SIGTERM ends the service quickly with the waiting actions left resumable."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from remediation.app import build_app
from remediation.backends.dryrun import DryRunBackend
from remediation.clock import FakeClock
from remediation.journal import Journal
from remediation.model import Job
from remediation.service import build
from remediation.settings import Settings
from tests.realcomp import free_port, wait_until
from tests.remediation.helpers import (
    AUTH,
    LIVE_POLICY,
    TOKEN,
    alert,
    payload,
    start_service,
    topology_file,
)
from tests.slurmcluster import SlurmCluster

NODES = 20
WAIT_POLICY = LIVE_POLICY.replace(
    "checkpoint: {ack_dir: /tmp, deadline_s: 5,", "checkpoint: {ack_dir: /tmp, deadline_s: 300,"
)


class BusyBackend(DryRunBackend):
    """Dry-run plus one running job per node whose checkpoint ack never comes."""

    def jobs_on(self, node: str) -> tuple[Job, ...]:
        return (Job(f"job-{node}", "RUNNING", (node,)),)

    def job(self, job_id: str) -> Job | None:
        return Job(job_id, "RUNNING", (job_id.removeprefix("job-"),))


async def test_actions_waiting_for_acks_hold_no_thread_and_a_pause_reaches_every_step(
    tmp_path: Path,
) -> None:
    acks = tmp_path / "acks"
    acks.mkdir()
    (tmp_path / "policy.yaml").write_text(WAIT_POLICY.replace("ack_dir: /tmp", f"ack_dir: {acks}"))
    topo = topology_file(tmp_path, NODES)
    clock = FakeClock()
    s = Settings(
        policy=tmp_path / "policy.yaml",
        state_db=tmp_path / "s.db",
        webhook_token=TOKEN,
        tick_s=0.1,
        topology=topo,
    )
    side = Journal(tmp_path / "s.db")
    nodes: dict[str, dict[str, str]] = {f"gpu-node-{i:03d}": {} for i in range(1, NODES + 1)}
    svc = build(s, clock=clock, backend=BusyBackend(side, nodes, clock.now))
    busy = [alert(f"gpu-node-{i:03d}", action="checkpoint_restart") for i in range(1, 11)]
    async with TestClient(TestServer(build_app(svc))) as client:
        assert (await client.post("/alertmanager", data=payload(*busy), headers=AUTH)).status == 200
        wait = "SELECT COUNT(*) FROM actions WHERE state='waiting'"
        for _ in range(100):
            if svc.journal.scalar(wait) == 10:
                break
            await asyncio.sleep(0.05)
        assert svc.journal.scalar(wait) == 10
        # ten actions waiting (300 s ack deadline), and not one thread is held by them
        async with asyncio.timeout(5):
            assert (await client.get("/api/v1/nodes", headers=AUTH)).status == 200
            assert (await client.post("/api/v1/pause", headers=AUTH)).status == 200
        for _ in range(5):  # every ack arrives now; the next step (requeue) must not run
            for i in range(1, 11):
                (acks / f"job-gpu-node-{i:03d}.ack").write_text("{}")
            await asyncio.sleep(0.1)
        for _ in range(100):
            if svc.journal.scalar("SELECT COUNT(*) FROM actions WHERE state='paused'") == 10:
                break
            await asyncio.sleep(0.05)
        assert svc.journal.scalar("SELECT COUNT(*) FROM actions WHERE state='paused'") == 10
        requeued = "SELECT COUNT(*) FROM dry_run_effects WHERE op='requeue'"
        assert svc.journal.scalar(requeued) == 0
        await client.post("/api/v1/resume", headers=AUTH)
        for _ in range(100):  # resumed: each action goes on with its next step
            if svc.journal.scalar(requeued) == 10:
                break
            await asyncio.sleep(0.05)
        assert svc.journal.scalar(requeued) == 10
    side.close()


@pytest.mark.real
def test_sigterm_with_actions_waiting_on_a_real_slurm_exits_within_10s_and_they_resume(
    clean_slurm: SlurmCluster, tmp_path: Path, readable_dir: Path
) -> None:
    clean_slurm.cancel_all()
    live = list(clean_slurm.live)
    # the job ignores SIGUSR1 (the checkpoint request) and never acks: the action waits
    jobs = [
        clean_slurm.sbatch("--gres=gpu:1", "-w", n, "--wrap", "trap '' USR1; sleep 600")
        for n in live[:2]
    ]
    wait_until(
        lambda: all(clean_slurm.job_state(j) == "RUNNING" for j in jobs), 30, 0.2, "jobs run"
    )
    (tmp_path / "policy.yaml").write_text(
        WAIT_POLICY.replace("ack_dir: /tmp", f"ack_dir: {readable_dir}")
    )
    port = free_port()
    env = {**os.environ, **clean_slurm.env}
    proc = start_service(tmp_path, port, env, "--backend", "slurm")
    try:
        import urllib.request

        for n in live[:2]:
            req = urllib.request.Request(
                f"http://127.0.0.1:{port}/alertmanager",
                data=payload(alert(n, action="checkpoint_restart")),
                headers=AUTH,
                method="POST",
            )
            urllib.request.urlopen(req, timeout=10).close()
        db = Journal(tmp_path / "state.db")
        wait_until(
            lambda: db.scalar("SELECT COUNT(*) FROM actions WHERE state='waiting'") == 2,
            30,
            0.2,
            "actions waiting for their acks",
        )
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        took = time.monotonic() - t0
        assert took < 10, f"SIGTERM took {took:.1f}s"
        states = {r["state"] for r in db.rows("SELECT state FROM actions")}
        assert states == {"waiting"}  # resumable: the next start picks them up
        db.close()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        clean_slurm.cancel_all()
