"""Validation runs fail closed on the real slurmctld: a stalled controller (SIGSTOP) is
"unknown", never "the job ended"; every conclusion ends with the suite job stopped, the
reservation gone and the node drained by gpuwarden, retried each tick until slurmctld
confirms; a service killed (-9) at any step of a run (reserving, lifting the drain,
submitting, mid-stop, between the verdict and its consequence) is reconciled on restart.

Driven synchronously (the worker's cycle by hand) on a fake clock; Slurm is real.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

import pytest

from remediation.backends.runner import SubprocessRunner
from remediation.clock import FakeClock
from remediation.journal import HELD_STATES
from remediation.service import Service
from remediation.validation.slurm import reservation_name
from tests.remediation.helpers import alert, service
from tests.remediation.test_validation_release import FIX, POLICY
from tests.slurmcluster import SlurmCluster

# The lab's two ghost nodes never answer: once slurmctld marks them down (30 s after a resume)
# they are out of service, and a 0.5 fleet budget (2 of 4) denies every drain; whether a test
# ran before or after that moment decided its outcome. Room for the ghosts plus one node.
POLICY = POLICY.replace("fleet: {max_fraction: 0.5,", "fleet: {max_fraction: 0.75,")

pytestmark = pytest.mark.real


def slow_stub(tmp: Path, seconds: float, fixture: str = "all_reduce_perf-8gpu.txt") -> Path:
    """A tool that sleeps, then prints a recorded (passing) nccl-tests output."""
    (tmp / "out.txt").write_text((FIX / fixture).read_text())
    s = tmp / "stub.sh"
    s.write_text(f"#!/bin/sh\nsleep {seconds}\ncat {tmp}/out.txt\n")
    s.chmod(0o755)
    return s


def make(sc: SlurmCluster, tmp: Path, readable: Path, clock: FakeClock, sleep: float) -> Service:
    text = (
        POLICY.replace("STUB", str(slow_stub(readable, sleep)))
        .replace("MAX", "3")
        .replace("MORE", f"out_dir: {readable / 'runs'}")
    )
    return service(tmp, text, clock=clock, runner=SubprocessRunner(sc.env), backend="slurm")


def process(svc: Service) -> None:
    for _, a in svc.journal.todo():
        svc.engine.decide(a)
    for row in svc.journal.pending_actions():
        svc.executor.run(row)


def quarantined_then_probation_over(svc: Service, node: str, clock: FakeClock) -> None:
    firing = alert(node, "nvlink", "drain", alertname="GpuNvlinkDown")
    svc.journal.accept([firing], clock.now())
    process(svc)
    resolved = alert(node, "nvlink", "drain", status="resolved", alertname="GpuNvlinkDown")
    svc.journal.accept([resolved], clock.now())
    process(svc)
    clock.advance(61)


def last_run(svc: Service, node: str) -> dict:  # type: ignore[type-arg]
    [r] = svc.journal.rows(
        "SELECT * FROM validations WHERE node=? ORDER BY id DESC LIMIT 1", (node,)
    )
    return r


def ctld(sc: SlurmCluster) -> subprocess.Popen[bytes]:
    return next(p for p in sc.procs if "slurmctld" in str(p.args[0]))


@contextmanager
def stalled(sc: SlurmCluster) -> Iterator[None]:
    p = ctld(sc)
    os.kill(p.pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(p.pid, signal.SIGCONT)
        deadline = time.monotonic() + 30
        while "UP" not in sc.run("scontrol", "ping", check=False):
            assert time.monotonic() < deadline, "slurmctld did not come back"
            time.sleep(0.2)


def reservation_days_left(sc: SlurmCluster, node: str) -> float:
    text = sc.run("scontrol", "show", "-o", "reservation", reservation_name(node))
    end = next(w[8:] for w in text.split() if w.startswith("EndTime="))
    return (datetime.fromisoformat(end).timestamp() - time.time()) / 86400


def assert_out_by_gpuwarden(sc: SlurmCluster, node: str) -> None:
    st = sc.node_state(node)
    assert "DRAIN" in st["flags"] and st["reason"].startswith("gpuwarden: validation")
    assert reservation_name(node) not in sc.run("scontrol", "show", "reservation", check=False)
    jobs = sc.run("squeue", "-h", "-n", f"gpuwarden-validate-{node}", "-o", "%T", check=False)
    assert jobs.strip() in ("", "COMPLETING", "CANCELLED")


def test_a_stalled_slurmctld_mid_validation_is_unknown_then_the_node_is_drained_when_it_answers(
    clean_slurm: SlurmCluster, readable_dir: Path, tmp_path: Path
) -> None:
    sc, node, clock = clean_slurm, clean_slurm.live[0], FakeClock()
    svc = make(sc, tmp_path, readable_dir, clock, sleep=60)
    quarantined_then_probation_over(svc, node, clock)
    svc.engine.tick()  # the suite starts: a real job in our reservation, the drain lifted
    run = last_run(svc, node)
    assert run["state"] == "running" and run["handle"]
    assert reservation_days_left(sc, node) > 30  # never lapses under the lifted drain
    with stalled(sc):
        svc.engine.tick()  # squeue fails: unknown, not "ended"
        assert last_run(svc, node)["state"] == "running"
        clock.advance(run["deadline"] - clock.now() + 1)
        svc.engine.tick()  # overdue: concluded failed; the stop cannot be confirmed yet
        stuck = last_run(svc, node)
        assert stuck["state"] == "stopping" and stuck["final"] == "failed"
        assert "does not answer" in stuck["reason"] and stuck["stop_tries"] == 1
        assert svc.journal.node(node)["state"] == "validating"  # type: ignore[index]
    svc.engine.tick()  # slurmctld answers: stopped, drained, reservation gone
    done = last_run(svc, node)
    assert done["state"] == "failed"
    assert_out_by_gpuwarden(sc, node)
    process(svc)  # the escalation (one rung up the ladder) acts on a drained node
    decisions = svc.journal.rows(
        "SELECT guard, reason FROM decisions WHERE node=? AND action!='validate' ORDER BY id",
        (node,),
    )
    assert not [d for d in decisions if d["guard"] == "ownership"], decisions
    acts = svc.journal.rows("SELECT action, state FROM actions ORDER BY id")
    assert acts[-1] == {"action": "checkpoint_restart", "state": "done"}
    assert svc.journal.scalar("SELECT COUNT(*) FROM decisions WHERE action='validate'") <= 4


CHILD = """
import os, signal, sys
from remediation.backends.runner import SubprocessRunner
from remediation.clock import FakeClock
from remediation.journal import HELD_STATES
from tests.remediation.helpers import service
from tests.remediation.test_validation_failclosed_slurm import quarantined_then_probation_over

