"""kill -9 at random moments of a checkpoint-then-restart against the real slurmctld of
the e2e harness (8 in `make test`, 40 in `make soak`: GPUWARDEN_CRASH_RUNS): after each restart the saga is finished from Slurm's real state. Nothing
is done twice (one drain, one requeuehold per run: the scontrol calls are logged by a
pass-through shim), no job is left held, and no drain of ours is orphaned."""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import time
import urllib.request
from pathlib import Path

import pytest

from tests.realcomp import free_port, wait_until
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, payload, start_service
from tests.slurmcluster import SlurmCluster

RUNS = int(os.environ.get("GPUWARDEN_CRASH_RUNS", "8"))
JOB = """
import os, sys, time
sys.path.insert(0, {repo!r})
from remediation import checkpoint
checkpoint.install()
print("start", os.environ.get("SLURMD_NODENAME"), os.environ.get("SLURM_RESTART_COUNT", "0"), flush=True)
while True:
    time.sleep(0.05)
    if checkpoint.checkpoint_requested():
        checkpoint.acknowledge()
        checkpoint.reset()
"""


def post(port: int, body: bytes) -> None:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/alertmanager", data=body, headers=AUTH, method="POST"
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def progress(db_path: Path) -> str:
    """The action's state and its steps so far, e.g. ``waiting: take_out,jobs,signal:3``."""
    db = sqlite3.connect(db_path)
    try:
        steps = [f"{r[0]}" for r in db.execute("SELECT step FROM steps WHERE state='done'")]
        row = db.execute("SELECT state FROM actions").fetchone()
        return f"{row[0] if row else 'undecided'}: {','.join(steps)}"
    finally:
        db.close()


def action_state(db_path: Path) -> str:
    db = sqlite3.connect(db_path)
    try:
        row = db.execute("SELECT state FROM actions ORDER BY id DESC LIMIT 1").fetchone()
        return row[0] if row else ""
    finally:
        db.close()


def squeue(sc: SlurmCluster) -> list[dict[str, object]]:
    return list(json.loads(sc.run("squeue", "--json"))["jobs"])


@pytest.mark.real
@pytest.mark.slow
def test_kill_9_at_random_moments_of_a_checkpoint_restart_repeats_nothing_leaves_nothing(
    clean_slurm: SlurmCluster, tmp_path: Path, readable_dir: Path
) -> None:
    rng = random.Random(18)
    d = readable_dir
    repo = str(Path(__file__).resolve().parents[2])
    (d / "job.py").write_text(JOB.format(repo=repo))
    (d / "scontrol").write_text(
        f'#!/bin/sh\necho "$*" >> {d}/calls.log\nexec /usr/bin/scontrol "$@"\n'
    )
    (d / "scontrol").chmod(0o755)
    env = {**clean_slurm.env, "PATH": f"{d}:{os.environ['PATH']}"}
    policy = LIVE_POLICY.replace("ack_dir: /tmp", f"ack_dir: {d}")
    summary: dict[str, list[str] | int] = {"killed_in": [], "twice": 0, "held": 0, "orphaned": 0}
    for run in range(RUNS):
        kill_at = rng.choice([rng.uniform(0, 0.4), rng.uniform(0.4, 2), rng.uniform(2, 5)])
        one = once(clean_slurm, d, tmp_path / f"run{run}", env, policy, run, kill_at)
        summary["killed_in"].append(one.pop("killed_in"))  # type: ignore[union-attr, arg-type]
        for k, v in one.items():
            summary[k] += v  # type: ignore[operator]
    print(json.dumps(summary))
    assert (summary["twice"], summary["held"], summary["orphaned"]) == (0, 0, 0), summary


def once(
    sc: SlurmCluster, d: Path, w: Path, env: dict[str, str], policy: str, run: int, kill_at: float
) -> dict[str, int | str]:
    sc.reset_nodes()
    (d / "calls.log").write_text("")
    w.mkdir()
    (w / "policy.yaml").write_text(policy)
    job = sc.sbatch(
        "--requeue", "--gres=gpu:1", f"--output={d}/job{run}.out", "--open-mode=append",
        f"--export=ALL,GPUWARDEN_ACK_DIR={d}", "--wrap", f"exec python3 {d}/job.py",
    )  # fmt: skip
    # "start" follows checkpoint.install(): a SIGUSR1 sent before it would kill the job
    out = d / f"job{run}.out"
    wait_until(lambda: out.exists() and "start" in out.read_text(), 30, 0.1, "job started")
    node = sc.job_nodes(job)
    port = free_port()
    proc = start_service(w, port, env, "--backend", "slurm")
    try:
        post(port, payload(alert(node, action="checkpoint_restart", fp=f"k{run}")))
        time.sleep(kill_at)
        killed_in = progress(w / "state.db")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        proc = start_service(w, free_port(), env, "--backend", "slurm")
        # 300 s: the restarted service's checkpoint wait and slurmctld's requeue take ~60-100 s
        # on 2 cores beside the other test workers; 90 s timed out once in a full run, and
        # 180 s once when both kill -9 tests ran beside each other (xdist --dist loadscope)
        wait_until(lambda: action_state(w / "state.db") in ("done", "failed"), 300, 0.2, "done")
    finally:
        proc.kill()
        proc.wait(10)
    calls = (d / "calls.log").read_text().splitlines()
    drains = [c for c in calls if "State=DRAIN" in c and f"NodeName={node}" in c]
    holds = [c for c in calls if c.startswith(f"requeuehold {job}")]
    held = sum(1 for j in squeue(sc) if str(j.get("state_reason", "")).startswith("JobHeld"))
    db = sqlite3.connect(w / "state.db")
    ours = {
        r[0]
        for r in db.execute(
            "SELECT node FROM nodes WHERE state IN "
            "('quarantined','probation','inspection','action_failed')"
        )
    }
    state = db.execute("SELECT state, outcome FROM actions").fetchone()
    db.close()
    orphaned = 0
    for n in sc.nodes:
        st = sc.node_state(n)
        if "DRAIN" in st["flags"] and st["reason"].startswith("gpuwarden:"):
            orphaned += int(n not in ours)
    assert state[0] == "done", state
    return {
        "killed_in": killed_in,
        "twice": int(len(drains) > 1 or len(holds) > 1),
        "held": held,
        "orphaned": orphaned,
    }
