"""Checkpoint-then-restart with a real Slurm batch job that uses the helper module.

The job counts steps, checkpoints its step to a file when asked (SIGUSR1), acks, and after
gpuwarden requeues it off the bad node it resumes from the checkpoint on another node.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from remediation import checkpoint
from remediation.app import build_app
from remediation.backends.runner import SubprocessRunner
from remediation.clock import SystemClock
from tests.realcomp import wait_until
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, payload, service
from tests.slurmcluster import SlurmCluster

JOB = """
import json, os, socket, sys, time
sys.path.insert(0, {repo!r})
from remediation import checkpoint
checkpoint.install()
d = {d!r}
state = os.path.join(d, "state.json")
step = json.load(open(state))["step"] if os.path.exists(state) else 0
node = os.environ.get("SLURMD_NODENAME", "?")
restarts = os.environ.get("SLURM_RESTART_COUNT", "0")
print(f"start step={{step}} node={{node}} restarts={{restarts}}", flush=True)
while step < 100000:
    step += 1
    time.sleep(0.05)
    if checkpoint.checkpoint_requested():
        json.dump({{"step": step}}, open(state + ".tmp", "w"))
        os.replace(state + ".tmp", state)
        checkpoint.acknowledge(step=step)
        print(f"checkpoint step={{step}} node={{node}}", flush=True)
        checkpoint.reset()
"""


def lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


@pytest.mark.real
async def test_a_real_job_checkpoints_is_requeued_off_the_bad_node_and_resumes_its_step_count(
    clean_slurm: SlurmCluster, tmp_path: Path, readable_dir: Path
) -> None:
    d = readable_dir
    repo = str(Path(__file__).resolve().parents[2])
    (d / "job.py").write_text(JOB.format(repo=repo, d=str(d)))
    out = d / "job.out"
    job = clean_slurm.sbatch(
        "--requeue",
        "--open-mode=append",
        f"--output={out}",
        "--gres=gpu:1",
        f"--export=ALL,GPUWARDEN_ACK_DIR={d}",
        "--wrap",
        f"exec python3 {d}/job.py",
    )
    wait_until(lambda: any(s.startswith("start") for s in lines(out)), 30, 0.1, "job started")
    bad = lines(out)[0].split("node=")[1].split()[0]
    policy = LIVE_POLICY.replace("ack_dir: /tmp", f"ack_dir: {d}")
    svc = service(
        tmp_path,
        policy,
        clock=SystemClock(),
        runner=SubprocessRunner(clean_slurm.env),
        backend="slurm",
    )
    async with TestClient(TestServer(build_app(svc))) as client:
        a = alert(bad, action="checkpoint_restart")
        r = await client.post("/alertmanager", data=payload(a), headers=AUTH)
        assert r.status == 200
        await svc.worker.idle(60)
        [action] = svc.journal.rows("SELECT * FROM actions")
    assert action["state"] == "done", action["outcome"]
    assert "ack received" in action["outcome"] and "running elsewhere" in action["outcome"]
    wait_until(
        lambda: len([s for s in lines(out) if s.startswith("start")]) == 2, 30, 0.1, "job restarted"
    )
    saved = json.loads((d / "state.json").read_text())["step"]
    ack = json.loads((d / f"{job}.ack").read_text())
    restart = [s for s in lines(out) if s.startswith("start")][1]
    assert ack["job"] == job and ack["step"] == saved
    assert f"start step={saved} " in restart  # the step count continues from the checkpoint
    assert f"node={bad}" not in restart and "restarts=1" in restart
    assert "DRAIN" in clean_slurm.node_state(bad)["flags"]


def test_the_helper_sees_a_signal_and_writes_an_atomic_ack(tmp_path: Path) -> None:
    import signal

    checkpoint.reset()
    checkpoint.install()
    assert not checkpoint.checkpoint_requested(str(tmp_path / "none"))
    os.kill(os.getpid(), signal.SIGUSR1)
    assert checkpoint.checkpoint_requested(str(tmp_path / "none"))
    path = checkpoint.acknowledge(str(tmp_path), "ns/pod-1", step=7)
    assert path.name == "ns_pod-1.ack" and json.loads(path.read_text())["step"] == 7
    checkpoint.reset()
    signal.signal(signal.SIGUSR1, signal.SIG_DFL)


def test_the_helper_sees_the_downward_api_annotation(tmp_path: Path) -> None:
    checkpoint.reset()
    f = tmp_path / "annotations"
    f.write_text('kubernetes.io/config.seen="x"\n')
    assert not checkpoint.checkpoint_requested(str(f))
    f.write_text(f'kubernetes.io/config.seen="x"\n{checkpoint.ANNOTATION}="1800000000"\n')
    assert checkpoint.checkpoint_requested(str(f))
