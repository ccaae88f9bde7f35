"""Rolling maintenance on the real slurmctld of the lab (4 slurmd, a job on each node),
the issue's shape: a wave of 2 under a fleet budget of 2 with one node already out for a
fault, a validation suite that fails on one node, and a kill -9 of the service mid-run.

Checked: no job is requeued without its checkpoint ack (each job's own log: every restart
follows an ``ack``); the nodes out of service (drained, down or in a MAINT reservation, as
sinfo shows them, sampled every 0.1 s) never exceed the budget; the node failing its suite
stays drained with its reason and is quarantined in the journal (the fault path); the others
are back in service; the run, resumed after the kill, finishes."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import pytest

from remediation.backends import slurmstate
from tests.realcomp import free_port, wait_until
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, payload, start_service
from tests.slurmcluster import SlurmCluster, slurm_cluster

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation" / "all_reduce_perf-8gpu.txt"
BAD = "gpu-node-002"  # its suite fails
FAULTY = "gpu-node-004"  # out for a fault before the run starts
JOB = """
import os, sys, time
sys.path.insert(0, {repo!r})
from remediation import checkpoint
checkpoint.install()
print("start", os.environ.get("SLURMD_NODENAME"), os.environ.get("SLURM_RESTART_COUNT", "0"), flush=True)
while True:
    time.sleep(0.05)
    if checkpoint.checkpoint_requested():
        time.sleep(0.5)  # the checkpoint is written
        print("ack", flush=True)
        checkpoint.acknowledge()
        checkpoint.reset()
"""


@pytest.fixture(scope="module")
def slurm4() -> Iterator[SlurmCluster]:
    with slurm_cluster(live=4, ghosts=0) as sc:
        yield sc


def policy(d: Path) -> str:
    suite = (
        f"validation:\n  out_dir: {d}/val\n  suites:\n    post-maintenance:\n"
        f"      - {{name: nccl, command: [sh, -c, 'test \"$SLURMD_NODENAME\" != {BAD} && cat {FIX}'],"
        " timeout_s: 30, parser: nccl-tests, min: {busbw_at_max_size_gbps: 100}}\n"
    )
    return (
        LIVE_POLICY.replace("ack_dir: /tmp", f"ack_dir: {d}")
        .replace("deadline_s: 5,", "deadline_s: 60,")
        .replace(
            "fleet: {max_fraction: 0.5, max_nodes: 100}", "fleet: {max_fraction: 1.0, max_nodes: 2}"
        )
        + suite
    )


def api(port: int, method: str, path: str, body: object = None) -> tuple[int, dict]:
    data = json.dumps(body).encode() if body is not None else (b"" if method == "POST" else None)
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method,
                                 headers={**AUTH, "Content-Type": "application/json"})  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"{}")


def out_of_service(sc: SlurmCluster) -> set[str]:
    nodes = json.loads(sc.run("sinfo", "--json"))["nodes"]
    return {str(n["name"]) for n in nodes if slurmstate.out_of_service(n) or n.get("reservation")}


def start_jobs(sc: SlurmCluster, d: Path, nodes: Iterable[str]) -> dict[str, str]:
    """One checkpointing job (JOB) pinned to each node, running; node -> job id."""
    repo = str(Path(__file__).resolve().parents[2])
    (d / "job.py").write_text(JOB.format(repo=repo))
    jobs = {}
    for node in nodes:
        jobs[node] = sc.sbatch(
            "--requeue", "--gres=gpu:1", f"--nodelist={node}", f"--output={d}/{node}.out",
            "--open-mode=append", f"--export=ALL,GPUWARDEN_ACK_DIR={d}",
            "--wrap", f"exec python3 {d}/job.py",
        )  # fmt: skip
    # "start" is printed after checkpoint.install(): a SIGUSR1 before it would kill the job
    # (Python's default for the signal), which then is never requeued
    for node, job in jobs.items():
        out = d / f"{node}.out"
        wait_until(lambda o=out: o.exists() and "start" in o.read_text(), 60, 0.2,
                   f"job {job} running with its checkpoint handler")  # fmt: skip
    return jobs


def wait_or_dump(sc: SlurmCluster, tmp_path: Path, done: Callable[[], bool], timeout: float,
                 what: str) -> None:  # fmt: skip
    """wait_until, printing the run's nodes, Slurm's view and the service's log on a timeout."""
    try:
        wait_until(done, timeout, 0.5, what)
    except TimeoutError:
        c = sqlite3.connect(tmp_path / "state.db")
        print(c.execute("SELECT node, state, detail FROM maintenance_nodes").fetchall())
        print(sc.run("sinfo", "-N", "-o", "%N %T %E"), sc.run("squeue"))
        print((tmp_path / "log").read_text()[-4000:])
        raise


