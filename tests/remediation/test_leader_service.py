"""``python -m remediation --leader-elect directory`` (the bare-metal standby,
remediation/leader): what a standby answers, the fail-stop of a leader whose lease was taken,
and the settings a start refuses with a clear line."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from exporter import catalog
from remediation.leader.directory import RECORD
from remediation.leader.run import LOST_EXIT
from tests.realcomp import free_port, wait_until
from tests.remediation.helpers import (
    LIVE_POLICY,
    REPO,
    TOKEN,
    get_status,
    post_webhook,
    start_service,
)

FLAGS = ["--leader-elect", "directory", "--leader-lease-s", "4", "--leader-renew-deadline-s",
         "3", "--leader-retry-s", "0.5"]  # fmt: skip


def _dry(tmp: Path) -> None:
    (tmp / "policy.yaml").write_text(LIVE_POLICY.replace("dry_run: false", "dry_run: true"))


def test_a_leader_whose_lease_is_taken_behind_its_back_exits_within_its_renew_deadline(
    tmp_path: Path,
) -> None:
    _dry(tmp_path)
    lease = tmp_path / "lease"
    lease.mkdir()
    port = free_port()
    proc = start_service(tmp_path, port, None, *FLAGS, "--leader-dir", str(lease))
    try:
        wait_until(lambda: get_status(f"http://127.0.0.1:{port}/readyz") == 200, 20, 0.1, "leads")
        doc = json.loads((lease / RECORD).read_text())
        assert doc["lease_s"] == 4
        # an operator's hand (or a split brain) writes another holder over it
        doc = {"holder": "intruder", "generation": doc["generation"] + 100, "lease_s": 4}
        (lease / RECORD).write_text(json.dumps(doc))
        t0 = time.monotonic()
        assert proc.wait(10) == LOST_EXIT
        assert time.monotonic() - t0 < 3 + 0.5
    finally:
        proc.kill()
        proc.wait(10)
    log = (tmp_path / "log").read_text()
    assert "lost" in log and f"exit {LOST_EXIT}" in log and "standby" in log


def test_a_standby_with_a_bad_policy_says_so_at_once_rather_than_when_it_takes_over(
    tmp_path: Path,
) -> None:
    (tmp_path / "policy.yaml").write_text("dry_run: maybe\n")
    lease = tmp_path / "lease"
    lease.mkdir()
    argv = [sys.executable, "-m", "remediation", "--policy", str(tmp_path / "policy.yaml"),
            "--state-db", str(tmp_path / "state.db"), "--listen", f"127.0.0.1:{free_port()}",
            *FLAGS, "--leader-dir", str(lease)]  # fmt: skip
    env = {**os.environ, "GPUWARDEN_WEBHOOK_TOKEN": TOKEN}
    got = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert got.returncode == 2, got.stderr
    assert "gpuwarden-remediation:" in got.stderr and "dry_run" in got.stderr
    assert not (tmp_path / "state.db").exists()  # a standby never opened the journal
    assert not (lease / RECORD).exists()


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (["--leader-elect", "directory"], "needs --leader-dir"),
        (["--leader-elect", "kubernetes", "--leader-dir", "/tmp"], "only for --leader-elect"),
        (["--leader-elect", "directory", "--leader-dir", "/nonexistent/x"], "not a directory"),
        (["--leader-elect", "kubernetes", "--leader-lease-s", "10",
          "--leader-renew-deadline-s", "10"], "leader timing"),
        (["--leader-elect", "kubernetes", "--leader-retry-s", "12"], "leader timing"),
        (["--leader-elect", "raft"], "invalid choice"),
    ],
)  # fmt: skip
def test_leader_settings_that_cannot_work_stop_the_start_with_one_line(
    tmp_path: Path, flags: list[str], says: str
) -> None:
    argv = [sys.executable, "-m", "remediation", "--state-db", str(tmp_path / "state.db"),
            "--allow-unauthenticated", *flags]  # fmt: skip
    got = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert got.returncode == 2
    assert says in got.stderr
    assert not (tmp_path / "state.db").exists()


def test_check_with_leader_election_on_validates_without_waiting_for_the_lease(
    tmp_path: Path,
) -> None:
    lease = tmp_path / "lease"
    lease.mkdir()
    (lease / RECORD).write_text(json.dumps({"holder": "other", "generation": 1, "lease_s": 600}))
    argv = [sys.executable, "-m", "remediation", "--state-db", str(tmp_path / "state.db"),
            "--allow-unauthenticated", *FLAGS, "--leader-dir", str(lease), "--check"]  # fmt: skip
    got = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert got.returncode == 0, got.stderr
    assert "ok: backend=dry-run" in got.stdout


def test_a_standby_stopped_by_sigterm_exits_cleanly_without_touching_the_lease(
    tmp_path: Path,
) -> None:
    _dry(tmp_path)
    lease = tmp_path / "lease"
    lease.mkdir()
    held = {"holder": "other", "generation": 7, "lease_s": 600}
    (lease / RECORD).write_text(json.dumps(held))
    port = free_port()
    proc = start_service(tmp_path, port, None, *FLAGS, "--leader-dir", str(lease))
    try:
        assert get_status(f"http://127.0.0.1:{port}/readyz") == 503
        assert get_status(f"http://127.0.0.1:{port}/api/v1/nodes") == 503
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            assert f"{catalog.REMEDIATION_LEADER.name} 0.0" in r.read().decode()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
    finally:
        proc.kill()
        proc.wait(10)
    assert json.loads((lease / RECORD).read_text()) == held
    assert not (tmp_path / "state.db").exists()


def test_a_leader_frozen_past_its_lease_commits_nothing_when_it_thaws_and_exits(
    tmp_path: Path,
) -> None:
    """SIGSTOP the leader (a swap storm, a stalled process) until the standby has taken
    over, then SIGCONT it and hand it a webhook at once: the thawed instance exits 75 and the
    journal holds only what the leaders took in their terms."""
    from tests.remediation.helpers import alert, payload

    _dry(tmp_path)
    lease = tmp_path / "lease"
    lease.mkdir()
    ports = [free_port(), free_port()]
    old = start_service(tmp_path, ports[0], None, *FLAGS, "--leader-dir", str(lease),
                        "--leader-identity", "old")  # fmt: skip
    new = None
    try:
        wait_until(lambda: get_status(f"http://127.0.0.1:{ports[0]}/readyz") == 200, 20, 0.1, "old")
        assert post_webhook(ports[0], payload(alert("gpu-node-001"))) == 200
        new = start_service(tmp_path, ports[1], None, *FLAGS, "--leader-dir", str(lease),
                            "--leader-identity", "new")  # fmt: skip
        old.send_signal(signal.SIGSTOP)
        wait_until(lambda: get_status(f"http://127.0.0.1:{ports[1]}/readyz") == 200, 30, 0.1, "new")
        assert post_webhook(ports[1], payload(alert("gpu-node-002"))) == 200
        old.send_signal(signal.SIGCONT)
        post_webhook(
            ports[0], payload(alert("gpu-node-666"))
        )  # refused, cut off, or never answered
        assert old.wait(10) == LOST_EXIT
        assert get_status(f"http://127.0.0.1:{ports[1]}/readyz") == 200
        assert json.loads((lease / RECORD).read_text())["holder"] == "new"
    finally:
        for p in (old, new):
            if p is not None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait(10)
    db = sqlite3.connect(tmp_path / "state.db")
    assert [r[0] for r in db.execute("SELECT node FROM alerts ORDER BY seq")] == [
        "gpu-node-001", "gpu-node-002"
    ]  # fmt: skip


def test_the_service_it_builds_fences_its_journal_and_releases_the_lease_when_it_stops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``main`` in this process: the lease is free, so it leads at once; the app it would
    serve is caught instead of run. Its journal commits only through the keeper's fence, and
    once the app has stopped the lease is released, not left to expire."""
    import aiohttp.web

    import remediation.app
    from remediation import cli

    _dry(tmp_path)
    lease = tmp_path / "lease"
    lease.mkdir()
    caught: list[object] = []
    real_build = remediation.app.build_app

    def build_app(svc: object) -> object:
        caught.append(svc)
        held = json.loads((lease / RECORD).read_text())["holder"]
        caught.append(held)
        return real_build(svc)  # type: ignore[arg-type]

    monkeypatch.setattr(remediation.app, "build_app", build_app)
    monkeypatch.setattr(aiohttp.web, "run_app", lambda *a, **k: None)
    monkeypatch.setenv("GPUWARDEN_WEBHOOK_TOKEN", TOKEN)
    argv = ["--policy", str(tmp_path / "policy.yaml"), "--state-db", str(tmp_path / "state.db"),
            "--listen", f"127.0.0.1:{free_port()}", *FLAGS, "--leader-dir", str(lease),
            "--leader-identity", "me"]  # fmt: skip
    assert cli.main(argv) == 0
    svc, holder = caught
    assert holder == "me"  # it built the service only once it held the lease
    fence = svc.journal.fence  # type: ignore[attr-defined]
    assert getattr(fence, "__self__", None) is not None and fence.__name__ == "fence"
    assert fence.__self__.elector.identity == "me"
    assert json.loads((lease / RECORD).read_text())["holder"] == ""  # released
    # a journal other hosts open too keeps a rollback journal: WAL's index is one host's
    db = sqlite3.connect(tmp_path / "state.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    db.close()


def test_a_leader_stopped_mid_step_hands_over_only_after_the_step_ends(tmp_path: Path) -> None:
    """SIGTERM while a take-out runs (4 s): the task is cancelled but its thread runs on, so
    the stopping leader keeps the lease until that thread is done; only then may the standby
    act, and its own take-out of the node starts after the first one ended."""
    from tests.remediation.helpers import alert, payload, topology_file

    (tmp_path / "policy.yaml").write_text(LIVE_POLICY)  # live, on the dry-run backend
    topology_file(tmp_path, 4)
    lease = tmp_path / "lease"
    lease.mkdir()
    mark = tmp_path / "mark"
    env = {**os.environ, "GPUWARDEN_WEBHOOK_TOKEN": TOKEN, "MARK": str(mark), "SLOW": "4"}
    script = str(Path(__file__).with_name("slow_step.py"))

    def start(port: int, name: str) -> subprocess.Popen[bytes]:
        argv = [sys.executable, script, "--listen", f"127.0.0.1:{port}", "--policy",
                str(tmp_path / "policy.yaml"), "--state-db", str(tmp_path / "state.db"),
                "--topology", str(tmp_path / "topology.yaml"), "--tick-s", "0.2", *FLAGS,
                "--leader-dir", str(lease), "--leader-identity", name]  # fmt: skip
        log = open(tmp_path / f"log-{name}", "ab")  # noqa: SIM115 - the child keeps its copy
        return subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=log)

    pa, pb = free_port(), free_port()
    a = start(pa, "a")
    b = None
    try:
        wait_until(lambda: get_status(f"http://127.0.0.1:{pa}/readyz") == 200, 30, 0.1, "a leads")
        b = start(pb, "b")
        wait_until(lambda: get_status(f"http://127.0.0.1:{pb}/healthz") == 200, 30, 0.1, "b up")
        assert post_webhook(pa, payload(alert("gpu-node-001"))) == 200
        wait_until(lambda: mark.exists() and " start " in mark.read_text(), 30, 0.05, "a's step")
        a.send_signal(signal.SIGTERM)
        wait_until(lambda: get_status(f"http://127.0.0.1:{pb}/readyz") == 200, 30, 0.05, "b")
        b_leads = time.time()
        assert a.wait(30) == 0
    finally:
        for p in (a, b):
            if p is not None:
                p.kill()
                p.wait(10)
    marks = [line.split() for line in mark.read_text().splitlines()]
    a_end = next(float(t) for pid, what, t in marks if int(pid) == a.pid and what == "end")
    assert b_leads >= a_end, (b_leads, a_end, marks)  # never two in the backend at once
    b_starts = [float(t) for pid, what, t in marks if int(pid) != a.pid and what == "start"]
    assert all(t >= a_end for t in b_starts), marks
