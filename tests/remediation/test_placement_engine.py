"""Placement tiers through the service: an ``avoid`` alert de-prefers and never takes a node
out; its budget is its own (drain budgets, rate limit and storm breaker untouched); it
expires, recurs with a doubled ttl, is released by an operator, is listed by the API with its
evidence, and a scheduler that does not answer is retried, never drained."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog as c
from remediation.app import build_app
from remediation.backends.runner import Result
from remediation.clock import FakeClock
from remediation.placement.slurm import SlurmPlacement
from remediation.service import Service
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, service, topology_file

POLICY = LIVE_POLICY.replace(
    "  - match: {}\n    allow: [notify]",
    "  - match: {action: avoid}\n    allow: [avoid]\n  - match: {}\n    allow: [notify]",
).replace(
    "rate_limit: {max_actions: 100, window_s: 60}", "rate_limit: {max_actions: 1, window_s: 60}"
)
POLICY = POLICY.replace("storm: {max_nodes: 50,", "storm: {max_nodes: 2,")


def svc_for(tmp: Path, policy: str = POLICY) -> Service:
    return service(tmp, policy, clock=FakeClock(), topology=topology_file(tmp, 20))


def avoid(node: str, status: str = "firing", value: str = "0.031", **labels: str) -> Any:
    a = alert(node, "marginal", "avoid", status=status, alertname="GpuwardenMarginalNode",
              severity="info", **labels)  # fmt: skip
    ann = {"summary": f"{node} NVLink errors in the worst 1% of its peers", "metric":
           c.NVLINK_ERRORS.name, "value": value, "peer_percentile": "99.5",
           "group_size": "20", "promql": f"rate({c.NVLINK_ERRORS.name}[10m])"}  # fmt: skip
    return type(a)(a.fingerprint, a.starts_at, a.status, a.labels, ann)


def send(svc: Service, *alerts: Any) -> None:
    for a in alerts:
        svc.journal.accept([a], svc.clock.now())
        svc.engine.decide(a)


def decisions(svc: Service, action: str) -> list[dict[str, Any]]:
    return svc.journal.rows("SELECT * FROM decisions WHERE action=? ORDER BY id", (action,))


def clock(svc: Service) -> FakeClock:
    assert isinstance(svc.clock, FakeClock)
    return svc.clock


def test_an_avoid_alert_de_prefers_the_node_and_takes_nothing_out(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-004"))
    [d] = decisions(svc, "avoid")
    assert (d["verdict"], d["guard"]) == ("allow", "placement")
    assert "marginal for 86400s" in d["reason"]
    assert svc.journal.node("gpu-node-004") is None  # no quarantine state
    assert svc.journal.rows("SELECT * FROM actions") == []
    assert not svc.backend.is_taken_out("gpu-node-004")
    [row] = svc.engine.placement.listing()  # type: ignore[union-attr]
    assert (row["node"], row["tier"], row["gpu"], row["until"]) == (
        "gpu-node-004", "marginal", None, row["since"] + 86400.0)  # fmt: skip
    assert row["evidence"]["peer_percentile"] == 99.5 and row["evidence"]["group_size"] == 20
    assert "rate(" in row["evidence"]["promql"]
    sample = svc.metrics.registry.get_sample_value
    assert sample(c.REMEDIATION_PLACEMENT_NODES.name, {"tier": "marginal"}) == 1


def test_the_placement_budget_denies_beyond_it_and_leaves_drain_rails_untouched(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)
    send(svc, *(avoid(f"gpu-node-{i:03d}") for i in range(1, 6)))  # 20 nodes: 2 allowed
    verdicts = [(d["node"], d["verdict"], d["guard"]) for d in decisions(svc, "avoid")]
    assert [v[1] for v in verdicts] == ["allow", "allow", "deny", "deny", "deny"]
    assert {v[2] for v in verdicts[2:]} == {"placement_budget"}
    assert svc.journal.get("breaker_opened_at") is None  # storm max 2: 5 avoids flagged nobody
    clips = svc.metrics.registry.get_sample_value(
        c.REMEDIATION_PLACEMENT_BUDGET_CLIPS.name, {"outcome": "denied"}
    )
    assert clips == 3
    send(svc, alert("gpu-node-010"))  # rate limit 1: the avoids did not use it up
    [drain] = decisions(svc, "drain")
    assert drain["verdict"] == "allow", drain["reason"]


def test_an_avoid_denied_by_the_budget_is_decided_again_on_its_repeat_once_room_frees(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-001"), avoid("gpu-node-002"), avoid("gpu-node-003"))
    assert decisions(svc, "avoid")[-1]["guard"] == "placement_budget"
    assert svc.engine.release_placement("gpu-node-001", "alice")
    svc.journal.accept([avoid("gpu-node-003")], clock(svc).now())  # Alertmanager's repeat
    [(_, again)] = svc.journal.todo()  # queued to be decided again, like the worker does
    svc.engine.decide(again)
    last = decisions(svc, "avoid")[-1]
    assert (last["node"], last["verdict"], last["guard"]) == ("gpu-node-003", "allow", "placement")
    nodes = {r["node"] for r in svc.engine.placement.listing()}  # type: ignore[union-attr]
    assert nodes == {"gpu-node-002", "gpu-node-003"}


def worker_pass(svc: Service) -> None:
    for _, a in svc.journal.todo():  # what the worker decides: the alerts queued
        svc.engine.decide(a)


def test_an_avoid_denied_by_the_budget_is_decided_again_as_soon_as_a_tier_ends(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)
    first = avoid("gpu-node-001")
    svc.journal.accept([first, avoid("gpu-node-002"), avoid("gpu-node-003"),
                        avoid("gpu-node-004")], clock(svc).now())  # fmt: skip
    worker_pass(svc)
    assert [d["guard"] for d in decisions(svc, "avoid")][2:] == ["placement_budget"] * 2
    assert svc.journal.todo() == []
    svc.journal.accept([avoid("gpu-node-004", status="resolved")], clock(svc).now())
    worker_pass(svc)  # 004 stopped firing: it no longer waits for room
    assert svc.engine.release_placement("gpu-node-001", "alice")
    worker_pass(svc)  # no Alertmanager repeat needed
    held = {r["node"] for r in svc.engine.placement.listing()}  # type: ignore[union-attr]
    assert held == {"gpu-node-002", "gpu-node-003"}
    send(svc, avoid("gpu-node-002", status="resolved"))
    svc.journal.accept([avoid("gpu-node-005")], clock(svc).now())
    worker_pass(svc)
    assert decisions(svc, "avoid")[-1]["guard"] == "placement_budget"  # 005 waits
    clock(svc).advance(60)
    svc.engine.tick()  # 003 still fires: its evidence is refreshed
    assert svc.journal.todo() == []  # nothing ended: nothing decided again
    clock(svc).advance(86400 - 60)
    svc.engine.tick()  # 002's tier expires (a day after its resolution)
    worker_pass(svc)
    held = {r["node"] for r in svc.engine.placement.listing()}  # type: ignore[union-attr]
    assert held == {"gpu-node-003", "gpu-node-005"}


def test_the_evidence_and_score_survive_the_journal_the_worker_decides_from(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)
    low, high = avoid("gpu-node-001", score="1"), avoid("gpu-node-002", score="2")
    top = avoid("gpu-node-003")
    top = type(top)(top.fingerprint, top.starts_at, top.status, top.labels,
                    {**top.annotations, "score": "7"})  # fmt: skip
    svc.journal.accept([low, high, top], clock(svc).now())
    for _, a in svc.journal.todo():  # as the worker does: the alert as journaled
        svc.engine.decide(a)
    rows = {r["node"]: r for r in svc.engine.placement.listing()}  # type: ignore[union-attr]
    assert set(rows) == {"gpu-node-002", "gpu-node-003"}  # 001 displaced by the score of 7
    assert rows["gpu-node-003"]["evidence"]["peer_percentile"] == 99.5
    assert "rate(" in rows["gpu-node-003"]["evidence"]["promql"]
    assert rows["gpu-node-003"]["reason"].endswith("in the worst 1% of its peers")


def test_a_higher_scored_node_displaces_the_lowest_when_the_budget_is_full(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-001", score="1"), avoid("gpu-node-002", score="2"))
    send(svc, avoid("gpu-node-003", score="5"))
    nodes = {r["node"] for r in svc.engine.placement.listing()}  # type: ignore[union-attr]
    assert nodes == {"gpu-node-002", "gpu-node-003"}
    [d] = decisions(svc, "placement_displace")
    assert d["node"] == "gpu-node-001"


def test_a_resolved_avoid_expires_ttl_later_and_a_recurrence_doubles_it(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-004"))
    clock(svc).advance(3600)
    svc.engine.tick()  # still firing: refreshed
    send(svc, avoid("gpu-node-004", status="resolved"))
    [row] = svc.engine.placement.listing()  # type: ignore[union-attr]
    assert row["until"] == svc.clock.now() + 86400 and row["firing"] is False
    clock(svc).advance(86399)
    svc.engine.tick()
    assert len(svc.engine.placement.listing()) == 1  # type: ignore[union-attr]
    clock(svc).advance(1)
    svc.engine.tick()
    assert svc.engine.placement.listing() == []  # type: ignore[union-attr]
    assert decisions(svc, "placement_expire")[0]["node"] == "gpu-node-004"
    send(svc, avoid("gpu-node-004", fp="fp-again", starts_at="2026-11-30T10:00:00Z"))
    [row] = svc.engine.placement.listing()  # type: ignore[union-attr]
    assert row["until"] - row["since"] == 2 * 86400


def test_an_avoid_without_a_policy_rule_is_recorded_and_denied(tmp_path: Path) -> None:
    svc = svc_for(tmp_path, LIVE_POLICY)
    send(svc, avoid("gpu-node-004"))
    [d] = decisions(svc, "avoid")
    assert (d["verdict"], d["guard"]) == ("deny", "policy")
    assert svc.engine.placement.listing() == []  # type: ignore[union-attr]


async def test_the_api_lists_placement_with_auth_and_release_ends_it(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)
    send(svc, avoid("gpu-node-004"))
    async with TestClient(TestServer(build_app(svc))) as client:
        assert (await client.get("/api/v1/placement")).status == 401
        r = await client.get("/api/v1/placement", headers=AUTH)
        body = await r.json()
        assert [n["node"] for n in body["nodes"]] == ["gpu-node-004"]
        assert set(body["nodes"][0]) >= {"node", "gpu", "tier", "reason", "since", "until",
                                         "evidence"}  # fmt: skip
        r = await client.post("/api/v1/nodes/gpu-node-004/release?who=alice", headers=AUTH)
        assert r.status == 200 and (await r.json())["released"] is True
        body = await (await client.get("/api/v1/placement", headers=AUTH)).json()
        assert body == {"nodes": []}
    [d] = decisions(svc, "placement_release")
    assert "alice" in d["reason"]


class WeightSlurm:
    """sinfo --json with weight/extra and scontrol update of Weight/Extra; ``down`` makes
    every command fail as an unreachable slurmctld does."""

    def __init__(self, nodes: Sequence[str]) -> None:
        self.weights = dict.fromkeys(nodes, 1)
        self.extra = dict.fromkeys(nodes, "")
        self.down = False
        self.calls: list[list[str]] = []

    def run(self, argv: Sequence[str], timeout: float = 10.0) -> Result:
        self.calls.append(list(argv))
        if self.down:
            return Result(1, "", "Unable to contact slurm controller (connect failure)")
        if argv[0] == "sinfo":
            nodes = [{"name": n, "weight": w, "extra": self.extra[n], "partitions": ["gpu"],
                      "state": "idle", "state_flags": [], "reason": ""}
                     for n, w in self.weights.items()]  # fmt: skip
            return Result(0, json.dumps({"nodes": nodes}), "")
        args = dict(a.split("=", 1) for a in argv[2:])
        self.weights[args["NodeName"]] = int(args["Weight"])
        self.extra[args["NodeName"]] = args["Extra"]
        return Result(0, "", "")


def test_drift_is_repaired_and_an_unanswering_slurmctld_is_retried_never_drained(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)
    fake = WeightSlurm([f"gpu-node-{i:03d}" for i in range(1, 21)])
    p = svc.engine.placement
    assert p is not None
    p.projection, p.dry_run = SlurmPlacement(fake), False
    send(svc, avoid("gpu-node-004"))
    assert fake.weights["gpu-node-004"] == 2 and fake.extra["gpu-node-004"].endswith("weight=2")
    fake.weights["gpu-node-004"] = 1  # scontrol reconfigure puts slurm.conf's weight back
    svc.engine.tick()
    assert fake.weights["gpu-node-004"] == 2
    assert decisions(svc, "placement_repair")[0]["node"] == "gpu-node-004"
    fake.down = True
    svc.engine.tick()
    [err] = decisions(svc, "placement_error")
    assert err["verdict"] == "deny" and "Unable to contact" in err["reason"]
    assert not any("State=DRAIN" in a for call in fake.calls for a in call)
    fake.down = False
    send(svc, avoid("gpu-node-004", status="resolved"))
    clock(svc).advance(86400)
    svc.engine.tick()
    assert (fake.weights["gpu-node-004"], fake.extra["gpu-node-004"]) == (1, "")


def test_quarantine_placement_prints_one_line_per_tier_with_its_evidence() -> None:
    from remediation.quarantine_cli import parser, render

    assert parser().parse_args(["placement"]).command == "placement"
    row = {"node": "gpu-node-004", "gpu": None, "tier": "marginal", "reason": "NVLink errors",
           "since": 0.0, "until": 86400.0, "evidence": {"metric": "nvlink_errors",
           "value": 0.03, "peer_percentile": 99.5, "group_size": 20}}  # fmt: skip
    [line] = render("placement", {"nodes": [row]})
    assert line.startswith("gpu-node-004") and "marginal" in line
    assert "nvlink_errors=0.03 p99.5 (of 20)" in line
    assert render("placement", {"nodes": []}) == ["no node de-preferred"]


def test_idle_ticks_read_the_node_table_once_and_then_not_while_nothing_is_de_preferred(
    tmp_path: Path,
) -> None:
    svc = svc_for(tmp_path)
    fake = WeightSlurm([f"gpu-node-{i:03d}" for i in range(1, 21)])
    fake.extra["gpu-node-009"] = "gpuwarden:placement tier=marginal base=1 weight=2"
    fake.weights["gpu-node-009"] = 2  # left by a previous run: restored on the first tick
    p = svc.engine.placement
    assert p is not None
    p.projection, p.dry_run = SlurmPlacement(fake), False
    svc.engine.tick()
    assert (fake.weights["gpu-node-009"], fake.extra["gpu-node-009"]) == (1, "")
    svc.engine.tick()
    reads = len(fake.calls)
    for _ in range(5):
        svc.engine.tick()
    assert len(fake.calls) == reads


def test_a_projection_bug_is_recorded_and_the_tick_goes_on(tmp_path: Path) -> None:
    svc = svc_for(tmp_path)

    class Broken:
        name = "kubernetes"

        def groups(self) -> dict[str, frozenset[str]]:
            return {"cluster": frozenset(f"gpu-node-{i:03d}" for i in range(1, 21))}

        def reconcile(self, wanted: object, dry_run: bool = False) -> object:
            raise ValueError("ApiException(500)")

    p = svc.engine.placement
    assert p is not None
    p.projection, p.dry_run = Broken(), False  # type: ignore[assignment]
    send(svc, avoid("gpu-node-004"))
    assert svc.engine.tick() == []  # the tick itself completes
    errors = decisions(svc, "placement_error")
    assert errors and "ValueError: ApiException(500)" in errors[-1]["reason"]