def finished(tmp_path: Path) -> Callable[[], bool]:
    return lambda: run_state(tmp_path / "state.db")[0] in ("done", "stopped")


class Sampler(threading.Thread):
    def __init__(self, sc: SlurmCluster) -> None:
        super().__init__(daemon=True)
        self.sc, self.max_out, self.samples, self.stop = sc, 0, 0, threading.Event()
        self.worst: set[str] = set()

    def run(self) -> None:
        while not self.stop.is_set():
            try:
                out = out_of_service(self.sc)
            except Exception:
                continue
            self.samples += 1
            if len(out) > self.max_out:
                self.max_out, self.worst = len(out), out
            time.sleep(0.1)


def run_state(db: Path) -> tuple[str, dict[str, str]]:
    c = sqlite3.connect(db)
    try:
        row = c.execute("SELECT state FROM maintenance_runs ORDER BY id DESC LIMIT 1").fetchone()
        nodes = dict(c.execute("SELECT node, state FROM maintenance_nodes").fetchall())
    except sqlite3.OperationalError:
        return "", {}
    finally:
        c.close()
    return (row[0] if row else ""), nodes


@pytest.mark.real
@pytest.mark.slow
def test_a_rolling_wave_on_real_slurm_keeps_the_budget_checkpoints_every_job_and_survives_kill_9(
    slurm4: SlurmCluster, tmp_path: Path, readable_dir: Path
) -> None:
    sc, d = slurm4, readable_dir
    sc.reset_nodes()
    (d / "val").mkdir()
    (d / "val").chmod(0o777)
    (tmp_path / "policy.yaml").write_text(policy(d))
    jobs = start_jobs(sc, d, sc.nodes)
    env = {**sc.env}
    port = free_port()
    proc = start_service(tmp_path, port, env, "--backend", "slurm")
    sampler = Sampler(sc)
    try:
        req = urllib.request.Request(f"http://127.0.0.1:{port}/alertmanager", method="POST",
                                     data=payload(alert(FAULTY, action="cordon")), headers=AUTH)  # fmt: skip
        urllib.request.urlopen(req, timeout=10).close()
        wait_until(lambda: FAULTY in out_of_service(sc), 30, 0.2, "the faulty node drained")
        sampler.start()
        body = {
            "select": {"nodes": "gpu-node-[001-003]"},
            "operation": {"kind": "command", "argv": ["sh", "-c", f"sleep 2; echo {{node}} >> {d}/ops.log"]},
            "wave_size": 2, "max_failures": 1, "drain_deadline_s": 120,
            "suite": "post-maintenance", "reason": "driver 550 -> 560",
        }  # fmt: skip
        status, plan = api(port, "POST", "/api/v1/maintenance/plan", body)
        assert status == 200, plan
        assert plan["waves"] == [["gpu-node-001", "gpu-node-002"], ["gpu-node-003"]]
        assert plan["out_now"] == [FAULTY] and plan["headroom"] == 1
        status, run = api(port, "POST", "/api/v1/maintenance", body)
        assert status == 201, run
        # kill -9 once the first node is being operated on or validated
        wait_until(lambda: any(s in ("operating", "validating") for s in
                               run_state(tmp_path / "state.db")[1].values()), 90, 0.1, "operating")  # fmt: skip
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        killed_at = run_state(tmp_path / "state.db")
        port = free_port()
        proc = start_service(tmp_path, port, env, "--backend", "slurm")
        # the failed node is kept out: with the faulty one that is the whole budget, so
        # the last node waits until the operator puts the faulty node back
        wait_or_dump(sc, tmp_path, lambda: run_state(tmp_path / "state.db")[1].get(BAD) == "failed",
                     150, "the bad node failed")  # fmt: skip
        time.sleep(2)
        waiting = run_state(tmp_path / "state.db")[1]["gpu-node-003"]
        status, rel = api(port, "POST", f"/api/v1/nodes/{FAULTY}/release")
        assert status == 200 and rel["released"], rel
        wait_or_dump(sc, tmp_path, finished(tmp_path), 150, "the run finished")
    finally:
        sampler.stop.set()
        proc.kill()
        proc.wait(10)
    state, nodes = run_state(tmp_path / "state.db")
    print(json.dumps({"killed_at": killed_at, "final": [state, nodes], "max_out": sampler.max_out,
                      "worst": sorted(sampler.worst), "samples": sampler.samples}))  # fmt: skip
    assert state == "done", nodes
    assert waiting == "pending"  # held back by the budget, not by the wave
    assert nodes == {"gpu-node-001": "done", BAD: "failed", "gpu-node-003": "done"}
    # the budget (2, with the faulty node counted) held at every sample
    assert sampler.samples > 50 and sampler.max_out <= 2, (sampler.max_out, sampler.worst)
    # the failing node is kept out with its reason, and held in the fault path
    st = sc.node_state(BAD)
    assert "DRAIN" in st["flags"] and st["reason"].startswith("gpuwarden:"), st
    db = sqlite3.connect(tmp_path / "state.db")
    held = db.execute("SELECT state, reason FROM nodes WHERE node=?", (BAD,)).fetchone()
    db.close()
    assert held[0] == "quarantined" and "validation failed" in held[1], held
    for node in ("gpu-node-001", "gpu-node-003"):
        assert "DRAIN" not in sc.node_state(node)["flags"], sc.node_state(node)
    # the operation ran on every node (once, unless the kill fell between its start and
    # the commit of its handle: then it is started again, which operations must allow)
    assert set((d / "ops.log").read_text().split()) == {"gpu-node-001", BAD, "gpu-node-003"}
    # no job was killed without its checkpoint: every restart follows an ack
    for node, job in jobs.items():
        lines = (d / f"{node}.out").read_text().split("\n")
        acks = 0
        for line in lines:
            if line == "ack":
                acks += 1
            elif line.startswith("start ") and int(line.split()[2]) > 0:
                assert acks >= int(line.split()[2]), (job, lines)
    sc.cancel_all()


