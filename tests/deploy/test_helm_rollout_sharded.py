"""A rolling update of the sharded analyzer for real: `helm upgrade` to a chart whose analyzer
image differs, and the real Deployment controller replaces the 3 pods under the chart's own
strategy (maxSurge 1, maxUnavailable 0, minReadySeconds) and PodDisruptionBudget.

The pods' lives are mirrored in this process (tests/deploy/sharded.py has the lab): a
:class:`Coordinator` named after each pod starts when the pod runs, the pod turns Ready once
its replica has judged a cycle (the chart's readinessProbe is /healthz, which answers once a
cycle is judged), and a pod marked for deletion leaves at once (what the analyzer does on
SIGTERM: analyzer/service.py's replica loop removes its heartbeat Lease as it stops). The
coordinators run on a clock of their own, a tenth of the interval a turn (a turn at most
every TURN_S of wall), so a cycle takes about a second while the controller works in wall
time: the steps inside a cycle are as at any interval and their order against the
controller's is real. The next release's chart sets minReadySeconds to 10 s where the chart
has 60 (two --interval=30 cycles), to keep the test short: some 10 of these cycles, still more
than the two the chart's value is there to cover (a new replica joins a plan before the next
old one goes)."""

from __future__ import annotations

import http.client
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.leases import LeaseMembership
from analyzer.replicas.membership import Plan
from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.window import Window
from tests.deploy.sharded import (
    ANALYZER,
    PDB,
    analyzer_pods,
    install_sharded,
    lease_names,
    replica_leases,
    replica_token,
    scheduling_lab,
)
from tests.deploy.test_helm_chart import CHART, ROOT
from tests.deploy.test_helm_install import NS, deployment, helm
from tests.kubelab import KubeLab, Run, running_status
from tests.realcomp import free_port, wait_until

pytestmark = pytest.mark.real
N = 3
INTERVAL, TICK = 10.0, 1.0  # the coordinators' clock: ten turns a cycle
TURN_S = 0.1  # wall seconds a turn at least (a busy loop of API calls slows the other tests)
MIN_READY_S = 10  # the next release's minReadySeconds (the chart's 60 is two --interval=30)
# 16 nodes, 8 leaves, job 7 joins leaf-0 and leaf-1: 7 units for 3 or 4 replicas
TOPOLOGY = Window(
    t=np.arange(3.0), nodes=tuple(f"n{i}" for i in range(16)),
    metrics={"m": np.zeros((3, 16, 1))}, jobs={"7": (1, 2)},
    leaf_of={i: f"leaf-{i // 2}" for i in range(16)},
)  # fmt: skip
PARTS = units(TOPOLOGY)


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KubeLab]:
    with scheduling_lab(tmp_path_factory.mktemp("crds")) as lab:
        yield lab


def _is_analyzer(pod: dict[str, Any]) -> Run | None:
    """The stand-in leaves analyzer pods to this test (it starts them and makes them Ready)."""
    name = (pod["metadata"].get("labels") or {}).get("app.kubernetes.io/name")
    return Run(pending=True) if name == ANALYZER else None


def _status(pod: dict[str, Any], ready: bool) -> dict[str, Any]:
    body = running_status(pod)
    for c in body["status"]["conditions"]:
        if c["type"] in ("Ready", "ContainersReady"):
            c["status"] = str(ready)
    for c in body["status"]["containerStatuses"]:
        c["ready"] = ready
    return body


def _serving(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    ready = any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)
    return ready and not pod["metadata"].get("deletionTimestamp")


