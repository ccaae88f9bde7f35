"""The GPU reset rung end to end on the real slurmctld, with a fake ``nvidia-smi`` on the
node that succeeds, fails or hangs: an XID whose resolution is a GPU reset
(``reset_suffices="true"``) gets ``reset_gpu`` instead of ``reboot``; the reset runs as a
batch job in gpuwarden's reservation; success re-drains the node for the normal probation and
release; failure or a hang falls back to the reboot rung with the evidence journaled; a
restart mid-reset (the journal as left by kill -9) continues without a second job."""

from __future__ import annotations

import json
import os
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remediation.backends.runner import SubprocessRunner
from remediation.clock import FakeClock
from remediation.service import Service
from remediation.validation.slurm import reservation_name
from tests.remediation.helpers import LIVE_POLICY, alert, service
from tests.slurmcluster import SlurmCluster

pytestmark = pytest.mark.real
REPO = Path(__file__).resolve().parents[2]

# the catch-all rule for xid_fatal also allows reset_gpu; the ladder still says reboot
ALLOW = "checkpoint_restart, reboot, inspect]"
POLICY = (
    LIVE_POLICY.replace(ALLOW, ALLOW.replace("reboot,", "reboot, reset_gpu,"), 1)
    + "reset_gpu: {timeout_s: 3, deadline_s: 40}\nvalidation: {out_dir: OUT}\n"
)

# A stand-in for nvidia-smi on the node: logs its arguments, then does what ./mode says;
# -q prints ./smi-q.txt (a recorded R535 output of a healthy H100, fixtures/gpureset/).
FAKE = """#!/bin/sh
d=$(dirname "$0")
echo "$*" >> "$d/calls.log"
case "$*" in
  *--query-gpu=persistence_mode*) echo Enabled; exit 0 ;;
  *-pm*) exit 0 ;;
  *-r*)
    case $(cat "$d/mode") in
      ok) echo "GPU 00000000:3B:00.0 was successfully reset."; exit 0 ;;
      fail) echo "Unable to reset GPU 00000000:3B:00.0: In use by another client"; exit 1 ;;
      hang) sleep 30; exit 0 ;;
      slow) sleep 6; echo "GPU 00000000:3B:00.0 was successfully reset."; exit 0 ;;
    esac ;;
  *-q*) cat "$d/smi-q.txt"; exit 0 ;;
esac
exit 0
"""


@pytest.fixture
def fake_smi(readable_dir: Path) -> Path:
    d = readable_dir / "bin"
    d.mkdir()
    tool = d / "nvidia-smi"
    tool.write_text(FAKE)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC | stat.S_IXGRP | stat.S_IXOTH)
    (d / "mode").write_text("ok\n")
    shutil.copy(REPO / "fixtures/gpureset/smi-q-r535.161-h100.txt", d / "smi-q.txt")
    return d


@pytest.fixture
def svc(clean_slurm: SlurmCluster, readable_dir: Path, fake_smi: Path,
        tmp_path: Path) -> Iterator[Service]:  # fmt: skip
    yield build(clean_slurm, readable_dir, fake_smi, tmp_path)
    for n in clean_slurm.live:
        clean_slurm.run("scontrol", "cancel_reboot", n, check=False)
        clean_slurm.run("scontrol", "delete", f"ReservationName={reservation_name(n)}", check=False)


def build(sc: SlurmCluster, out: Path, fake: Path, tmp: Path, timeout_s: int = 3) -> Service:
    env = {**sc.env, "PATH": f"{fake}{os.pathsep}{sc.env['PATH']}"}
    text = POLICY.replace("OUT", str(out / "runs")).replace(
        "timeout_s: 3", f"timeout_s: {timeout_s}"
    )
    return service(tmp, text, clock=FakeClock(), runner=SubprocessRunner(env), backend="slurm")


def xid_alert(node: str) -> Any:
    return alert(node, "xid_fatal", "reboot", alertname="GpuXidFatalHardware", gpu="3", xid="79",
                 reset_suffices="true")  # fmt: skip