def reboots(sc: SlurmCluster) -> list[str]:
    """The nodes the lab's RebootProgram rebooted, in order (log/reboots)."""
    log = sc.dir / "log" / "reboots"
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


@pytest.mark.real
@pytest.mark.slow
def test_a_slurm_reboot_wave_reboots_each_node_once_through_slurmctld_and_puts_it_back(
    slurm4: SlurmCluster, tmp_path: Path, readable_dir: Path
) -> None:
    """The slurm_reboot operation on the real slurmctld: ``scontrol reboot ASAP
    nextstate=DOWN`` runs the lab's RebootProgram on each node's slurmd (which comes back
    reporting a reboot), one node at a time under a budget of 1, the job on each node
    checkpointed before; the node is validated and returned to service, and nothing is
    rebooted twice or while its job still ran."""
    sc, d = slurm4, readable_dir
    sc.reset_nodes()
    before = len(reboots(sc))
    (d / "val").mkdir()
    (d / "val").chmod(0o777)
    (tmp_path / "policy.yaml").write_text(
        policy(d).replace(
            "fleet: {max_fraction: 1.0, max_nodes: 2}", "fleet: {max_fraction: 1.0, max_nodes: 1}"
        )
    )
    targets = ("gpu-node-001", "gpu-node-003")
    jobs = start_jobs(sc, d, targets)
    port = free_port()
    proc = start_service(tmp_path, port, {**sc.env}, "--backend", "slurm")
    sampler = Sampler(sc)
    sampler.start()
    try:
        body = {
            "select": {"nodes": ",".join(targets)}, "operation": {"kind": "slurm_reboot"},
            "wave_size": 1, "max_failures": 0, "drain_deadline_s": 120,
            "suite": "post-maintenance", "reason": "firmware 1.2 -> 1.3",
        }  # fmt: skip
        status, run = api(port, "POST", "/api/v1/maintenance", body)
        assert status == 201, run
        wait_or_dump(sc, tmp_path, finished(tmp_path), 240, "the run finished")
    finally:
        sampler.stop.set()
        proc.kill()
        proc.wait(10)
    state, nodes = run_state(tmp_path / "state.db")
    assert state == "done" and nodes == dict.fromkeys(targets, "done"), nodes
    # each node rebooted once, by slurmctld through its RebootProgram
    assert sorted(reboots(sc)[before:]) == sorted(targets)
    # one node out at a time: the budget of 1 held at every sample
    assert sampler.samples > 20 and sampler.max_out <= 1, (sampler.max_out, sampler.worst)
    for node in targets:  # back in service, no reboot pending; slurmctld hears its new
        # slurmd (a ping it missed while the machine was busy is a flag until the next one)
        def serving(n: str = node) -> bool:
            st = sc.node_state(n)
            return st["state"] in ("idle", "mixed", "allocated") and not st["flags"]

        wait_until(serving, 60, 0.5, f"{node} back in service")
        # the job was checkpointed before its node went down, and is queued again, not lost
        # (slurmstepd's requeue line can land after the node is back, on 2 loaded cores)
        out = d / f"{node}.out"
        wait_until(lambda o=out: "DUE TO JOB REQUEUE" in o.read_text(), 60, 0.5,
                   f"{node}'s job requeued: {out.read_text()[-800:]!r}")  # fmt: skip
        lines = out.read_text().split("\n")
        requeued = next(i for i, ln in enumerate(lines) if "DUE TO JOB REQUEUE" in ln)
        assert "ack" in lines[:requeued], lines
        assert sc.job_state(jobs[node]) in ("PENDING", "RUNNING"), sc.job_state(jobs[node])
    sc.cancel_all()
