"""The whole loop with real servers: simulator -> Prometheus (project rules) -> analyzer ->
Alertmanager (project routes) -> remediation -> Slurm.

One stack for the module (8 simulated nodes; 3 real slurmd + 5 ghost nodes in Slurm with
the same names), short intervals. The tests run in order, as one story: an XID 79 under a
running job, an application XID that must be ignored, then more faults than the budget.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from exporter import catalog
from gpuwarden import demojob
from gpuwarden.stack import Stack, StackOptions, start_on_free_ports
from tests.realcomp import require_binary, wait_until, world_readable_tmpdir
from tests.slurmcluster import SlurmCluster, slurm_cluster

pytestmark = pytest.mark.real
BUDGET = 2  # nodes gpuwarden may hold out of service at once in this fleet


@dataclass
class Loop:
    stack: Stack
    slurm: SlurmCluster
    jobdir: Path

    def json(self, url: str) -> dict:  # type: ignore[type-arg]
        req = urllib.request.Request(url, headers={"Authorization": f"Bearer {self.stack.token}"})
        with urllib.request.urlopen(req, timeout=5) as r:
            return dict(json.loads(r.read()))

    def drained_by_us(self) -> set[str]:
        out = set()
        for n in self.slurm.nodes:
            st = self.slurm.node_state(n)
            if "DRAIN" in str(st.get("flags")) + str(st.get("state")) and str(
                st.get("reason", "")
            ).startswith("gpuwarden:"):
                out.add(n)
        return out


@pytest.fixture(scope="module")
def loop() -> Iterator[Loop]:
    for b in ("prometheus", "prometheus-alertmanager"):
        require_binary(b)
    jobdir = world_readable_tmpdir("gpuwarden-e2e-job-")
    with slurm_cluster(live=3, ghosts=5) as sc:
        stack = start_on_free_ports(
            StackOptions(
                workdir=world_readable_tmpdir("gpuwarden-e2e-"),
                nodes=8,
                seed=5,
                scrape_interval_s=1,
                analyzer_interval_s=2,
                tick_s=1,
                slurm_env=sc.env,
                policy={
                    "auto_release": False,
                    "budgets": {
                        "fleet": {"max_fraction": 0.5, "max_nodes": BUDGET},
                        "per_job_max_nodes": 1,
                    },
                    "checkpoint": {
                        "ack_dir": str(jobdir),
                        "deadline_s": 20,
                        "on_timeout": "requeue",
                        "restart_deadline_s": 60,
                    },
                    "storm": {"max_nodes": 50, "window_s": 60, "quiet_s": 120},
                    "rate_limit": {"max_actions": 100, "window_s": 60},
                },
            )
        )
        try:
            yield Loop(stack, sc, jobdir)
        finally:
            stack.stop()


def test_xid_79_under_a_running_job_drains_the_node_and_moves_the_job(loop: Loop) -> None:
    job = demojob.submit(loop.slurm, loop.jobdir)
    wait_until(lambda: demojob.lines(loop.jobdir), 30, 0.1, "job started")
    bad = demojob.lines(loop.jobdir)[0].split("node=")[1].strip()
    time.sleep(3)  # let the job count some steps first

    t0 = time.monotonic()
    loop.stack.inject(bad, "xid", "gpu0", xid=79)
    wait_until(lambda: bad in loop.drained_by_us(), 60, 0.2, f"{bad} drained by gpuwarden")
    latency = time.monotonic() - t0
    print(f"\nfault-to-drain latency: {latency:.1f} s (scrape 1 s, rules 1 s)")

    reason = str(loop.slurm.node_state(bad)["reason"])
    assert reason.startswith("gpuwarden:")
    restarted = wait_until(
        lambda: [
            ln for ln in demojob.lines(loop.jobdir)[1:] if ln.startswith("start") and bad not in ln
        ],
        90,
        0.5,
        "job restarted on another node",
    )
    assert any(ln.startswith("checkpoint") for ln in demojob.lines(loop.jobdir)), (
        "job never checkpointed"
    )
    resumed_step = int(restarted[-1].split("step=")[1].split()[0])
    assert resumed_step > 0, "the job started over instead of resuming its checkpoint"
    assert loop.slurm.job_state(job) in ("RUNNING", "PENDING", "CONFIGURING")

    decisions = loop.json(f"{loop.stack.urls.remediation}/api/v1/decisions?node={bad}")
    allowed = [d for d in decisions["decisions"] if d["verdict"] == "allow"]
    assert allowed and allowed[0]["fault_class"] == "xid_fatal"

    def done() -> list[str]:
        # the restarted job can be seen before the tick that confirms the action done
        metrics = urllib.request.urlopen(f"{loop.stack.urls.remediation}/metrics").read()
        return [
            ln
            for ln in metrics.decode().splitlines()
            if ln.startswith(catalog.REMEDIATION_ACTIONS.name)
            and 'outcome="done"' in ln
            and float(ln.rsplit(" ", 1)[1]) >= 1
        ]

    wait_until(done, 30, 0.5, "the action counted done in the service's metrics")


def test_an_application_xid_13_drains_nothing(loop: Loop) -> None:
    before = loop.drained_by_us()
    victim = next(n for n in loop.slurm.nodes if n not in before)
    loop.stack.inject(victim, "app_xid", "gpu1", xid=13)
    prom = loop.stack.urls.prometheus
    name = catalog.GPU_XID_ERRORS.name
    wait_until(
        lambda: loop.json(f"{prom}/api/v1/query?query={name}{{node=%22{victim}%22,xid=%2213%22}}")[
            "data"
        ]["result"],
        30,
        0.5,
        "XID 13 in Prometheus",
    )
    time.sleep(8)  # several rule evaluations and Alertmanager deliveries
    assert victim not in loop.drained_by_us()


def test_faults_on_more_nodes_than_the_budget_never_exceed_it(loop: Loop) -> None:
    already = loop.drained_by_us()
    targets = [n for n in loop.slurm.nodes if n not in already][:4]
    for node in targets:
        loop.stack.inject(node, "xid", "gpu3", xid=48)
    deadline = time.monotonic() + 25
    peak = len(already)
    while time.monotonic() < deadline:
        peak = max(peak, len(loop.drained_by_us()))
        assert peak <= BUDGET, f"{peak} nodes out of service, budget {BUDGET}"
        time.sleep(0.5)
    decisions = loop.json(f"{loop.stack.urls.remediation}/api/v1/decisions?limit=500")
    denied = [
        d
        for d in decisions["decisions"]
        if d["node"] in targets and d["verdict"] == "deny" and "budget" in d["guard"]
    ]
    assert denied, "no decision was denied by the budget"
    assert peak == BUDGET
