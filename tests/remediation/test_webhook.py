"""The webhook and API over HTTP (dry-run backend, fake clock): auth, idempotency, release."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from exporter import catalog
from remediation.app import build_app
from remediation.backends.dryrun import DryRunBackend
from remediation.clock import FakeClock
from remediation.journal import Journal
from remediation.model import NodeView
from remediation.service import Service, build
from remediation.settings import Settings
from tests.realcomp import free_port, self_signed_cert
from tests.remediation.helpers import (
    AUTH,
    LIVE_POLICY,
    TOKEN,
    alert,
    payload,
    service,
    topology_file,
)

Pair = tuple[Service, TestClient]


async def post(client: TestClient, body: bytes, headers: dict[str, str] | None = None) -> int:
    r = await client.post("/alertmanager", data=body, headers=AUTH if headers is None else headers)
    return r.status


def node_rec(svc: Service, node: str) -> dict[str, Any]:
    rec = svc.journal.node(node)
    assert rec is not None, f"{node} not in the journal"
    return rec


def decisions(svc: Service) -> list[dict]:
    return svc.journal.rows("SELECT * FROM decisions ORDER BY id")


async def test_a_firing_alert_is_accepted_decided_and_the_node_drained(svc_client: Pair) -> None:
    svc, client = svc_client
    assert await post(client, payload(alert("gpu-node-003"))) == 200
    await svc.worker.idle()
    [d] = decisions(svc)
    assert (d["node"], d["action"], d["verdict"], d["guard"]) == (
        "gpu-node-003",
        "drain",
        "allow",
        "policy",
    )
    assert svc.backend.is_taken_out("gpu-node-003")
    assert node_rec(svc, "gpu-node-003")["state"] == "quarantined"
    [a] = svc.journal.rows("SELECT * FROM actions")
    assert a["state"] == "done" and a["reason"].startswith("gpuwarden: drain xid_fatal")


async def test_repeats_and_retries_of_one_alert_are_decided_once(svc_client: Pair) -> None:
    svc, client = svc_client
    body = payload(alert("gpu-node-002"))
    for _ in range(3):
        r = await client.post("/alertmanager", data=body, headers=AUTH)
        assert r.status == 200
    await svc.worker.idle()
    assert len(decisions(svc)) == 1
    assert svc.journal.scalar("SELECT repeats FROM alerts") == 2
    assert svc.journal.scalar("SELECT COUNT(*) FROM dry_run_effects WHERE op='take_out'") == 1


async def test_a_resolved_alert_starts_probation_and_release_follows_it(
    svc_client: Pair, clock: FakeClock
) -> None:
    svc, client = svc_client
    await post(client, payload(alert("gpu-node-004")))
    await svc.worker.idle()
    await post(client, payload(alert("gpu-node-004", status="resolved")))
    await svc.worker.idle()
    assert node_rec(svc, "gpu-node-004")["state"] == "probation"
    assert svc.engine.tick() == []  # probation (60 s) not over yet
    clock.advance(61)
    assert svc.engine.tick() == ["gpu-node-004"]
    assert node_rec(svc, "gpu-node-004")["state"] == "released"
    assert not svc.backend.is_taken_out("gpu-node-004")


async def test_a_node_failing_again_soon_after_release_gets_a_longer_probation(
    svc_client: Pair, clock: FakeClock
) -> None:
    svc, client = svc_client
    await post(client, payload(alert("gpu-node-005")))
    await post(client, payload(alert("gpu-node-005", status="resolved")))
    await svc.worker.idle()
    clock.advance(61)
    svc.engine.tick()
    clock.advance(300)
    await post(client, payload(alert("gpu-node-005", starts_at="2026-11-29T11:00:00Z")))
    await svc.worker.idle()
    rec = node_rec(svc, "gpu-node-005")
    assert rec["state"] == "quarantined" and rec["flapped"] == 1 and rec["probation_s"] == 240
    assert rec["action"] == "checkpoint_restart"  # second occurrence: one rung up


async def test_wrong_or_missing_credentials_get_401_and_change_nothing(svc_client: Pair) -> None:
    svc, client = svc_client
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic eDp5"}):
        assert await post(client, payload(alert()), headers) == 401
        r = await client.get("/api/v1/nodes", headers=headers)
        assert r.status == 401
    assert svc.journal.scalar("SELECT COUNT(*) FROM alerts") == 0


async def test_basic_auth_from_a_file_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "basic").write_text("am:pa55\n")
    (tmp_path / "basic").chmod(0o600)
    svc = service(
        tmp_path,
        clock=FakeClock(),
        topology=topology_file(tmp_path, 4),
        webhook_basic_auth_file=tmp_path / "basic",
    )
    async with TestClient(TestServer(build_app(svc))) as client:
        good = "Basic " + base64.b64encode(b"am:pa55").decode()
        assert await post(client, payload(alert()), {"Authorization": good}) == 200
        assert await post(client, payload(alert()), AUTH) == 200  # the token still works


async def test_malformed_payloads_get_400_with_a_reason(svc_client: Pair) -> None:
    svc, client = svc_client
    for body in (
        b"{",
        b"[]",
        b'{"alerts": 3}',
        b'{"version": "3", "alerts": []}',
        b'{"alerts": [{"status": "firing"}]}',
    ):
        r = await client.post("/alertmanager", data=body, headers=AUTH)
        assert r.status == 400
        assert (await r.json())["error"]
    assert svc.journal.scalar("SELECT COUNT(*) FROM alerts") == 0


async def test_an_oversized_body_gets_413(svc_client: Pair) -> None:
    _, client = svc_client
    r = await client.post("/alertmanager", data=b"x" * (2 << 20), headers=AUTH)
    assert r.status == 413


async def test_manual_release_works_and_is_recorded(svc_client: Pair) -> None:
    svc, client = svc_client
    await post(client, payload(alert("gpu-node-006")))
    await svc.worker.idle()
    r = await client.post("/api/v1/nodes/gpu-node-006/release?who=alice", headers=AUTH)
    assert r.status == 200 and (await r.json())["released"]
    last = decisions(svc)[-1]
    assert (last["action"], last["verdict"], last["guard"]) == ("release", "allow", "manual")
    assert "alice" in last["reason"]


async def test_pause_denies_new_actions_until_resumed(svc_client: Pair) -> None:
    svc, client = svc_client
    assert (await client.post("/api/v1/pause", headers=AUTH)).status == 200
    await post(client, payload(alert("gpu-node-007")))
    await svc.worker.idle()
    assert decisions(svc)[-1]["guard"] == "paused"
    await client.post("/api/v1/resume", headers=AUTH)
    await post(client, payload(alert("gpu-node-007")))  # Alertmanager's repeat: decided again
    await svc.worker.idle()
    assert decisions(svc)[-1]["verdict"] == "allow"


async def test_api_lists_nodes_decisions_and_metrics(svc_client: Pair) -> None:
    svc, client = svc_client
    await post(client, payload(alert("gpu-node-008")))
    await svc.worker.idle()
    nodes = await (await client.get("/api/v1/nodes", headers=AUTH)).json()
    assert [n["node"] for n in nodes["nodes"]] == ["gpu-node-008"]
    dec = await (await client.get("/api/v1/decisions?node=gpu-node-008", headers=AUTH)).json()
    assert dec["decisions"][0]["action"] == "drain"
    text = await (await client.get("/metrics")).text()
    assert (
        f'{catalog.REMEDIATION_DECISIONS.name}{{action="drain",guard="policy",verdict="allow"}} 1.0'
        in text
    )
    assert f'{catalog.REMEDIATION_NODES_QUARANTINED.name}{{state="quarantined"}} 1.0' in text
    assert (await client.get("/healthz")).status == 200


async def test_tls_is_served_when_a_certificate_is_given(tmp_path: Path) -> None:
    cert, key = self_signed_cert(tmp_path)
    svc = service(
        tmp_path,
        clock=FakeClock(),
        topology=topology_file(tmp_path, 4),
        tls_cert_file=cert,
        tls_key_file=key,
    )
    runner = web.AppRunner(build_app(svc))
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=svc.ssl_context()).start()
    try:
        trust = ssl.create_default_context(cafile=str(cert))
        async with aiohttp.ClientSession() as s:
            url = f"https://127.0.0.1:{port}/alertmanager"
            async with s.post(url, data=payload(alert()), headers=AUTH, ssl=trust) as r:
                assert r.status == 200
    finally:
        await runner.cleanup()


async def test_healthz_says_503_with_the_reason_when_the_worker_is_gone(svc_client: Pair) -> None:
    svc, client = svc_client
    assert svc.worker.main is not None
    svc.worker.main.cancel()
    await asyncio.sleep(0.05)
    r = await client.get("/healthz")
    assert r.status == 503 and (await r.json())["error"] == "worker not running"


async def test_a_failing_validation_command_blocks_the_automatic_release(
    tmp_path: Path, clock: FakeClock
) -> None:
    text = LIVE_POLICY + "validate_command: [/bin/false, '{node}']\n"
    svc = service(tmp_path, text, clock=clock, topology=topology_file(tmp_path, 4))
    async with TestClient(TestServer(build_app(svc))) as client:
        await post(client, payload(alert("gpu-node-001")))
        await post(client, payload(alert("gpu-node-001", status="resolved")))
        await svc.worker.idle()
        clock.advance(61)
        assert svc.engine.tick() == []
        assert decisions(svc)[-1]["guard"] == "validation"
        assert node_rec(svc, "gpu-node-001")["state"] == "probation"


class BrokenBackend(DryRunBackend):
    """A backend with a bug (a hand-written fake)."""

    def fleet(self) -> tuple[NodeView, ...]:
        raise ZeroDivisionError("bug")


async def test_a_bug_while_deciding_is_a_recorded_denial_and_the_service_stays_healthy(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.yaml").write_text(LIVE_POLICY)
    s = Settings(
        policy=tmp_path / "policy.yaml", state_db=tmp_path / "s.db", webhook_token=TOKEN, tick_s=0.2
    )
    journal_for_fake = Journal(tmp_path / "fake.db")
    svc = build(s, clock=FakeClock(), backend=BrokenBackend(journal_for_fake))
    async with TestClient(TestServer(build_app(svc))) as client:
        assert await post(client, payload(alert())) == 200
        await svc.worker.idle()
        [d] = decisions(svc)
        assert (d["verdict"], d["guard"]) == ("deny", "error") and "ZeroDivisionError" in d[
            "reason"
        ]
        assert (await client.get("/healthz")).status == 200
    journal_for_fake.close()
