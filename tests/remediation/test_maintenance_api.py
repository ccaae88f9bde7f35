"""``/api/v1/maintenance`` and ``gpuwarden maintenance`` on the service's dry-run backend:
the plan is a dry run (waves, budget room; nothing recorded), bad requests get a 400 with
the reason and record nothing, a run is driven by the worker's tick, a fault's budget does
not count maintenance nodes not yet operated on (faults win), pause/abort answer, the
progress gauges come from the catalogue, and the CLI renders the plan."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from aiohttp.test_utils import TestClient

from exporter import catalog as c
from remediation.maintenance import cli, store
from remediation.service import Service
from tests.remediation.helpers import AUTH

Pair = tuple[Service, TestClient]
BODY = {"select": {"nodes": "gpu-node-[001-006]"}, "operation": {"kind": "none"},
        "wave_size": 2, "reason": "firmware 1.2"}  # fmt: skip


async def test_a_plan_shows_the_waves_and_the_budget_room_and_records_nothing(
    svc_client: Pair,
) -> None:
    svc, client = svc_client
    r = await client.post("/api/v1/maintenance/plan", json=BODY, headers=AUTH)
    body = await r.json()
    assert r.status == 200, body
    assert body["dry_run"] is True and len(body["waves"]) == 3
    assert sorted(n for w in body["waves"] for n in w) == [f"gpu-node-00{i}" for i in range(1, 7)]
    assert store.ids(svc.journal) == []


async def test_bad_requests_get_a_400_with_the_reason_and_record_nothing(svc_client: Pair) -> None:
    svc, client = svc_client
    bad = [
        ({**BODY, "select": {"nodes": "nope-[1-2]"}}, "unknown to the scheduler"),
        ({**BODY, "operation": {"kind": "flash"}}, "operation.kind"),
        ({**BODY, "wave_size": 0}, "wave_size"),
        ({**BODY, "suite": "missing"}, "no suite named"),
        ({**BODY, "select": {}}, "select"),
    ]
    for body, why in bad:
        r = await client.post("/api/v1/maintenance", json=body, headers=AUTH)
        assert r.status == 400 and why in (await r.json())["error"], (body, await r.text())
    r = await client.post("/api/v1/maintenance", data=b"{nope", headers=AUTH)
    assert r.status == 400
    assert store.ids(svc.journal) == []
    r = await client.post("/api/v1/maintenance", json=BODY)
    assert r.status == 401


async def test_a_run_moves_on_the_tick_and_faults_do_not_count_its_undrained_nodes(
    svc_client: Pair,
) -> None:
    svc, client = svc_client
    r = await client.post("/api/v1/maintenance", json=BODY, headers=AUTH)
    run = await r.json()
    assert r.status == 201, run
    svc.maintenance.tick()  # type: ignore[union-attr]
    r = await client.get(f"/api/v1/maintenance/{run['id']}", headers=AUTH)
    now = await r.json()
    flying = [n["node"] for n in now["nodes"] if n["state"] != "pending"]
    assert len(flying) == 2, now
    assert svc.engine.yielding() <= set(flying)
    text = (await (await client.get("/metrics")).read()).decode()
    assert f'{c.REMEDIATION_MAINTENANCE_PROGRESS.name}{{run="{run["id"]}"}}' in text
    r = await client.post(f"/api/v1/maintenance/{run['id']}/pause", headers=AUTH)
    assert (await r.json())["state"] == "paused"
    r = await client.post(f"/api/v1/maintenance/{run['id']}/abort", headers=AUTH)
    body = await r.json()
    assert body["state"] == "aborted"
    assert all(n["state"] in ("skipped", "done", "operating", "validating") for n in body["nodes"])
    r = await client.post(f"/api/v1/maintenance/{run['id']}/resume", headers=AUTH)
    assert r.status == 409
    r = await client.post("/api/v1/maintenance/99/pause", headers=AUTH)
    assert r.status == 404


def test_the_cli_renders_a_plan_with_its_waves_and_budget_room() -> None:
    body = {"spec": {"nodes": ["a", "b", "c"], "operation": {"kind": "command"}},
            "waves": [["a", "b"], ["c"]], "out_now": ["d"], "headroom": 1, "over_budget": []}  # fmt: skip
    lines = cli.render("plan", body)
    assert lines[0].startswith("dry run: 3 nodes in 2 waves") and "room: 1" in lines[0]
    assert lines[1:] == ["  wave 1: a b", "  wave 2: c"]
    args = cli.parser().parse_args(["start", "--nodes", "gpu-node-[001-004]", "--command",
                                    "ssh {node} /opt/up.sh", "--wave-size", "2"])  # fmt: skip
    req = cli.request_body(args)
    assert req["operation"]["argv"] == ["ssh", "{node}", "/opt/up.sh"]
    assert json.loads(json.dumps(req))["wave_size"] == 2


def test_with_events_on_each_state_change_is_a_maintenance_cloudevent_in_the_outbox(
    tmp_path: Path,
) -> None:
    from remediation.events import cloudevent
    from remediation.journal import Journal
    from remediation.maintenance.model import NodeRun, Operation, Spec

    j = Journal(tmp_path / "s.db")
    store.ensure(j)
    spec = Spec(("a", "b"), Operation("none"), 1)
    run = store.create(j, spec, (NodeRun("a", 0), NodeRun("b", 1)), 10.0, "me")
    moved = dataclasses.replace(run, nodes=(run.nodes[0].to("draining", 11.0, "taken out"),
                                            run.nodes[1]))  # fmt: skip
    store.save(j, run, moved, 11.0, "/gpuwarden/test")
    store.save(j, run, moved, 11.5, "/gpuwarden/test")  # a tick repeated after a crash
    rows = j.rows("SELECT partition, kind, event FROM outbox")
    assert [(r["partition"], r["kind"]) for r in rows] == [("a", "maintenance")]
    event = json.loads(rows[0]["event"])
    assert not cloudevent.problems(event)
    assert event["type"] == "io.gpuwarden.maintenance.v1" and event["subject"] == "a"
    assert event["data"]["state"] == "draining" and event["data"]["run"] == run.id
    assert store.load(j, run.id).nodes[0].state == "draining"  # type: ignore[union-attr]
