"""kill -9 of the delivering process loses no event: the outbox under a real receiver that
fails (5xx) and restarts, while findings keep arriving in the journal.

The relay runs as its own process (``python -m remediation.events``, the service's Relay)
and is killed with SIGKILL at random moments, over and over. At the end every finding the
journal accepted reached the receiver, each node's in the order the journal took them, and
an event reached it twice only where its acknowledgement was lost: the relay was killed, or
the receiver restarted, between the receiver's 2xx and the relay's commit. ``make soak``
runs it with GPUWARDEN_EVENTS_SOAK_KILLS=40 (and the whole service, below, 10 times).
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections import defaultdict
from pathlib import Path

from remediation.events import capture, outbox
from remediation.events.filter import Filter
from remediation.journal import Journal
from tests.realcomp import free_port, wait_until
from tests.remediation.events_receiver import Receiver
from tests.remediation.helpers import (
    LIVE_POLICY,
    TOKEN,
    alert,
    payload,
    start_service,
    topology_file,
)

ROOT = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("GPUWARDEN_EVENTS_SOAK_KILLS", "4"))
NODES = 6


def relay(db: Path, url: str) -> subprocess.Popen[bytes]:
    log = (db.parent / "relay.log").open("ab")
    return subprocess.Popen(
        [sys.executable, "-m", "remediation.events", "--state-db", str(db), "--events-url", url,
         "--events-interval-s", "0.02", "--events-backoff-s", "0.02",
         "--events-backoff-max-s", "0.2", "--events-timeout-s", "5"],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=log, stderr=log,
    )  # fmt: skip


def produce(journal: Journal, total: int, done: threading.Event) -> None:
    """Findings for NODES nodes, interleaved, a few at a time (the webhook's commits)."""
    i = 0
    while i < total:
        batch = [
            alert(f"gpu-node-{(i + k) % NODES + 1:03d}", fp=f"fp-{i + k}", i=str(i + k))
            for k in range(min(5, total - i))
        ]
        journal.accept(batch, time.time())
        i += len(batch)
        time.sleep(0.01)
    done.set()


def test_kill_9_of_the_relay_mid_delivery_loses_nothing_and_keeps_each_nodes_order(
    tmp_path: Path,
):
    rng = random.Random(35)
    db = tmp_path / "state.db"
    journal = Journal(db)
    capture.capture(journal, "/t", Filter(), time.time)  # the relay starts at the present
    receiver = Receiver(fail_rate=0.1, seed=35, delay_s=0.003)  # busier than the relay
    total = 60 * KILLS
    done = threading.Event()
    producer = threading.Thread(target=produce, args=(journal, total, done), daemon=True)
    cuts: list[float] = []  # when an acknowledgement could be lost: a kill, a receiver stop
    kills: list[float] = []
    producer.start()
    try:
        for k in range(KILLS):
            p = relay(db, receiver.url)
            time.sleep(rng.uniform(0.4, 1.0))
            p.send_signal(signal.SIGKILL)
            cuts.append(time.monotonic())
            kills.append(cuts[-1])
            p.wait()
            if k % 3 == 1:  # the receiver restarts too (down while the relay comes back)
                receiver.stop()
                cuts.append(time.monotonic())
                time.sleep(0.2)
                receiver.start()
        p = relay(db, receiver.url)
        try:
            end = time.monotonic() + 60 + KILLS
            while True:
                rows = journal.read("SELECT state, COUNT(*) AS n FROM outbox GROUP BY state")
                by = {r["state"]: r["n"] for r in rows}
                if done.is_set() and by.get("delivered", 0) == total:
                    break
                assert time.monotonic() < end, f"not delivered in time: {by}"
                time.sleep(0.05)
        finally:
            p.kill()
            p.wait()
        deliveries = receiver.settled()
    finally:
        receiver.stop()
    assert all(d.problems == [] for d in deliveries)
    assert outbox.counts(journal)[outbox.DEAD] == {}
    rows = journal.read("SELECT id, partition FROM outbox ORDER BY seq")
    assert len(rows) == total
    want: dict[str, list[str]] = defaultdict(list)
    for r in rows:
        want[r["partition"]].append(r["id"])
    acked = [d for d in deliveries if 200 <= d.status < 300]
    got: dict[str, list[str]] = defaultdict(list)
    seen: dict[str, list[float]] = defaultdict(list)
    for d in acked:
        got[d.event["partitionkey"]].append(d.event["id"])
        seen[d.event["id"]].append(d.at)
    # every event, each node's in journal order (a repeat only right after itself)
    for node, ids in want.items():
        collapsed = [x for i, x in enumerate(got[node]) if i == 0 or got[node][i - 1] != x]
        assert collapsed == ids, node
        produced = [int(d.event["data"]["labels"]["i"]) for d in acked
                    if d.event["partitionkey"] == node]  # fmt: skip
        assert produced == sorted(produced)
    # a duplicate only where an acknowledgement could have been lost: a kill or a receiver
    # stop between the two (a request written just before a kill is read by the receiver just
    # after it, hence the 0.1 s of slack; a relay takes longer than that to start again)
    duplicates = {i: ts for i, ts in seen.items() if len(ts) > 1}
    for eid, ts in duplicates.items():
        for first, again in itertools.pairwise(ts):
            near = min(cuts, key=lambda c: abs(c - first))
            assert any(first - 0.1 <= c <= again for c in cuts), (eid, first, again, near)
    assert len(duplicates) <= len(cuts)
    # the kills hit a relay at work: a request arrived in the 50 ms before many of them
    busy = sum(any(k - 0.05 <= d.at <= k for d in deliveries) for k in kills)
    assert busy >= max(1, len(kills) // 3), f"only {busy} of {len(kills)} kills mid-delivery"
    failed = [d for d in deliveries if d.status >= 500]
    assert failed, "the receiver never failed: the test did not test retries"
    print(f"{total} events, {KILLS} kills ({busy} mid-delivery), {len(failed)} 5xx answers, "
          f"{len(duplicates)} duplicates")  # fmt: skip


def post(port: int, body: bytes) -> int:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/alertmanager", data=body, method="POST",
        headers={"Authorization": f"Bearer {TOKEN}"},
    )  # fmt: skip
    with urllib.request.urlopen(req, timeout=10) as r:
        return int(r.status)


def test_kill_9_of_the_service_loses_no_finding_decision_or_action_event(tmp_path: Path):
    """The whole service (``python -m remediation --events-url``) taking webhooks, deciding,
    acting (dry-run backend) and sending events, killed with SIGKILL again and again."""
    rng = random.Random(3535)
    (tmp_path / "policy.yaml").write_text(LIVE_POLICY)
    topology_file(tmp_path, 12)
    receiver = Receiver(fail_rate=0.1, seed=7, delay_s=0.003)
    extra = ["--events-url", receiver.url, "--events-interval-s", "0.05",
             "--events-backoff-s", "0.02", "--events-backoff-max-s", "0.2"]  # fmt: skip
    runs, cuts, n = max(3, KILLS // 4), [], 0
    try:
        for r in range(runs):
            port = free_port()
            proc = start_service(tmp_path, port, None, *extra)
            for _ in range(rng.randint(5, 15)):
                a = alert(f"gpu-node-{rng.randint(1, 12):03d}", fp=f"fp{n}",
                          starts_at=f"2026-11-29T10:{n // 60:02d}:{n % 60:02d}Z")  # fmt: skip
                n += 1
                assert post(port, payload(a)) == 200
            time.sleep(rng.uniform(0.05, 0.4))
            os.kill(proc.pid, signal.SIGKILL)
            cuts.append(time.monotonic())
            proc.wait(5)
            if r % 2:
                receiver.stop()
                cuts.append(time.monotonic())
                time.sleep(0.2)
                receiver.start()
        proc = start_service(tmp_path, free_port(), None, *extra)
        journal = Journal(tmp_path / "state.db")
        try:

            def settled() -> bool:
                return not journal.read(
                    "SELECT 1 FROM alerts WHERE processed=0 UNION ALL SELECT 1 FROM actions "
                    "WHERE state IN ('pending','waiting','retry') OR "
                    "IFNULL(evented,'')!=state||'/'||attempts UNION ALL "
                    "SELECT 1 FROM outbox WHERE state='pending'"
                )

            wait_until(settled, 60, 0.05, "every event delivered")
        finally:
            proc.kill()
            proc.wait(5)
        deliveries = receiver.settled()
    finally:
        receiver.stop()
    assert all(d.problems == [] for d in deliveries)
    rows = journal.read("SELECT id, partition, kind, state FROM outbox ORDER BY seq")
    assert {r["state"] for r in rows} == {"delivered"}
    kinds = {k: sum(r["kind"] == k for r in rows) for k in ("finding", "decision", "action")}
    alerts_n = journal.read("SELECT COUNT(*) AS n FROM alerts WHERE stale=0")[0]["n"]
    decisions_n = journal.read("SELECT COUNT(*) AS n FROM decisions")[0]["n"]
    assert (kinds["finding"], kinds["decision"]) == (alerts_n, decisions_n) and alerts_n == n
    acked = [d.event for d in deliveries if 200 <= d.status < 300]
    finals = {(e["data"]["action_id"], e["data"]["state"]) for e in acked
              if e["type"] == "io.gpuwarden.action.v1"}  # fmt: skip
    for act in journal.read("SELECT id, state FROM actions"):
        assert (act["id"], act["state"]) in finals  # each action's outcome went out
    want: dict[str, list[str]] = defaultdict(list)
    for row in rows:
        want[row["partition"]].append(row["id"])
    got: dict[str, list[str]] = defaultdict(list)
    for e in acked:
        got[e.get("partitionkey", "")].append(e["id"])
    for node, ids in want.items():
        collapsed = [x for i, x in enumerate(got[node]) if i == 0 or got[node][i - 1] != x]
        assert collapsed == ids, node
    seen: dict[str, list[float]] = defaultdict(list)
    for d in deliveries:
        if 200 <= d.status < 300:
            seen[d.event["id"]].append(d.at)
    for eid, ts in seen.items():
        for first, again in itertools.pairwise(ts):
            assert any(first - 0.1 <= c <= again for c in cuts), eid
    print(f"service: {n} alerts, {len(rows)} events, {runs} kills, "
          f"{sum(len(t) - 1 for t in seen.values())} duplicates")  # fmt: skip
