"""Storm: 1,000 alerts for 40% of a 500-node fleet within a minute (fake clock, dry-run)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog
from remediation.app import build_app
from remediation.clock import FakeClock
from tests.remediation.helpers import AUTH, LIVE_POLICY, alert, payload, service, topology_file

STORM_POLICY = (
    LIVE_POLICY.replace(
        "fleet: {max_fraction: 0.5, max_nodes: 100}", "fleet: {max_fraction: 0.05, max_nodes: 15}"
    )
    .replace(
        "storm: {max_nodes: 50, window_s: 60, quiet_s: 120}",
        "storm: {max_nodes: 20, window_s: 300, quiet_s: 600}",
    )
    .replace("budgets:\n", "budgets:\n  domains: {leaf: {max_fraction: 0.5, max_nodes: 2}}\n")
)


async def test_a_storm_never_exceeds_the_budget_opens_the_breaker_and_accounts_for_every_alert(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = service(tmp_path, STORM_POLICY, clock=clock, topology=topology_file(tmp_path, 500))
    flagged = [f"gpu-node-{i:03d}" for i in range(1, 501, 5)] + [
        f"gpu-node-{i:03d}" for i in range(3, 501, 5)
    ]  # 200 nodes = 40%
    alerts = [alert(n, fp=f"fp-{n}-{k}", gpu=str(k)) for k in range(5) for n in flagged]
    assert len(alerts) == 1000
    max_out = 0
    async with TestClient(TestServer(build_app(svc))) as client:
        for i in range(0, 1000, 25):  # 40 webhooks, 1.5 s apart: all within a minute
            r = await client.post("/alertmanager", data=payload(*alerts[i : i + 25]), headers=AUTH)
            assert r.status == 200
            await svc.worker.idle(60)
            out = sum(1 for n in svc.backend.fleet() if n.out_of_service)
            max_out = max(max_out, out, len(svc.journal.held_nodes()))
            clock.advance(1.5)
        metrics = await (await client.get("/metrics")).text()
    assert 0 < max_out <= 15
    assert f"{catalog.REMEDIATION_BREAKER_OPEN.name} 1.0" in metrics
    assert svc.journal.get("breaker_opened_at") is not None
    rows = svc.journal.rows(
        "SELECT a.key, COUNT(d.id) AS n FROM alerts a LEFT JOIN decisions d ON d.alert_key=a.key "
        "GROUP BY a.key"
    )
    assert len(rows) == 1000 and all(r["n"] >= 1 for r in rows)
    guards = {r["guard"] for r in svc.journal.rows("SELECT DISTINCT guard FROM decisions")}
    assert {"policy", "budget_fleet", "storm_breaker"} <= guards
    per_leaf = Counter(n.domains["leaf"] for n in svc.backend.fleet() if n.out_of_service)
    assert per_leaf and max(per_leaf.values()) <= 2  # the leaf-switch budget held too
    # the breaker closes by itself after a quiet period, no manual reset
    clock.advance(601)
    assert svc.engine.breaker_open() is False
