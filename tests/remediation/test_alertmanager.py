"""Real Alertmanager -> webhook with bearer auth -> decisions; a silence pauses that node."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog
from remediation.app import build_app
from remediation.pager import ALERTNAME
from remediation.silences import AlertmanagerSilences
from tests.realcomp import free_port, run_alertmanager
from tests.remediation.helpers import (
    AUTH,
    LIVE_POLICY,
    TOKEN,
    alert,
    payload,
    service,
    topology_file,
)

AM_CONFIG = """
route:
  receiver: gpuwarden
  group_by: [alertname, node]
  group_wait: 0s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: gpuwarden
    webhook_configs:
      - url: http://127.0.0.1:{port}/alertmanager
        send_resolved: true
        http_config:
          authorization: {{type: Bearer, credentials: {token}}}
"""


def silence(am_url: str, node: str) -> str:
    now = datetime.now(UTC)
    body = {
        "matchers": [{"name": "node", "value": node, "isRegex": False, "isEqual": True}],
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(hours=1)).isoformat(),
        "createdBy": "test",
        "comment": "maintenance",
    }
    req = urllib.request.Request(
        f"{am_url}/api/v2/silences",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=5) as r:
        return str(json.loads(r.read())["silenceID"])


async def wait_decision(svc, node: str, timeout: float = 15.0) -> dict:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while True:
            rows = svc.journal.rows("SELECT * FROM decisions WHERE node=? ORDER BY id", (node,))
            if rows:
                return rows[-1]
            await asyncio.sleep(0.05)


@pytest.mark.real
async def test_alerts_through_alertmanager_reach_the_webhook_with_auth_and_a_silence_pauses_the_node(
    tmp_path: Path,
) -> None:
    port = free_port()
    with run_alertmanager(AM_CONFIG.format(port=port, token=TOKEN)) as am:
        svc = service(tmp_path, topology=topology_file(tmp_path, 10), alertmanager=am.url)
        async with TestClient(TestServer(build_app(svc), host="127.0.0.1", port=port)) as client:
            a = alert("gpu-node-001")
            am.post_alerts([{"labels": dict(a.labels), "annotations": dict(a.annotations)}])
            d = await wait_decision(svc, "gpu-node-001")
            assert (d["action"], d["verdict"], d["guard"]) == ("drain", "allow", "policy")
            [row] = svc.journal.rows("SELECT fingerprint, starts_at FROM alerts")
            assert len(row["fingerprint"]) == 16 and row["starts_at"]  # Alertmanager's own
            metrics = await (await client.get("/metrics")).text()
            assert f'{catalog.REMEDIATION_WEBHOOK_REQUESTS.name}{{code="200"}}' in metrics
            assert "unauthorized" not in metrics

            silence(am.url, "gpu-node-002")
            r = await client.post(
                "/alertmanager", data=payload(alert("gpu-node-002")), headers=AUTH
            )
            assert r.status == 200
            d = await wait_decision(svc, "gpu-node-002")
            assert (d["verdict"], d["guard"]) == ("deny", "silenced")
            assert not svc.backend.is_taken_out("gpu-node-002")


def test_an_unreachable_alertmanager_is_unknown_not_unsilenced() -> None:
    assert (
        AlertmanagerSilences(f"http://127.0.0.1:{free_port()}", 0.5).silenced({"node": "x"}) is None
    )


@pytest.mark.real
async def test_an_opening_storm_breaker_pages_a_human_through_alertmanager(tmp_path: Path) -> None:
    port = free_port()
    with run_alertmanager(AM_CONFIG.format(port=port, token=TOKEN)) as am:
        policy = LIVE_POLICY.replace("storm: {max_nodes: 50,", "storm: {max_nodes: 1,")
        svc = service(tmp_path, policy, topology=topology_file(tmp_path, 10), alertmanager=am.url)
        async with TestClient(TestServer(build_app(svc), host="127.0.0.1", port=port)) as client:
            body = payload(alert("gpu-node-001"), alert("gpu-node-002"))
            assert (await client.post("/alertmanager", data=body, headers=AUTH)).status == 200
            await svc.worker.idle()
            assert svc.journal.rows("SELECT guard FROM decisions WHERE node='gpu-node-002'") == [
                {"guard": "storm_breaker"}
            ]
            with urllib.request.urlopen(f"{am.url}/api/v2/alerts", timeout=5) as r:
                names = {a["labels"]["alertname"] for a in json.loads(r.read())}
            assert ALERTNAME in names
