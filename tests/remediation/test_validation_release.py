"""Validation before release, through the engine and the tick, on a fake clock.

The suite runs on this host (LocalSuiteRunner) with stub commands that print recorded tool
outputs (fixtures/validation); the Slurm path is tested against the real slurmctld in
test_validation_e2e_slurm.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from common.settings import SettingsError
from remediation import cli as remediation_cli
from remediation import policy as policy_mod
from remediation import quarantine_cli
from remediation.app import build_app
from remediation.clock import FakeClock
from remediation.service import Service, build
from remediation.settings import Settings
from remediation.validation.release import LocalSuiteRunner
from tests.remediation.helpers import AUTH, TOKEN, alert, topology_file

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "validation"
NODE = "gpu-node-002"

POLICY = """
dry_run: false
auto_release: true
rules:
  - match: {fault_class: "~nvlink|xid_fatal"}
    allow: [notify, drain, checkpoint_restart, requeue, reboot, inspect]
ladders:
  nvlink: [drain, checkpoint_restart, reboot, inspect]
inspect_after: 5
budgets: {fleet: {max_fraction: 0.5, max_nodes: 100}, per_job_max_nodes: 1}
rate_limit: {max_actions: 100, window_s: 60}
storm: {max_nodes: 50, window_s: 60, quiet_s: 120}
probation_s: 60
checkpoint: {ack_dir: /tmp, deadline_s: 5, on_timeout: requeue, restart_deadline_s: 30}
validation:
  suites:
    nvlink-check:
      - {name: nccl, command: [STUB], timeout_s: 20, parser: nccl-tests,
         min: {busbw_at_max_size_gbps: 300}}
  fault_classes: {nvlink: nvlink-check}
  max_attempts: MAX
  MORE
"""


def stub(tmp: Path, outputs: list[str], delay: float = 0.0) -> Path:
    """A tool that prints the next recorded output each time it runs (the last one after),
    ``delay`` seconds after it starts."""
    for i, name in enumerate(outputs):
        (tmp / f"out{i}").write_text((FIX / name).read_text())
    s = tmp / "stub.sh"
    s.write_text(
        f"#!/bin/sh\nn=$(cat {tmp}/count 2>/dev/null || echo 0)\necho $((n+1)) > {tmp}/count\n"
        f'i=$n; [ "$i" -ge {len(outputs)} ] && i={len(outputs) - 1}\nsleep {delay:g}\n'
        f"cat {tmp}/out$i\n"
    )
    s.chmod(0o755)
    return s


def make(tmp: Path, clock: FakeClock, outputs: list[str], max_attempts: int = 3,
         more: str = "", delay: float = 0.0) -> Service:  # fmt: skip
    text = (
        POLICY.replace("STUB", str(stub(tmp, outputs, delay)))
        .replace("MAX", str(max_attempts))
        .replace("MORE", more)
    )
    (tmp / "policy.yaml").write_text(text)
    s = Settings(policy=tmp / "policy.yaml", state_db=tmp / "state.db", webhook_token=TOKEN,
                 topology=topology_file(tmp, 4), tick_s=0.2)  # fmt: skip
    return build(s, clock=clock, suite_runner=LocalSuiteRunner(str(tmp / "runs")))


def stop_suites(svc: Service) -> None:
    """Kill every suite a test left running and every step under it (no orphan outlives the
    test: mutmut reaps orphans and trips on them). A step runs under coreutils ``timeout``,
    which makes a process group of its own, so the suite's group alone is not enough: the
    group of everything that runs from the test's directory (the suite script, ``timeout``
    and the stub with its children) is killed."""
    runner = svc.validator.runner
    assert isinstance(runner, LocalSuiteRunner)
    found = subprocess.run(
        ["pgrep", "-f", str(runner.out_dir.parent)], capture_output=True, text=True, check=False
    )
    groups = set()
    for pid in map(int, found.stdout.split()):
        with contextlib.suppress(ProcessLookupError):
            groups.add(os.getpgid(pid))
    for group in groups - {os.getpgrp()}:  # each group whole: the stub's own children too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(group, signal.SIGKILL)
    for p in list(runner.procs.values()):
        p.wait(5)


def process(svc: Service) -> None:
    """What the worker does in one cycle, synchronously: decide, run actions."""
    for _, a in svc.journal.todo():
        svc.engine.decide(a)
    for row in svc.journal.pending_actions():
        svc.executor.run(row)


def fault_then_resolve(svc: Service, clock: FakeClock) -> None:
    firing = alert(NODE, "nvlink", "drain", starts_at="2026-11-29T10:00:00Z")
    svc.journal.accept([firing], clock.now())
    process(svc)
    resolved = alert(NODE, "nvlink", "drain", status="resolved", starts_at=firing.starts_at)
    svc.journal.accept([resolved], clock.now())
    process(svc)


def until_concluded(svc: Service, timeout: float = 15.0) -> dict[str, Any]:
    """Tick (as the worker does) until no validation runs; returns the last one."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        svc.engine.tick()
        process(svc)
        [last] = svc.validator.list(NODE, 1)
        if last["state"] != "running":
            return last
        time.sleep(0.05)
    raise AssertionError("validation still running")