class Pods:
    """The analyzer pods as the API server has them, each a coordinator in this process."""

    def __init__(self, lab: KubeLab) -> None:
        self.lab, self.api, self.timing = lab, replica_leases(lab), Timing(INTERVAL)
        self.now = math.floor(time.time() / INTERVAL) * INTERVAL
        self.live: dict[str, Coordinator] = {}
        self.ready: set[str] = set()
        self.left: dict[int, list[str]] = {}  # cycle -> replicas that left in it
        self.judged: dict[int, dict[str, Plan]] = {}  # cycle -> {replica: its plan}
        self.serving: dict[int, int] = {}  # cycle -> fewest pods Ready and not terminating
        self.healthy: dict[int, int] = {}  # cycle -> the PDB's currentHealthy at its start

    def turn(self) -> None:
        started = time.monotonic()
        self._turn()
        time.sleep(max(0.0, TURN_S - (time.monotonic() - started)))

    def _turn(self) -> None:
        self.now += TICK
        seen = analyzer_pods(self.lab)
        for pod in seen:
            self._follow(pod)
        k, up = self.timing.cycle(self.now), sum(map(_serving, seen))
        self.serving[k] = min(self.serving.get(k, up), up)
        if self.timing.into(self.now) == 0:
            pdb = self.lab.http.get(PDB).get("status") or {}
            if pdb.get("expectedPods") == N:  # computed by the disruption controller
                assert pdb["desiredHealthy"] == N - 1, pdb  # the chart's maxUnavailable 1
                self.healthy[k] = pdb["currentHealthy"]
        for name, c in list(self.live.items()):
            plan = c.turn(self.now)
            if plan is not None:
                self.judged.setdefault(plan.cycle, {})[name] = plan

    def _follow(self, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        path = f"/api/v1/namespaces/{NS}/pods/{name}/status"
        if pod["metadata"].get("deletionTimestamp"):
            if name in self.live:  # SIGTERM: the analyzer leaves as it stops
                self.live.pop(name).leave()
                self.left.setdefault(self.timing.cycle(self.now), []).append(name)
        elif name not in self.live and (pod.get("spec") or {}).get("nodeName"):
            if (pod.get("status") or {}).get("phase") != "Running":
                self.lab.http.merge_patch(path, _status(pod, ready=False))
                self.live[name] = Coordinator(LeaseMembership(self.api, NS), name,
                                              self.timing, self.now)  # fmt: skip
        elif name not in self.ready and any(name in p for p in self.judged.values()):
            self.lab.http.merge_patch(path, _status(pod, ready=True))  # /healthz answers
            self.ready.add(name)

    def until(self, done: Any, timeout: float, what: str) -> None:
        """Turn until ``done()`` at a cycle's start, then one whole cycle more."""
        deadline = time.monotonic() + timeout
        while not (self.timing.into(self.now) == 0 and done()):
            assert time.monotonic() < deadline, f"no {what} in {timeout:g} s"
            self.turn()
        for _ in range(round(INTERVAL / TICK)):
            self.turn()


def _next_release(d: Path) -> Path:
    """The chart as a next release ships it: version 0.1.1 and its image (and a shorter
    minReadySeconds: the module's docstring says why)."""
    chart = Path(shutil.copytree(CHART, d / "gpuwarden"))
    for f in (chart / "Chart.yaml", chart / "templates" / "analyzer.yaml"):
        f.write_text(f.read_text().replace("0.1.0", "0.1.1"))
    t = chart / "templates" / "analyzer.yaml"
    assert t.read_text().count("minReadySeconds: 60\n") == 1
    t.write_text(
        t.read_text().replace("minReadySeconds: 60\n", f"minReadySeconds: {MIN_READY_S}\n")
    )
    return chart


def _rolled_out(lab: KubeLab, pods: Pods, old: set[str]) -> bool:
    d = deployment(lab, ANALYZER)
    st = d.get("status") or {}
    counts = [st.get(k) for k in ("replicas", "updatedReplicas", "availableReplicas")]
    return (st.get("observedGeneration") == d["metadata"]["generation"] and counts == [N] * 3
            and len(pods.live) == N and not old & set(pods.live))  # fmt: skip


def _check_each_cycle(pods: Pods, cycles: range) -> list[int]:
    """One plan a cycle, members never fewer than N, N - 1 pods Ready by the pods and by the
    PDB, no node judged twice; the cycles where some went unjudged (returned) only where a
    replica left, and never two in a row."""
    skipped: list[int] = []
    for k in cycles:
        plans = pods.judged.get(k, {})
        agreed = {p.members for p in plans.values()}
        assert len(agreed) <= 1, (k, plans)  # one plan per cycle, read alike by its members
        members = agreed.pop() if agreed else ()
        assert len(members) >= N or not plans, (k, members)  # none goes before its successor
        assert pods.serving[k] >= N - 1, (k, pods.serving[k])
        assert pods.healthy.get(k, N - 1) >= N - 1, (k, pods.healthy[k])
        mine = [u for r in plans for u in assign(PARTS, members)[r]]
        nodes = owned_nodes(PARTS, mine)
        assert len(nodes) == len(set(nodes)), (k, plans)  # never two owners
        if nodes != list(range(len(TOPOLOGY.nodes))):
            skipped.append(k)
            assert pods.left.get(k) and k - 1 not in skipped, (k, members, pods.left)
    return skipped


def test_a_helm_upgrade_replaces_every_replica_without_a_domain_judged_twice_or_skipped_twice(
    lab: KubeLab, tmp_path: Path
) -> None:
    lab.kubelet.deletion_delay_s = 2.0  # a stopping container takes a moment
    with lab.kubelet.scripted(_is_analyzer):
        install_sharded(lab, N)
        pods = Pods(lab)
        pods.until(lambda: len(pods.ready) == N, 120, f"{N} replicas ready")
        pods.until(lambda: True, 10, "steady cycle")
        old, first = set(pods.live), pods.timing.cycle(pods.now)
        helm(lab, "upgrade", "gw", str(_next_release(tmp_path)), "--namespace", NS,
             "--reuse-values")  # fmt: skip
        pods.until(lambda: _rolled_out(lab, pods, old), 420, "rollout")
    lab.kubelet.deletion_delay_s = 0.0
    last = pods.timing.cycle(pods.now) - 1
    cycles = range(first, last + 1)

    skipped = _check_each_cycle(pods, cycles)
    gone = [r for k in cycles for r in pods.left.get(k, [])]
    assert sorted(gone) == sorted(old) and len(skipped) <= len(gone), (gone, skipped)
    assert pods.judged[last][min(pods.live)].members == tuple(sorted(pods.live))
    assert lease_names(lab) == sorted(f"{ANALYZER}-{r}" for r in ["leader", *pods.live])
    wait_until(lambda: not any(p["metadata"].get("deletionTimestamp") for p in analyzer_pods(lab)),
               30, 0.2, "the last old pod gone")  # fmt: skip
    images = {p["spec"]["containers"][0]["image"] for p in analyzer_pods(lab)}
    assert images == {"ghcr.io/gpuwarden/gpuwarden:0.1.1"}, images
    assert len(pods.healthy) > len(cycles) / 2, "the PDB was computed through the rollout"
    for c in pods.live.values():
        c.leave()
    helm(lab, "uninstall", "gw", "--namespace", NS, "--wait", "--timeout", "60s")


def test_an_analyzer_pod_sent_sigterm_removes_its_lease_well_inside_the_charts_grace_period(
    lab: KubeLab,
) -> None:
    """What the rollout above mirrors with leave(): the analyzer process itself, with the
    chart's arguments, a pod's name and the chart's ServiceAccount token, stopped by SIGTERM
    while a scraper holds a keep-alive connection (its server waits for open requests
    before the replica loop's cleanup runs)."""
    install_sharded(lab, N)
    spec = deployment(lab, ANALYZER)["spec"]["template"]["spec"]
    name = analyzer_pods(lab)[0]["metadata"]["name"]
    port = free_port()
    args = [a.replace("$(POD_NAME)", name).replace("$(POD_NAMESPACE)", NS)
            for a in spec["containers"][0]["args"]
            if not a.startswith(("--prometheus=", "--listen="))]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT),
           "KUBECONFIG": str(lab.kubeconfig(replica_token(lab), name="replica"))}  # fmt: skip
    proc = subprocess.Popen(  # nothing answers on the Prometheus port: counted, loop goes on
        [sys.executable, "-c", "import sys; from analyzer.cli import main; sys.exit(main())",
         *args, f"--prometheus=http://127.0.0.1:{free_port()}", f"--listen=127.0.0.1:{port}"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        mine = f"{ANALYZER}-{name}"
        wait_until(lambda: mine in lease_names(lab), 60, 0.3, "its heartbeat Lease")
        scrape = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        scrape.request("GET", "/metrics")
        assert scrape.getresponse().read()  # kept open, as Prometheus keeps its connection
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(spec["terminationGracePeriodSeconds"])
        took = time.monotonic() - sent
    finally:
        proc.kill()
        out = proc.communicate()[0].decode(errors="replace")
    assert rc == 0 and mine not in lease_names(lab), out[-2000:]
    assert took < spec["terminationGracePeriodSeconds"] / 3, (took, out[-2000:])
    helm(lab, "uninstall", "gw", "--namespace", NS, "--wait", "--timeout", "60s")
