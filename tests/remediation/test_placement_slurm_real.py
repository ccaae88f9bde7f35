"""Placement tiers on the real slurmctld of the tests (2 slurmd + 2 ghost nodes, one
partition of 4: a budget of one de-preferred node): an ``avoid`` alert raises the node's
Weight above the others without draining it, one-node jobs start elsewhere while another
node is free (and still on it when nothing else fits), the budget holds, ``scontrol
reconfigure`` resets the weight and the next tick puts it back, and the original weight
returns on release and at expiry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from remediation.backends.runner import SubprocessRunner
from remediation.clock import FakeClock
from remediation.service import Service
from tests.realcomp import wait_until
from tests.remediation.helpers import LIVE_POLICY, service
from tests.remediation.test_placement_engine import avoid, decisions, send
from tests.slurmcluster import SlurmCluster

pytestmark = pytest.mark.real

POLICY = LIVE_POLICY.replace(
    "  - match: {}\n    allow: [notify]",
    "  - match: {action: avoid}\n    allow: [avoid]\n  - match: {}\n    allow: [notify]",
)


def node(sc: SlurmCluster, name: str) -> dict:
    return next(n for n in json.loads(sc.run("sinfo", "--json"))["nodes"] if n["name"] == name)


@pytest.fixture
def svc(clean_slurm: SlurmCluster, tmp_path: Path) -> Iterator[Service]:
    s = service(tmp_path, POLICY, clock=FakeClock(), runner=SubprocessRunner(clean_slurm.env),
                backend="slurm")  # fmt: skip
    yield s
    for n in clean_slurm.nodes:  # leave the shared cluster neutral for the next test
        clean_slurm.run("scontrol", "update", f"NodeName={n}", "Weight=1", "Extra=", check=False)


def test_avoid_raises_the_weight_without_draining_and_jobs_start_elsewhere(
    svc: Service, clean_slurm: SlurmCluster
) -> None:
    sc = clean_slurm
    send(svc, avoid("gpu-node-001"))
    n1 = node(sc, "gpu-node-001")
    assert n1["weight"] == 2 and node(sc, "gpu-node-002")["weight"] == 1
    assert "DRAIN" not in n1["state_flags"] and n1["state"] == "idle"
    assert n1["extra"] == "gpuwarden:placement tier=marginal base=1 weight=2"
    n2 = sc.node_state("gpu-node-002")
    assert (n2["state"], n2["flags"]) == ("idle", [])  # free: the lab's reset waits for it
    first = sc.sbatch("-N1", "--exclusive", "--wrap", "sleep 60")
    wait_until(lambda: sc.job_state(first) == "RUNNING", 30, 0.2, "first job running")
    where = sc.job_nodes(first)
    assert where == "gpu-node-002", sc.run("sinfo", "-N", "-l") + sc.run("scontrol", "show", "res")
    second = sc.sbatch("-N1", "--exclusive", "--wrap", "sleep 60")
    wait_until(lambda: sc.job_state(second) == "RUNNING", 30, 0.2, "second job running")
    assert sc.job_nodes(second) == "gpu-node-001"  # de-preferred, not excluded


def test_the_budget_holds_and_reconfigure_drift_is_repaired_on_the_next_tick(
    svc: Service, clean_slurm: SlurmCluster
) -> None:
    sc = clean_slurm
    send(svc, avoid("gpu-node-001"), avoid("gpu-node-002"))
    assert [d["guard"] for d in decisions(svc, "avoid")] == ["placement", "placement_budget"]
    assert node(sc, "gpu-node-002")["weight"] == 1
    sc.run("scontrol", "reconfigure")
    wait_until(lambda: node(sc, "gpu-node-001")["weight"] == 1, 20, 0.2, "reconfigure reset")
    assert node(sc, "gpu-node-001")["extra"].startswith("gpuwarden:placement")  # survives
    svc.engine.tick()
    assert node(sc, "gpu-node-001")["weight"] == 2
    [repair] = decisions(svc, "placement_repair")
    assert repair["node"] == "gpu-node-001" and "read back 1" in repair["reason"]


def test_the_original_weight_returns_on_release_and_at_expiry(
    svc: Service, clean_slurm: SlurmCluster
) -> None:
    sc = clean_slurm
    send(svc, avoid("gpu-node-001"))
    code, body = svc.request_release("gpu-node-001", "alice")
    assert code == 200 and body["released"] is True
    assert (node(sc, "gpu-node-001")["weight"], node(sc, "gpu-node-001")["extra"]) == (1, "")
    send(svc, avoid("gpu-node-001", fp="fp-2", starts_at="2026-11-30T10:00:00Z"))
    assert node(sc, "gpu-node-001")["weight"] == 2
    send(svc, avoid("gpu-node-001", fp="fp-2", starts_at="2026-11-30T10:00:00Z", status="resolved"))
    assert isinstance(svc.clock, FakeClock)
    svc.clock.advance(2 * 86400)  # a recurrence within 7 days: ttl doubled
    svc.engine.tick()
    assert (node(sc, "gpu-node-001")["weight"], node(sc, "gpu-node-001")["extra"]) == (1, "")
    assert decisions(svc, "placement_expire")[0]["node"] == "gpu-node-001"


def test_check_reads_the_topology_plugin_from_the_real_slurm_config(svc: Service) -> None:
    from remediation.placement import check

    assert svc.engine.placement is not None
    lines, problems = check.check(svc.engine.placement.projection, svc.policy.placement, True)
    assert problems == []
    assert "placement: Slurm Weight + Extra projection (topology/none)" in lines