def state(svc: Service) -> str:
    return str(svc.journal.node(NODE)["state"])  # type: ignore[index]


def actions(svc: Service) -> list[str]:
    return [r["action"] for r in svc.journal.rows("SELECT action FROM actions ORDER BY id")]


def test_a_failed_suite_keeps_the_node_out_and_escalates_then_a_pass_releases_it(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt", "all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    assert state(svc) == "probation"
    clock.advance(61)
    svc.engine.tick()
    assert state(svc) == "validating"  # probation passed: the suite runs first, node still out
    first = until_concluded(svc)
    assert first["state"] == "failed" and first["trigger"] == "probation"
    [step] = first["evidence"]["steps"]
    assert step["measurements"]["busbw_at_max_size_gbps"] < 300
    assert any("below the minimum 300" in r for r in step["reasons"])
    # the node stays out, one rung up the nvlink ladder, and probation starts over
    assert actions(svc) == ["drain", "checkpoint_restart"]
    assert state(svc) in ("quarantined", "probation")
    esc = svc.journal.rows("SELECT * FROM decisions WHERE action='checkpoint_restart'")[0]
    assert esc["verdict"] == "allow"
    assert json.loads(esc["evidence"])["labels"]["validation_failed"] == str(first["id"])
    deny = svc.journal.rows("SELECT * FROM decisions WHERE action='validate' AND verdict='deny'")
    assert json.loads(deny[0]["evidence"])["steps"][0]["step"] == "nccl"
    # visible where the operator looks
    [row] = [n for n in svc.nodes() if n["node"] == NODE]
    assert row["validation"]["state"] == "failed"
    assert "nccl: busbw_at_max_size_gbps" in row["validation"]["reason"]
    lines = quarantine_cli.render("list", {"paused": 0, "breaker_open": 0, "dry_run": 0, "backend": "x",
                            "nodes": svc.nodes()})  # fmt: skip
    assert "validation failed" in lines[1]
    svc.engine.tick()
    assert state(svc) == "probation"
    clock.advance(61)
    svc.engine.tick()
    second = until_concluded(svc)
    assert second["state"] == "passed"
    assert state(svc) == "released"
    last = svc.journal.rows("SELECT * FROM decisions WHERE action='release' ORDER BY id DESC")[0]
    assert last["verdict"] == "allow" and f"validation {second['id']}" in last["reason"]


def test_a_suite_past_its_deadline_fails_closed_and_escalates(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"], more="timeout_s: 30")
    (tmp_path / "stub.sh").write_text("#!/bin/sh\nsleep 30\n")
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    assert state(svc) == "validating"
    clock.advance(31)
    last = until_concluded(svc)
    assert last["state"] == "failed" and "timed out after 30 s" in last["reason"]
    assert actions(svc) == ["drain", "checkpoint_restart"]
    stop_suites(svc)  # the stub sleeps on in timeout's own process group


def test_a_runner_that_cannot_start_is_a_failed_validation(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])

    class Broken(LocalSuiteRunner):
        def start(self, *a: Any) -> dict[str, Any]:
            raise OSError("sbatch: No such file or directory")

    svc.validator.runner = Broken(str(tmp_path))
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    [last] = svc.validator.list(NODE, 1)
    assert last["state"] == "failed"
    assert "could not start: OSError: sbatch: No such file" in last["reason"]
    assert state(svc) in ("quarantined", "probation") and actions(svc)[-1] == "checkpoint_restart"


def test_the_max_attempts_failure_sends_the_node_to_inspection(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt"], max_attempts=2)
    fault_then_resolve(svc, clock)
    for _ in range(2):
        svc.engine.tick()
        clock.advance(61)
        svc.engine.tick()
        assert until_concluded(svc)["state"] == "failed"
    assert actions(svc) == ["drain", "checkpoint_restart", "inspect"]
    assert state(svc) == "inspection"
    clock.advance(10_000)
    svc.engine.tick()
    assert state(svc) == "inspection"  # left only by hand


def test_a_new_alert_during_the_suite_cancels_it(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    (tmp_path / "stub.sh").write_text("#!/bin/sh\nsleep 30\n")
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    again = alert(NODE, "nvlink", "drain", fp="fp-new", starts_at="2026-11-29T11:00:00Z")
    svc.journal.accept([again], clock.now())
    process(svc)
    last = until_concluded(svc)
    assert last["state"] == "cancelled" and "a new alert" in last["reason"]
    assert state(svc) == "quarantined"
    stop_suites(svc)  # the stub sleeps on in timeout's own process group


def test_the_validation_section_is_checked_at_start_up() -> None:
    base = (
        "validation:\n  suites: {s: [{name: a, command: [x], timeout_s: 1, parser: nccl-tests}]}\n"
    )
    assert policy_mod.loads(base).validation.suite_for("nvlink") is None
    p = policy_mod.loads(base + "  before_release: s\n  manual_release: true\n")
    assert p.validation.suite_for("nvlink").name == "s"  # type: ignore[union-attr]
    assert any("manual releases too" in line for line in p.validation.describe())
    for bad, words in [
        ("  before_release: nope\n", "no suite named 'nope'"),
        ("  fault_classes: {nvlink: nope}\n", "validation.fault_classes.nvlink"),
        ("  max_attempts: 0\n", "max_attempts"),
        ("  timeout_s: -1\n", "timeout_s"),
        ("  out_dir: relative\n", "out_dir"),
        ("  retries: 2\n", "unknown key(s) retries"),
    ]:
        with pytest.raises(SettingsError, match=words.replace("(", r"\(").replace(")", r"\)")):
            policy_mod.loads(base + bad)


async def test_on_demand_validation_over_the_api_is_journaled_and_changes_nothing(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    # the suite runs a second: still running when the second request comes (not finished
    # and concluded by a tick in between on a busy machine)
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt"], delay=1.0)
    fault_then_resolve(svc, clock)
    async with TestClient(TestServer(build_app(svc))) as client:
        r = await client.post(f"/api/v1/nodes/{NODE}/validate")
        assert r.status == 401
        r = await client.post(f"/api/v1/nodes/{NODE}/validate?who=ops", headers=AUTH)
        assert r.status == 202
        run = (await r.json())["validation"]
        assert run["trigger"] == "on_demand" and run["who"] == "ops"
        r = await client.post(f"/api/v1/nodes/{NODE}/validate", headers=AUTH)
        assert r.status == 409 and "already running" in (await r.json())["error"]
        r = await client.post("/api/v1/nodes/gpu-node-004/validate", headers=AUTH)
        assert r.status == 409 and "not held" in (await r.json())["error"]
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            body = await (await client.get(f"/api/v1/validations/{run['id']}", headers=AUTH)).json()
            if body["state"] not in ("running", "stopping"):  # stopping: the stop's read-back
                break
            await asyncio.sleep(0.1)
        assert body["state"] == "failed"
        nodes = await (await client.get("/api/v1/nodes", headers=AUTH)).json()
    assert state(svc) == "probation" and actions(svc) == ["drain"]  # nothing else changed
    [row] = [n for n in nodes["nodes"] if n["node"] == NODE]
    assert row["validation"]["id"] == run["id"]


async def test_a_manual_release_is_validated_first_when_the_policy_says_so(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"], more="manual_release: true")
    fault_then_resolve(svc, clock)
    async with TestClient(TestServer(build_app(svc))) as client:
        r = await client.post(f"/api/v1/nodes/{NODE}/release?who=ops", headers=AUTH)
        assert r.status == 202 and (await r.json())["validation"]["trigger"] == "manual"
        assert state(svc) == "validating"
        r = await client.post(f"/api/v1/nodes/{NODE}/release?who=ops", headers=AUTH)
        body = await r.json()
        assert r.status == 409 and body["guard"] == "validation" and "runs" in body["reason"]
        deadline = time.monotonic() + 15
        while state(svc) == "validating" and time.monotonic() < deadline:
            svc.worker.wake.set()
            await asyncio.sleep(0.1)
    assert state(svc) == "released"


async def test_quarantine_validate_prints_the_verdict_and_exits_by_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-slow.txt", "all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    monkeypatch.setenv("GPUWARDEN_WEBHOOK_TOKEN", TOKEN)
    async with TestClient(TestServer(build_app(svc))) as client:
        url = str(client.server.make_url("")).rstrip("/")

        def cli(*argv: str) -> int:
            return quarantine_cli.main(["--url", url, *argv])

        assert await asyncio.to_thread(cli, "validate", NODE) == 1
        out = capsys.readouterr().out
        assert f"of {NODE}: failed (suite nvlink-check, on_demand by" in out
        assert "nccl: FAILED (avg_busbw_gbps=110.991" in out
        assert "busbw_at_max_size_gbps 292.79 below the minimum 300" in out
        assert await asyncio.to_thread(cli, "validate", NODE, "--suite", "nvlink-check") == 0
        assert "passed" in capsys.readouterr().out
        assert await asyncio.to_thread(cli, "validate", "gpu-node-004") == 1
        assert "not held by gpuwarden" in capsys.readouterr().out
        assert await asyncio.to_thread(cli, "list") == 0
        assert "validation passed" in capsys.readouterr().out
    assert state(svc) == "probation"


def test_check_prints_the_validation_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make(tmp_path, FakeClock(), ["all_reduce_perf-8gpu.txt"]).journal.close()
    argv = ["--policy", str(tmp_path / "policy.yaml"), "--state-db", str(tmp_path / "c.db"),
            "--check", "--allow-unauthenticated"]  # fmt: skip
    assert remediation_cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "validation suite nvlink-check: nccl (nccl-tests, 20 s); deadline 620 s" in out
    assert "nvlink -> nvlink-check; manual releases not validated; inspection after 3" in out


def test_a_crash_between_a_verdict_and_its_consequence_validates_again(tmp_path: Path) -> None:
    clock = FakeClock()
    svc = make(tmp_path, clock, ["all_reduce_perf-8gpu.txt"])
    fault_then_resolve(svc, clock)
    clock.advance(61)
    svc.engine.tick()
    [first] = svc.validator.list(NODE, 1)
    svc.validator.runner.stop(json.loads(  # type: ignore[union-attr]
        svc.journal.rows("SELECT handle FROM validations")[0]["handle"]), "failed")  # fmt: skip
    with svc.journal.tx() as db:  # the verdict was committed, then the process died
        db.execute("UPDATE validations SET state='passed' WHERE id=?", (first["id"],))
    assert state(svc) == "validating"
    svc.engine.tick()  # never stuck: probation is over, so the suite runs again
    runs = svc.validator.list(NODE, 5)
    assert len(runs) == 2 and runs[0]["state"] == "running" and state(svc) == "validating"
    assert until_concluded(svc)["state"] == "passed" and state(svc) == "released"
