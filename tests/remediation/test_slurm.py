"""The Slurm backend and the service against a real slurmctld (real-components.md §3)."""

from __future__ import annotations

from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from remediation.app import build_app
from remediation.backends.base import BackendError
from remediation.backends.runner import SubprocessRunner
from remediation.backends.slurm import SlurmBackend
from remediation.clock import SystemClock
from tests.realcomp import wait_until
from tests.remediation.helpers import AUTH, alert, payload, service
from tests.slurmcluster import SlurmCluster

pytestmark = pytest.mark.real


def backend(sc: SlurmCluster) -> SlurmBackend:
    return SlurmBackend(SubprocessRunner(sc.env))


def test_drain_writes_the_gpuwarden_reason_and_reads_it_back(clean_slurm: SlurmCluster) -> None:
    b = backend(clean_slurm)
    assert b.take_out("gpu-node-003", "gpuwarden: drain xid_fatal d1", evict=True) == "drained"
    st = clean_slurm.node_state("gpu-node-003")
    assert "DRAIN" in st["flags"] and st["reason"] == "gpuwarden: drain xid_fatal d1"
    assert b.is_taken_out("gpu-node-003")
    assert (
        b.take_out("gpu-node-003", "gpuwarden: again", evict=True) == "already drained by gpuwarden"
    )


def test_resume_of_our_drain_on_a_never_registered_node_is_read_back(
    clean_slurm: SlurmCluster,
) -> None:
    # RESUME on UNKNOWN+DRAIN exits 1 but clears the drain: the state read back decides.
    b = backend(clean_slurm)
    b.take_out("gpu-node-004", "gpuwarden: drain test d2", evict=True)
    assert b.release("gpu-node-004") == "resumed"
    assert "DRAIN" not in clean_slurm.node_state("gpu-node-004")["flags"]


def test_a_foreign_drain_is_neither_resumed_nor_overwritten(clean_slurm: SlurmCluster) -> None:
    clean_slurm.run(
        "scontrol",
        "update",
        "NodeName=gpu-node-002",
        "State=DRAIN",
        "Reason=operator: replacing fan",
    )
    b = backend(clean_slurm)
    with pytest.raises(BackendError, match="not ours"):
        b.release("gpu-node-002")
    with pytest.raises(BackendError, match="someone else"):
        b.take_out("gpu-node-002", "gpuwarden: drain x d3", evict=True)
    assert clean_slurm.node_state("gpu-node-002")["reason"] == "operator: replacing fan"


def test_jobs_on_a_node_are_listed_with_their_nodes(clean_slurm: SlurmCluster) -> None:
    job = clean_slurm.sbatch("--wrap", "sleep 30")
    b = backend(clean_slurm)
    wait_until(lambda: clean_slurm.job_state(job) == "RUNNING", 20, 0.1, "job running")
    node = clean_slurm.job_nodes(job)
    [j] = b.jobs_on(node)
    assert (j.job_id, j.state, j.nodes) == (job, "RUNNING", (node,))
    other = next(n for n in clean_slurm.live if n != node)
    assert b.jobs_on(other) == ()
    assert b.job(job) == j


async def test_an_alert_through_the_webhook_drains_the_real_node_and_a_manual_release_resumes_it(
    clean_slurm: SlurmCluster, tmp_path: Path
) -> None:
    svc = service(
        tmp_path, clock=SystemClock(), runner=SubprocessRunner(clean_slurm.env), backend="slurm"
    )
    async with TestClient(TestServer(build_app(svc))) as client:
        r = await client.post("/alertmanager", data=payload(alert("gpu-node-003")), headers=AUTH)
        assert r.status == 200
        await svc.worker.idle(20)
        st = clean_slurm.node_state("gpu-node-003")
        assert "DRAIN" in st["flags"] and str(st["reason"]).startswith("gpuwarden: drain")
        r = await client.post("/api/v1/nodes/gpu-node-003/release", headers=AUTH)
        assert r.status == 200
        assert "DRAIN" not in clean_slurm.node_state("gpu-node-003")["flags"]


async def test_the_service_refuses_to_release_a_node_an_operator_drained(
    clean_slurm: SlurmCluster, tmp_path: Path
) -> None:
    clean_slurm.run(
        "scontrol", "update", "NodeName=gpu-node-004", "State=DRAIN", "Reason=operator: RMA"
    )
    svc = service(
        tmp_path, clock=SystemClock(), runner=SubprocessRunner(clean_slurm.env), backend="slurm"
    )
    async with TestClient(TestServer(build_app(svc))) as client:
        r = await client.post("/api/v1/nodes/gpu-node-004/release", headers=AUTH)
        assert r.status == 409 and (await r.json())["guard"] == "ownership"
        r = await client.post("/alertmanager", data=payload(alert("gpu-node-004")), headers=AUTH)
        await svc.worker.idle(20)
        last = svc.journal.rows("SELECT guard, verdict FROM decisions ORDER BY id DESC LIMIT 1")
    assert clean_slurm.node_state("gpu-node-004")["reason"] == "operator: RMA"
    assert last == [{"guard": "ownership", "verdict": "deny"}]


def test_hold_and_release_of_a_pending_job(clean_slurm: SlurmCluster) -> None:
    job = clean_slurm.sbatch("--begin=now+60", "--wrap", "sleep 1")
    b = backend(clean_slurm)
    b.hold(job)
    reason = clean_slurm.run("squeue", "-h", "-j", job, "-o", "%r").strip()
    assert reason == "JobHeldAdmin"
    b.release_job(job)
    assert clean_slurm.run("squeue", "-h", "-j", job, "-o", "%r").strip() != "JobHeldAdmin"