class Dies(SubprocessRunner):
    armed = sys.argv[4] == "-"  # else: armed once a command holding argv[4] has run

    def run(self, argv, timeout=10.0):
        r = super().run(argv, timeout)
        line = " ".join(argv)
        if Dies.armed and sys.argv[3] in line:
            os.kill(os.getpid(), signal.SIGKILL)  # right after that command returned
        if not Dies.armed and sys.argv[4] in line:
            Dies.armed = True
        return r

tmp, node = sys.argv[1], sys.argv[2]
from pathlib import Path
import json
env = json.loads(Path(tmp, "env.json").read_text())
clock = FakeClock()
svc = service(Path(tmp), Path(tmp, "policy.yaml").read_text(), clock=clock,
              runner=Dies(env), backend="slurm")
quarantined_then_probation_over(svc, node, clock)
svc.engine.tick()  # the run starts
clock.advance(100000)
svc.engine.tick()  # past its deadline: concluded failed, stopped, escalated
print("not killed; decisions:", [dict(r) for r in svc.journal.rows(
    "SELECT action, verdict, guard, reason FROM decisions WHERE node=? ORDER BY id", (node,))])
"""

# (kill -9 right after the command holding this, armed after one holding that ("-": at
# once)): every step of a run, from its reservation to its verdict's consequence
STEPS = {
    "reservation created": ("create reservation", "-"),
    "drain lifted": ("State=RESUME", "-"),
    "suite submitted": ("sbatch", "-"),
    "mid-stop": ("scancel", "-"),
    "verdict, before the escalation": ("", "show -o node"),
}


@pytest.mark.parametrize("step", list(STEPS))
def test_a_service_killed_at_any_step_of_a_run_leaves_the_node_out_by_gpuwarden_after_restart(
    clean_slurm: SlurmCluster, readable_dir: Path, tmp_path: Path, step: str
) -> None:
    import json

    sc, node = clean_slurm, clean_slurm.live[1]
    for ghost in sc.ghosts:  # as slurmctld has them sooner or later: out of service
        sc.run("scontrol", "update", f"NodeName={ghost}", "State=DOWN", "Reason=ghost")
    text = (
        POLICY.replace("STUB", str(slow_stub(readable_dir, 60)))
        .replace("MAX", "3")
        .replace("MORE", f"out_dir: {readable_dir / 'runs'}")
    )
    (tmp_path / "policy.yaml").write_text(text)
    (tmp_path / "env.json").write_text(json.dumps(sc.env))
    root = Path(__file__).resolve().parents[2]
    child = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(CHILD), str(tmp_path), node, *STEPS[step]],
        env={**os.environ, "PYTHONPATH": str(root)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stdout[-500:] + child.stderr[-2000:]
    svc = service(tmp_path, text, clock=FakeClock(), runner=SubprocessRunner(sc.env),
                  backend="slurm")  # fmt: skip
    run = last_run(svc, node)
    if step in ("drain lifted", "suite submitted"):
        assert "DRAIN" not in sc.node_state(node)["flags"]  # lifted into our reservation
    if step in ("reservation created", "drain lifted", "suite submitted"):
        assert run["state"] == "running" and not run["handle"]  # killed before saving it
    elif step == "mid-stop":
        assert run["state"] == "stopping" and run["handle"]
    else:
        assert run["state"] == "failed"
        assert svc.journal.node(node)["state"] == "validating"  # type: ignore[index]
    svc.engine.tick()  # reconciled: whatever the run left is stopped, the node drained
    process(svc)
    done = last_run(svc, node)
    assert done["state"] == "failed"
    if step in ("reservation created", "drain lifted", "suite submitted"):
        assert "run lost" in done["reason"]
    else:
        assert "timed out" in done["reason"]
    assert_out_by_gpuwarden(sc, node)
    rec = svc.journal.node(node)
    assert rec is not None and rec["state"] in HELD_STATES  # held, never released


def parked(svc: Service, node: str) -> str:
    [row] = [n for n in svc.nodes() if n["node"] == node]
    return str(row["parked"] or "")


def test_a_pause_starts_no_validation_and_parks_a_passed_runs_release_until_resume(
    clean_slurm: SlurmCluster, readable_dir: Path, tmp_path: Path
) -> None:
    sc, node, clock = clean_slurm, clean_slurm.live[0], FakeClock()
    svc = make(sc, tmp_path, readable_dir, clock, sleep=1)
    quarantined_then_probation_over(svc, node, clock)
    svc.engine.set_paused(True, "test")
    svc.engine.tick()  # probation is over, but paused: no suite, no release
    assert svc.validator.list(node, 5) == []
    assert sc.node_state(node)["reason"].startswith("gpuwarden: drain nvlink")
    assert "wait for resume" in parked(svc, node)
    svc.engine.set_paused(False, "test")
    svc.engine.tick()  # the suite starts
    assert last_run(svc, node)["state"] == "running"
    svc.engine.set_paused(True, "test")
    deadline = time.monotonic() + 60
    while last_run(svc, node)["state"] in ("running", "stopping"):
        assert time.monotonic() < deadline, "the suite did not end"
        time.sleep(0.5)
        svc.engine.tick()
    assert last_run(svc, node)["state"] == "passed"
    st = sc.node_state(node)  # out again, not resumed while paused
    assert "DRAIN" in st["flags"] and st["reason"] == "gpuwarden: validation passed"
    assert "release waits for resume" in parked(svc, node)
    svc.engine.tick()
    assert "DRAIN" in sc.node_state(node)["flags"]
    svc.engine.set_paused(False, "test")
    svc.engine.tick()  # resumed: the parked release goes ahead
    assert svc.journal.node(node)["state"] == "released"  # type: ignore[index]
    assert "DRAIN" not in sc.node_state(node)["flags"]
    assert parked(svc, node) == ""