def drive(svc: Service, aid: int, timeout: float = 60.0) -> tuple[str, str]:
    """Run the action tick by tick (the worker's job) until it is no longer waiting."""
    deadline = time.monotonic() + timeout
    while True:
        [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
        state, outcome = svc.executor.run(row)
        if state not in ("waiting", "pending") or time.monotonic() > deadline:
            return state, outcome
        time.sleep(0.5)


def steps(svc: Service, aid: int) -> dict[str, tuple[str, str]]:
    rows = svc.journal.rows("SELECT step, state, detail FROM steps WHERE action_id=?", (aid,))
    return {r["step"]: (r["state"], r["detail"] or "") for r in rows}


def test_a_reset_that_works_redrains_the_node_for_probation_and_never_reboots(
    svc: Service, clean_slurm: SlurmCluster, fake_smi: Path
) -> None:
    node = clean_slurm.live[0]
    aid = svc.engine.decide(xid_alert(node))
    assert aid is not None
    [act] = svc.journal.rows("SELECT action FROM actions WHERE id=?", (aid,))
    assert act["action"] == "reset_gpu"  # the reboot rung, replaced: a reset suffices
    state, outcome = drive(svc, aid)
    assert state == "done", outcome
    assert "GPU 3 reset and verified" in outcome
    calls = (fake_smi / "calls.log").read_text()
    assert "-r -i 3" in calls and "-i 3 -pm 0" in calls and "-i 3 -pm 1" in calls
    st = clean_slurm.node_state(node)
    assert "DRAIN" in st["flags"] and st["reason"] == "gpuwarden: validation gpu reset passed"
    assert "reboot" not in steps(svc, aid)
    assert reservation_name(node) not in clean_slurm.run("scontrol", "show", "reservation")
    verdict = json.loads(steps(svc, aid)["reset_verdict"][1])
    assert verdict["passed"] is True and verdict["reset"]["exit_code"] == 0
    assert svc.journal.node(node)["state"] == "quarantined"  # type: ignore[index]


@pytest.mark.parametrize(("mode", "why"), [
    ("fail", "the reset command failed (exit 1)"),
    ("hang", "the reset command timed out"),
])  # fmt: skip
def test_a_reset_that_fails_or_hangs_falls_back_to_reboot_with_its_evidence(
    svc: Service, clean_slurm: SlurmCluster, fake_smi: Path, mode: str, why: str
) -> None:
    node = clean_slurm.live[0]
    (fake_smi / "mode").write_text(mode + "\n")
    aid = svc.engine.decide(xid_alert(node))
    assert aid is not None
    _, outcome = drive(svc, aid)
    s = steps(svc, aid)
    verdict = json.loads(s["reset_verdict"][1])
    assert verdict["passed"] is False and verdict["why"] == why
    if mode == "fail":
        assert "In use by another client" in verdict["reset"]["output"]
    head = f"GPU reset failed: {why}; fell back to reboot"
    assert s["fallback"] == ("done", head)
    assert head in outcome  # the lab has no RebootProgram: the reboot fails, retried
    assert "reboot" in s  # the next rung was asked of Slurm
    assert reservation_name(node) not in clean_slurm.run("scontrol", "show", "reservation")


def test_a_restart_mid_reset_continues_without_submitting_a_second_job(
    svc: Service, clean_slurm: SlurmCluster, readable_dir: Path, fake_smi: Path, tmp_path: Path
) -> None:
    node = clean_slurm.live[0]
    (fake_smi / "mode").write_text("hang\n")  # long enough to be mid-reset
    svc.journal.close()
    (tmp_path / "first").mkdir()
    svc = build(clean_slurm, readable_dir, fake_smi, tmp_path / "first", timeout_s=12)
    aid = svc.engine.decide(xid_alert(node))
    assert aid is not None
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    assert svc.executor.run(row)[0] == "waiting"
    # kill -9 between the submit and its journal write: the step reads 'started'
    with svc.journal.tx() as db:
        db.execute("UPDATE steps SET state='started', detail='' WHERE action_id=? AND "
                   "step='reset_start'", (aid,))  # fmt: skip
    svc.journal.close()
    again = build(clean_slurm, readable_dir, fake_smi, tmp_path / "first", 12)  # same journal
    state, outcome = drive(again, aid)
    assert "reconciled" not in outcome and state in ("done", "failed", "retry", "deferred")
    assert (fake_smi / "calls.log").read_text().count("-r -i 3") == 1  # one reset job only
    assert json.loads(steps(again, aid)["reset_verdict"][1])["why"] == "the reset command timed out"


def test_kill_9_of_the_service_mid_reset_reconciles_after_the_restart(
    clean_slurm: SlurmCluster, readable_dir: Path, fake_smi: Path, tmp_path: Path
) -> None:
    """A real process, a real SIGKILL while the reset job runs: the restarted service finds
    the action at its wait step, concludes it from the job's results, submits nothing twice."""
    import signal
    import sqlite3

    from tests.realcomp import free_port, wait_until
    from tests.remediation.helpers import payload, start_service
    from tests.remediation.test_crash_checkpoint import action_state, post

    sc, node = clean_slurm, clean_slurm.live[0]
    (fake_smi / "mode").write_text("slow\n")  # the reset takes 6 s: time to kill mid-reset
    (tmp_path / "policy.yaml").write_text(
        POLICY.replace("OUT", str(readable_dir / "runs")).replace("timeout_s: 3", "timeout_s: 30")
    )
    env = {**sc.env, "PATH": f"{fake_smi}{os.pathsep}{sc.env['PATH']}"}
    db = tmp_path / "state.db"

    def step_done(name: str) -> bool:
        if not db.exists():
            return False
        con = sqlite3.connect(db)
        try:
            row = con.execute("SELECT state FROM steps WHERE step=?", (name,)).fetchone()
        finally:
            con.close()
        return bool(row and row[0] == "done")

    port = free_port()
    proc = start_service(tmp_path, port, env, "--backend", "slurm")
    try:
        post(port, payload(xid_alert(node)))
        wait_until(lambda: step_done("reset_start"), 30, 0.1, "reset job submitted")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(5)
        assert not step_done("reset_verdict")  # killed mid-reset
        proc = start_service(tmp_path, free_port(), env, "--backend", "slurm")
        wait_until(lambda: action_state(db) in ("done", "failed"), 90, 0.2, "action concluded")
    finally:
        proc.kill()
        proc.wait(10)
    con = sqlite3.connect(db)
    state, outcome = con.execute("SELECT state, outcome FROM actions").fetchone()
    con.close()
    assert state == "done" and "GPU 3 reset and verified" in outcome, outcome
    assert (fake_smi / "calls.log").read_text().count("-r -i 3") == 1  # one reset job only
    assert sc.node_state(node)["reason"] == "gpuwarden: validation gpu reset passed"
    sc.run("scontrol", "delete", f"ReservationName={reservation_name(node)}", check=False)


def test_on_real_slurm_only_the_job_holding_the_gpu_moves_the_other_gpus_job_keeps_running(
    svc: Service, clean_slurm: SlurmCluster
) -> None:
    """Job A holds GPU 0 (GRES IDX 0), job B GPUs 1-2 of the same node; a reset of GPU 1
    requeues B only (it runs on the other node), A keeps running, and the reset job runs
    beside A in the reservation (not --exclusive) and passes."""
    sc, (node, other) = clean_slurm, clean_slurm.live[:2]
    sc.run("scontrol", "update", f"NodeName={other}", "State=DRAIN", "Reason=test setup")
    a = sc.sbatch("--gres=gpu:1", "--wrap", "sleep 600")  # both on node: the other is out
    b = sc.sbatch("--gres=gpu:2", "--requeue", "--wrap", "sleep 600")  # no -w: may move
    wait_running(sc, a, b)
    sc.run("scontrol", "update", f"NodeName={other}", "State=RESUME")
    aid = svc.engine.decide(alert(node, "xid_fatal", "reboot", alertname="GpuXidFatalHardware",
                                  gpu="1", xid="79", reset_suffices="true"))  # fmt: skip
    assert aid is not None
    state, outcome = drive(svc, aid, 90)
    assert state == "done" and "GPU 1 reset and verified" in outcome, outcome
    jobs = {j["job_id"]: j for j in json.loads(sc.run("squeue", "--json"))["jobs"]}
    assert str(jobs[int(a)]["nodes"]) == node and jobs[int(a)]["restart_cnt"] == 0
    assert str(jobs[int(b)]["nodes"]) != node and jobs[int(b)]["restart_cnt"] == 1
    assert "kept on other GPUs: " + a in steps(svc, aid)["jobs_scope"][1]


def wait_running(sc: SlurmCluster, *ids: str) -> None:
    from tests.realcomp import wait_until

    def running() -> bool:
        out = json.loads(sc.run("squeue", "--json"))["jobs"]
        return {str(j["job_id"]) for j in out if str(j["job_state"]) in ("RUNNING", "['RUNNING']")
                } >= set(ids)  # fmt: skip

    wait_until(running, 30, 0.2, f"jobs {ids} running")


def test_on_real_slurm_a_release_during_the_reset_is_refused_and_the_reservation_stays(
    svc: Service, clean_slurm: SlurmCluster, readable_dir: Path, fake_smi: Path, tmp_path: Path
) -> None:
    """Settled on the real slurmctld: a release while the reset job runs would have
    deleted the reservation under it and resumed the node; it is refused, the job finishes
    in its reservation, and the release works once it ended."""
    node = clean_slurm.live[0]
    (fake_smi / "mode").write_text("slow\n")  # 6 s: time to ask for the release
    svc.journal.close()
    (tmp_path / "slow").mkdir()
    svc = build(clean_slurm, readable_dir, fake_smi, tmp_path / "slow", timeout_s=12)
    aid = svc.engine.decide(xid_alert(node))
    assert aid is not None
    [row] = svc.journal.rows("SELECT * FROM actions WHERE id=?", (aid,))
    assert svc.executor.run(row)[0] == "waiting"  # submitted, running
    status, body = svc.request_release(node, "alice")
    assert status == 409 and body["guard"] == "gpu_reset", body
    assert reservation_name(node) in clean_slurm.run("scontrol", "show", "reservation")
    state, outcome = drive(svc, aid)
    assert state == "done" and "GPU 3 reset and verified" in outcome, outcome
    status, body = svc.request_release(node, "alice")
    assert status == 200, body
    assert "DRAIN" not in clean_slurm.node_state(node)["flags"]
